"""Beam search over `kt.decoding.loop`'s loop (`kt.decoding.search` says how every search
decodes): k hypotheses a sentence, ranked by logP(Y) / lp(Y) (`core.rules.length_penalty`).

Each sentence keeps `beam_size` = k alive hypotheses, ranked by their log-probability, and
the k best finished ones, ranked by logP(Y) / lp(Y) with lp(Y) = ((5 + |Y|) / 6) ** alpha
(`ranking="gnmt"`: Wu et al., section 7) or |Y| ** alpha (`"length"`: CTranslate2's and
transformers'), |Y| counting EOS (and forced prefix tokens). Each step takes the 2k best
extensions of the alive hypotheses; the k best of those not ending in EOS stay alive (their
caches follow them: `DecoderCache.reorder`), and those ending in EOS join the finished ones:
all of them with `finish_rule="tensor2tensor"` (the paper's code, tensor2tensor, kept in TF
Model Garden's `sequence_beam_search`), only those ranked among the first k with
`"fairseq"`. Finished hypotheses are never extended. With `stopping="exact"` a sentence
stops when no alive hypothesis can beat its best finished one any more (its log-probability
only falls, and lp is largest at the length limit: tensor2tensor's rule), or at its length
limit; its result is then the best the beam can reach. With `"early"` it stops as soon as
the best alive hypothesis could not beat the best finished one even by ending at the next
step (Hugging Face's `early_stopping=False`; CTranslate2 and OpenNMT stop at about the same
point, when a step's best candidate ends): far fewer steps with a length penalty, and almost
always the same result (BENCHMARKS.md). With `"k_finished"` it stops once k hypotheses have
finished (fairseq's rule, and CTranslate2's with a length penalty: with
`finish_rule="fairseq"` and `ranking="length"` this is CTranslate2's beam search). With
`length_penalty=0` and `finish_rule="fairseq"`, `beam_size=1` is greedy search
(`"tensor2tensor"` also finishes an EOS ranked second, which may score better).
"""

from __future__ import annotations

from keras import ops

from keras_transformer import _backends as backends
from keras_transformer import fast
from keras_transformer.core import rules
from keras_transformer.decoding.loop import (
    NEG_INF,
    _allowed_tokens,
    _batch_size,
    _decoder,
    _forced_token,
    _is_stop,
    _masked,
    _prepare,
    _start_ids,
    _target_prefix,
    _translation,
    _with_forced,
    decode_loop,
)
from keras_transformer.decoding.settings import DEFAULT, FINISH_RULES, RANKINGS, STOPPING
from keras_transformer.special_ids import BOS_ID, EOS_ID


@backends.compiled_search
def beam_search(
    model,
    source_ids,
    *,
    beam_size: int = DEFAULT.beam_size,
    length_penalty: float = DEFAULT.length_penalty,
    finish_rule: str = DEFAULT.finish_rule,
    max_extra_length: int = DEFAULT.max_extra_length,
    max_length: int | None = None,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    use_cache: bool = True,
    num_hypotheses: int | None = None,
    stopping: str = DEFAULT.stopping,
    target_prefix=None,
    phases: int | None = None,
    ranking: str = DEFAULT.ranking,
) -> tuple:
    """Beam search with the length penalty of Wu et al. (2016), as in the paper (6.1).

    The rule of its ranking, finishing and stopping: the module doc.

    `model`, `source_ids`, `max_extra_length`, `max_length`, `bos_id`, `eos_id`, `use_cache`,
    `target_prefix` and `phases` are as `greedy_search` takes them.

    Args:
        beam_size: int. Hypotheses kept per sentence, k. Defaults to 4 (paper 6.1).
        length_penalty: float >= 0. alpha; 0 ranks by log-probability alone. Defaults to 0.6
            (paper 6.1).
        finish_rule: str. Which EOS extensions join the finished set: "tensor2tensor" (every
            one among the 2k best) or "fairseq" (those among the k best). Defaults to
            "tensor2tensor".
        num_hypotheses: int or None. None returns each sentence's best hypothesis; n (1 to
            `beam_size`) returns its n best, and a sentence then stops only when no alive
            hypothesis can beat its n-th best finished one. Defaults to None.
        stopping: str. When a sentence stops: "exact" (no alive hypothesis can beat its
            finished ones at any length it may still reach), "early" (none could by ending
            at the next step) or "k_finished" (k hypotheses have finished). Defaults to
            "early".
        ranking: str. The length penalty's form: "gnmt" or "length" (the module doc).
            Defaults to "gnmt".

    Returns:
        `(ids int32 [batch, out_len], scores float32 [batch])`: the best finished hypothesis
        of each sentence and its length-normalised score; with `num_hypotheses=n`, `(ids
        [batch, n, out_len], scores [batch, n])`, best first.

    Examples:
        >>> from keras_transformer import TransformerConfig, build_transformer
        >>> from keras_transformer.decoding import beam_search
        >>> model = build_transformer(TransformerConfig.preset("tiny", vocab_size=20))
        >>> ids, scores = beam_search(model, [[5, 6, 7, 0], [8, 9, 0, 0]], max_extra_length=5)
        >>> tuple(ids.shape), tuple(scores.shape)  # out_len = src_len + max_extra_length
        ((2, 9), (2,))

        On TensorFlow it runs eagerly, or compiled inside `tf.function(..., jit_compile=True)`;
        on JAX it compiles itself, once per model and settings.
    """
    _check_beam(beam_size, length_penalty, finish_rule, stopping, num_hypotheses, ranking)
    source_ids, limits, max_len = _prepare(model, source_ids, max_extra_length, max_length)
    # Rows of the decoder are hypotheses, sentence-major: hypothesis j of sentence b is row
    # b * k + j.
    step, cache = _decoder(model, source_ids, beam_size, max_len, use_cache, phases)
    return _beam(
        step,
        cache,
        limits,
        _start_ids(_batch_size(source_ids), max_len, bos_id),
        beam_size=beam_size,
        vocab=model.config.target_vocab,
        length_penalty=length_penalty,
        finish_rule=finish_rule,
        stopping=stopping,
        num_hypotheses=num_hypotheses,
        ranking=ranking,
        prefix=_target_prefix(target_prefix, _batch_size(source_ids)),
        phases=phases,
        **_translation(bos_id, eos_id),
    )


def _beam(
    step,
    cache,
    limits,
    start_ids,
    *,
    beam_size,
    vocab,
    length_penalty,
    finish_rule,
    stopping,
    num_hypotheses,
    never,
    stops,
    force_stop,
    offset=0,
    prefix=None,
    ranking="gnmt",
    phases=None,
):
    """Beam search's loop (see `beam_search`) over `step` on `batch * beam_size` rows,
    sentence-major, from `start_ids` `[batch, max_len + 1]`. A hypothesis ends with a token
    of `stops`, or at its row's limit (with a stop token there when `force_stop`); the ids of
    `prefix` `[batch, prefix_len]` (0: none), if given, are forced at the first steps.
    Returns what `beam_search` returns: each row's best `(ids [batch, max_len], scores
    [batch])`, or with `num_hypotheses=n` its n best `([batch, n, max_len], [batch, n])`."""
    k = beam_size
    n_best = 1 if num_hypotheses is None else num_hypotheses
    batch, max_len = ops.shape(start_ids)[0], ops.shape(start_ids)[1] - 1
    first_row = ops.arange(batch, dtype="int32")[:, None] * k  # (batch, 1)

    def lp(length):
        """lp(Y) of a hypothesis of `length` tokens, EOS included (`core.rules`)."""
        return rules.length_penalty(ops.cast(length, "float32"), length_penalty, ranking)

    def body(t, state, cache):
        alive_ids, alive_logp, finished_ids, finished_scores, done = state
        log_probs, cache = step(ops.reshape(alive_ids, (batch * k, -1)), t, cache)
        log_probs = ops.reshape(log_probs, (batch, k, vocab))
        at_limit = t + 1 >= limits  # (batch,)
        # (batch, beam, vocab), the scores' shape, or (vocab,)
        forced = ops.tile(at_limit[:, None], (1, k)) if force_stop else None
        allowed = _allowed_tokens(vocab, never, stops, forced)
        if prefix is not None:
            token = _forced_token(prefix, t)[:, None, None]  # (batch, 1, 1), 0: none
            allowed = _with_forced(allowed, token, vocab)
            log_probs = ops.where(token > 0, 0.0, log_probs)  # not the model's choice
        scores = _masked(alive_logp[:, :, None] + log_probs, allowed)  # (batch, beam, vocab)
        top_logp, top_index = fast.top_k(ops.reshape(scores, (batch, k * vocab)), 2 * k)
        parents, tokens = top_index // vocab, top_index % vocab  # (batch, 2 * beam)
        candidates = backends.batch_gather(alive_ids, parents)  # (batch, 2 * beam, T + 1)
        candidates = ops.slice_update(candidates, [0, 0, t + 1], tokens[:, :, None])
        # A candidate ends with a stop token, or at the limit (with `force_stop` it is one).
        ends = _is_stop(tokens, stops) | at_limit[:, None]

        # The k best candidates not ending stay alive; their caches follow them.
        alive_logp, pick = ops.top_k(ops.where(ends, NEG_INF, top_logp), k)  # (batch, beam)
        alive_ids = backends.batch_gather(candidates, pick)  # (batch, beam, T + 1)
        cache = cache.reorder(ops.reshape(first_row + backends.batch_gather(parents, pick), (-1,)))

        # Candidates that end join the finished, scored logP / lp(t + 1).
        joins = ends & (top_logp > NEG_INF / 2) & ~done[:, None]
        if finish_rule == "fairseq":
            joins &= ops.arange(2 * k) < k
        new_scores = ops.where(joins, top_logp / lp(t + 1), NEG_INF)  # (batch, 2 * beam)
        finished_scores, pick = ops.top_k(ops.concatenate([finished_scores, new_scores], 1), k)
        finished_ids = backends.batch_gather(ops.concatenate([finished_ids, candidates], 1), pick)

        # The best score an alive hypothesis may still reach (exact: at the length limit), or
        # could reach by ending at the next step (early).
        best_alive_bound = alive_logp[:, 0] / lp(limits if stopping == "exact" else t + 2)
        if stopping == "k_finished":  # k hypotheses finished (the k best are kept)
            settled = finished_scores[:, k - 1] > NEG_INF / 2
        else:
            settled = finished_scores[:, n_best - 1] >= best_alive_bound
        done = done | at_limit | settled
        return (alive_ids, alive_logp, finished_ids, finished_scores, done), cache

    state = _start_state(start_ids, limits, k)
    state = decode_loop(
        body, state, cache, max_len, finished=lambda state: state[-1], offset=offset, phases=phases
    )
    _, _, finished_ids, finished_scores, _ = state
    if num_hypotheses is None:
        return finished_ids[:, 0, 1:], finished_scores[:, 0]
    return finished_ids[:, :n_best, 1:], finished_scores[:, :n_best]


def _start_state(start_ids, limits, k):
    """The beam's first state: k copies of each start (the first alone alive), no finished
    hypothesis, rows with no room already done."""
    batch = ops.shape(start_ids)[0]
    # expand_dims, not [:, None, :]: the LiteRT file's converter (kt.export.litert).
    ids = ops.tile(ops.expand_dims(start_ids, 1), (1, k, 1))  # (batch, beam, T + 1)
    first_beam_only = ops.convert_to_tensor([0.0] + [NEG_INF] * (k - 1))  # the k starts are one
    return (
        ids,
        ops.tile(first_beam_only[None, :], (batch, 1)),  # (batch, beam)
        ops.zeros_like(ids),
        ops.full((batch, k), NEG_INF, "float32"),
        limits < 1,
    )


def _check_beam(
    beam_size, length_penalty, finish_rule, stopping, num_hypotheses, ranking="gnmt"
) -> None:
    """Checks beam search's settings."""
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size={beam_size!r} must be an integer >= 1")
    if not length_penalty >= 0:
        raise ValueError(f"length_penalty={length_penalty} must be >= 0")
    if finish_rule not in FINISH_RULES:
        raise ValueError(f"finish_rule={finish_rule!r} must be one of {FINISH_RULES}")
    if stopping not in STOPPING:
        raise ValueError(f"stopping={stopping!r} must be one of {STOPPING}")
    if ranking not in RANKINGS:
        raise ValueError(f"ranking={ranking!r} must be one of {RANKINGS}")
    n_best = 1 if num_hypotheses is None else num_hypotheses
    if isinstance(n_best, bool) or not isinstance(n_best, int) or not 1 <= n_best <= beam_size:
        raise ValueError(
            f"num_hypotheses={num_hypotheses!r} must be None or an integer from 1 to "
            f"beam_size={beam_size}"
        )


__all__ = ["beam_search"]

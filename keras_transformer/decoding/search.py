"""Greedy search, sampling and beam search over a trained `Transformer`, with a key/value cache.

The encoder runs once; each step embeds the last token, runs `Decoder.forward` with the
`DecoderCache` (the new position's keys and values written, the encoder output's projected
once) and projects to float32 log-probabilities. Loops are `keras.ops.while_loop`s over
static-shaped state (only the batch may be unknown), written with `keras.ops` (the few ops
that differ: `keras_transformer._backends`), so every function here runs on TensorFlow (eagerly,
inside `tf.function` with unknown batch and length, and under XLA) and on JAX (eagerly and
under `jax.jit`). The control flow is explicit, so the searches need no AutoGraph: they are
marked for AutoGraph to leave as they are (`backends.compiled_search`), and a `tf.function`
around one, with AutoGraph on or off, traces it as written (measured when it landed,
3fbdb2f: BENCHMARKS.md's history).

Output length: a sentence may have at most its own number of source tokens +
`max_extra_length` output tokens (paper 6.1: "maximum output length to input length + 50"),
capped by `max_length` and by `model.config.max_length`; a hypothesis that reaches its limit
ends with EOS there. Returned ids are `[batch, out_len]` without the leading BOS, 0-padded
after EOS, with `out_len = min(src_len + max_extra_length, max_length, config.max_length)` for
the padded source width `src_len` (a width known from shapes alone, as XLA needs). The padding
id 0 is never generated. Decoding stops once every sentence has finished.

Target prefix: every search takes `target_prefix`, ids forced as the first output tokens
(after BOS), as CTranslate2's `target_prefix` and transformers' `forced_bos_token_id` force
them: NLLB-200's target language code, or the start of a translation to complete. A forced
token is not the model's choice, so its log-probability is not counted in the score (as
transformers counts it); it is part of the returned ids and of the output length.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from typing import NamedTuple

from keras import ops

from keras_transformer import _backends as backends
from keras_transformer import fast
from keras_transformer.decoding.settings import (
    DEFAULT,
    FINISH_RULES,
    RANKINGS,
    STOPPING,
    DecodingSettings,
)
from keras_transformer.special_ids import BOS_ID, EOS_ID, PAD_ID

FLOAT32_TINY = 2.0**-126  # the smallest normal float32
NEG_INF = -1e9  # the log-probability of impossible choices; finite, so sums never give NaN
# The self-attention buffers start with room for the first quarter of the output and grow
# at each of these phases, so a step's attention reads about the part written so far.
PHASES = 4
_phases = contextvars.ContextVar("phases", default=PHASES)


@backends.compiled_search
def greedy_search(
    model,
    source_ids,
    *,
    max_extra_length: int = DEFAULT.max_extra_length,
    max_length: int | None = None,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    use_cache: bool = True,
    target_prefix=None,
) -> tuple:
    """Decodes the most likely token at each step.

    Args:
        model: a `keras_transformer.Transformer`.
        source_ids: int `[batch, src_len]`, 0-padded.
        max_extra_length: int. Output may have this many more tokens than the input.
            Defaults to 50 (paper 6.1).
        max_length: int or None. A cap on the output length (EOS included). Defaults to None.
        bos_id: int. The start token. Defaults to 2.
        eos_id: int. The end token. Defaults to 3.
        use_cache: bool. False recomputes the whole model on the prefix at every step (the
            reference for tests and benchmarks). Defaults to True.
        target_prefix: int `[batch, prefix_len]` (0: no token forced at that step, as in a
            shorter row's padding), `[prefix_len]` (one prefix for every row), or None.
            Tokens forced as the first outputs (see the module doc). Defaults to None.

    Returns:
        `(ids int32 [batch, out_len], scores float32 [batch])`: ids end with EOS, then 0s;
        a score is the sum of its tokens' log-probabilities, EOS included.

    Examples:
        >>> import keras
        >>> from keras_transformer import TransformerConfig, build_transformer
        >>> from keras_transformer.decoding import greedy_search
        >>> model = build_transformer(TransformerConfig.preset("tiny", vocab_size=20))
        >>> ids, scores = greedy_search(model, [[5, 6, 7, 0]], max_extra_length=3)
        >>> tuple(ids.shape), keras.ops.dtype(ids), tuple(scores.shape)  # out_len = 4 + 3
        ((1, 7), 'int32', (1,))
    """
    source_ids, limits, max_len = _prepare(model, source_ids, max_extra_length, max_length)
    step, cache = _decoder(model, source_ids, 1, max_len, use_cache)
    start = _start_ids(_batch_size(source_ids), max_len, bos_id)
    prefix = _target_prefix(target_prefix, _batch_size(source_ids))
    return _single_path(
        step, cache, limits, start, greedy_choice, prefix=prefix, **_translation(bos_id, eos_id)
    )


@backends.compiled_search
def sample(
    model,
    source_ids,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
    max_extra_length: int = DEFAULT.max_extra_length,
    max_length: int | None = None,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    target_prefix=None,
) -> tuple:
    """Draws each token from softmax(logits / temperature), optionally over the top k only
    or the nucleus (top p) only.

    `model`, `source_ids`, `max_extra_length`, `max_length`, `bos_id`, `eos_id` and
    `target_prefix` are as `greedy_search` takes them.

    Args:
        temperature: float > 0. Below 1 sharpens, above 1 flattens. Defaults to 1.0.
        top_k: int. Sample among the k most likely tokens; 0 keeps all, 1 is greedy.
            Defaults to 0.
        top_p: float in (0, 1]. Sample among the fewest most likely tokens whose
            probabilities (after temperature and top-k) sum to at least p (nucleus
            sampling, Holtzman et al., 2020); 1 keeps all. Defaults to 1.0.
        seed: int or None. With a seed the draws are stateless and repeatable (step t uses
            the seed `(seed, t)`); None draws a fresh seed per call. Defaults to None.

    Returns:
        `(ids, scores)` as `greedy_search`; scores are the model's log-probabilities (before
        temperature, top-k and top-p).

    Examples:
        >>> import numpy as np
        >>> from keras_transformer import TransformerConfig, build_transformer
        >>> from keras_transformer.decoding import sample
        >>> model = build_transformer(TransformerConfig.preset("tiny", vocab_size=20))
        >>> first, _ = sample(model, [[5, 6, 7]], top_k=5, seed=1, max_extra_length=5)
        >>> again, _ = sample(model, [[5, 6, 7]], top_k=5, seed=1, max_extra_length=5)
        >>> bool(np.array_equal(first, again))  # the same seed, the same draws
        True
    """
    choose = sampling_choice(temperature, top_k, top_p, seed, model.config.target_vocab)
    source_ids, limits, max_len = _prepare(model, source_ids, max_extra_length, max_length)
    step, cache = _decoder(model, source_ids, 1, max_len, use_cache=True)
    start = _start_ids(_batch_size(source_ids), max_len, bos_id)
    prefix = _target_prefix(target_prefix, _batch_size(source_ids))
    return _single_path(
        step, cache, limits, start, choose, prefix=prefix, **_translation(bos_id, eos_id)
    )


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
    ranking: str = DEFAULT.ranking,
) -> tuple:
    """Beam search with the length penalty of Wu et al. (2016), as in the paper (6.1).

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

    `model`, `source_ids`, `max_extra_length`, `max_length`, `bos_id`, `eos_id`, `use_cache`
    and `target_prefix` are as `greedy_search` takes them.

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
        ranking: str. The length penalty's form: "gnmt" or "length" (above). Defaults to
            "gnmt".

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
    step, cache = _decoder(model, source_ids, beam_size, max_len, use_cache)
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
        **_translation(bos_id, eos_id),
    )


def translate_ids(
    model,
    source_ids,
    *,
    beam_size: int = DEFAULT.beam_size,
    length_penalty: float = DEFAULT.length_penalty,
    finish_rule: str = DEFAULT.finish_rule,
    max_extra_length: int = DEFAULT.max_extra_length,
    stopping: str = DEFAULT.stopping,
    max_length: int | None = None,
    target_prefix=None,
    ranking: str = DEFAULT.ranking,
) -> tuple:
    """`greedy_search` when `beam_size` is 1, else `beam_search`: what translators call,
    with `kt.decoding.DecodingSettings`'s defaults (`settings.search_arguments()`), and the
    target prefix (`greedy_search`'s) if any."""
    if beam_size == 1:
        return greedy_search(
            model,
            source_ids,
            max_extra_length=max_extra_length,
            max_length=max_length,
            target_prefix=target_prefix,
        )
    return beam_search(
        model,
        source_ids,
        beam_size=beam_size,
        length_penalty=length_penalty,
        finish_rule=finish_rule,
        max_extra_length=max_extra_length,
        max_length=max_length,
        stopping=stopping,
        target_prefix=target_prefix,
        ranking=ranking,
    )


def decode(
    model,
    source_ids,
    settings: DecodingSettings = DEFAULT,
    *,
    prefix_ids=None,
    sampling: dict | None = None,
    n_best: int | None = None,
    max_length: int | None = None,
) -> tuple:
    """The search that `settings` asks for: the one place where decoding settings become a
    search call, for every way in (`generate`, `Translator`, the SavedModel's signatures,
    `evaluate`, `visualize`).

    Args:
        model: a `Transformer` or `TransformerSeq2SeqLM`.
        source_ids: int `[batch, src_len]`, EOS-terminated, 0-padded.
        settings: `kt.decoding.DecodingSettings`. Beam size (1: greedy), length penalty and
            its ranking, stopping and finish rules, extra length, n-best. Its text
            `target_prefix` is not read here: `prefix_ids` carries it as ids.
        prefix_ids: int `[prefix_len]` or `[batch, prefix_len]` (0-padded), or None. Forced
            first outputs (the target tokenizer's ids of the settings' `target_prefix`,
            `kt.decoding.prefix_ids`).
        sampling: dict or None. `sample`'s settings (temperature, top_k, top_p, seed): draw
            instead of searching (a task compiled with one of keras-hub's samplers).
        n_best: int or None. Hypotheses a sentence, over the settings' `n_best` (a signature
            that always returns several). Defaults to None.
        max_length: int or None. At most this many output tokens, EOS included.

    Returns:
        `(ids int32 [batch, out_len], scores float32 [batch])`; with more than one hypothesis,
        `(ids [batch, n, out_len], scores [batch, n])`, best first.

    Examples:
        >>> from keras_transformer import TransformerConfig, build_transformer
        >>> from keras_transformer.decoding import DecodingSettings, decode
        >>> model = build_transformer(TransformerConfig.preset("tiny", vocab_size=20))
        >>> settings = DecodingSettings(beam_size=3, n_best=2, max_extra_length=4)
        >>> ids, scores = decode(model, [[5, 6, 3], [8, 3, 0]], settings)
        >>> tuple(ids.shape), tuple(scores.shape)  # (batch, n_best, out_len), (batch, n_best)
        ((2, 2, 7), (2, 2))
    """
    forced = {} if prefix_ids is None else {"target_prefix": prefix_ids}
    hypotheses = settings.n_best if n_best is None else n_best
    if sampling is not None:
        return sample(
            model,
            source_ids,
            max_extra_length=settings.max_extra_length,
            max_length=max_length,
            **sampling,
            **forced,
        )
    arguments = settings.search_arguments()
    if hypotheses > 1:
        return beam_search(
            model,
            source_ids,
            num_hypotheses=hypotheses,
            max_length=max_length,
            **arguments,
            **forced,
        )
    return translate_ids(model, source_ids, max_length=max_length, **arguments, **forced)


@contextlib.contextmanager
def loop_phases(phases: int):
    """The searches traced inside the block run `decode_loop` as `phases` loops (`PHASES`
    outside). One loop holds the decoder step once in a traced graph, where each loop holds
    its own copy of it (a LiteRT file carries every copy); its buffers have room for the
    whole output from the first step.

    Examples:
        >>> from keras_transformer.decoding import search
        >>> with search.loop_phases(1):
        ...     search._phase_lengths(40)
        [40]
        >>> len(search._phase_lengths(40)) == search.PHASES  # as it was
        True
    """
    if not isinstance(phases, int) or phases < 1:
        raise ValueError(f"phases={phases!r} must be an int >= 1")
    token = _phases.set(phases)
    try:
        yield
    finally:
        _phases.reset(token)


def decode_loop(body, state, cache, max_len, finished, offset=0):
    """The loop of every search: `state, cache = body(t, state, cache)` for t = 0, 1, ...
    until `finished(state)` (a boolean `[batch]`) holds everywhere or t reaches `max_len`.

    It runs as `PHASES` `keras.ops.while_loop`s (`loop_phases`) one after another, the cache
    grown between them (`cache.grow`) from a quarter of `max_len` to all of it, so that a
    step reads about the part of the buffers written so far, and a decode that ends early
    never allocates the rest. `cache` must start with room for `offset` + the first phase,
    `_phase_lengths(max_len)[0]` positions (as `_decoder` makes it); `offset` is the number
    of positions written before the loop (a prompt's, `generate`), so step t writes at
    `offset + t`.

    Returns:
        The final `state`.
    """
    t = ops.convert_to_tensor(0, "int32")
    for phase, end in enumerate(_phase_lengths(max_len)):
        if phase:
            cache = cache.grow(offset + end)
        t, state, cache = ops.while_loop(
            lambda t, state, cache, end=end: (t < end) & ~ops.all(finished(state)),
            lambda t, state, cache: (t + 1, *body(t, state, cache)),
            (t, state, cache),
        )
    return state


class _NoCache(NamedTuple):
    """The state of a decoder without a cache: nothing to grow or reorder."""

    def grow(self, length):
        return self

    def reorder(self, indices):
        return self


def _decoder(model, source_ids, copies, max_len, use_cache):
    """The model as a next-token distribution over `n = batch * copies` rows (each sentence
    repeated `copies` times, sentence-major).

    Returns `(step, cache)`: `step(ids [n, T + 1], t, cache) -> (log_probs [n, vocab],
    cache)`, where `ids[:, t]` is the token at decoder position t (BOS at 0), and the initial
    cache, with room for the first phase of `decode_loop`.
    """
    if not use_cache:
        source_ids = ops.repeat(source_ids, copies, axis=0)  # (n, src_len)

        def full_step(ids, t, cache):
            inputs = {"source_ids": source_ids, "target_ids": ids[:, :-1]}
            logits = model(inputs, training=False)  # (n, T, vocab): the whole prefix again
            return ops.log_softmax(ops.take(logits, t, axis=1), axis=-1), cache

        return full_step, _NoCache()

    memory, source_mask = model.encode(source_ids)  # (batch, src_len, d_model)
    memory = ops.repeat(memory, copies, axis=0)  # (n, src_len, d_model)
    source_mask = ops.repeat(source_mask, copies, axis=0)  # (n, src_len)
    # Prepared once, for every step of n rows.
    project = fast.output_projection(model.target_embedding, rows=_batch_size(memory))

    def cached_step(ids, t, cache):
        token = ops.take(ids, t[None], axis=1)  # (n, 1)
        x = model.target_embedding(token, start_index=t, training=False)  # (n, 1, d_model)
        x, cache, _ = model.decoder.forward(
            x, encoder_padding_mask=source_mask, cache=cache, cache_index=t, training=False
        )
        return ops.log_softmax(project(x[:, 0]), axis=-1), cache  # (n, vocab), float32

    return cached_step, model.decoder.init_cache(memory, _phase_lengths(max_len)[0])


def _single_path(
    step, cache, limits, start_ids, choose, *, never, stops, force_stop, offset=0, prefix=None
):
    """Greedy search and sampling: one hypothesis a row, `choose(log_probs, t)` picks each
    token, from `start_ids` `[batch, max_len + 1]` (the token before the first output, then
    room). A row finishes with a token of `stops`, or at its limit (ending with a stop token
    there when `force_stop`); `never` tokens are never chosen (see `_allowed_tokens`); the
    ids of `prefix` `[batch, prefix_len]` (0: none), if given, are forced at the first steps.
    Returns `(ids [batch, max_len], scores [batch])`."""
    batch, max_len = ops.shape(limits)[0], ops.shape(start_ids)[1] - 1

    def body(t, state, cache):
        ids, scores, finished = state
        log_probs, cache = step(ids, t, cache)  # (batch, vocab)
        at_limit = t + 1 >= limits  # (batch,)
        allowed = _allowed_tokens(
            log_probs.shape[-1], never, stops, at_limit[:, None] if force_stop else None
        )
        forced = None if prefix is None else _forced_token(prefix, t)  # (batch,), 0: none
        if forced is not None:
            allowed = _with_forced(allowed, forced[:, None], log_probs.shape[-1])
        token = choose(ops.where(allowed, log_probs, NEG_INF), t)  # (batch,)
        token = ops.where(finished, PAD_ID, token)
        chosen = backends.batch_gather(log_probs, token[:, None])[:, 0]  # (batch,)
        if forced is not None:
            chosen = ops.where(forced > 0, 0.0, chosen)  # not the model's choice
        scores += ops.where(finished, 0.0, chosen)
        ids = ops.slice_update(ids, [0, t + 1], token[:, None])  # (batch, T + 1)
        return (ids, scores, finished | _is_stop(token, stops) | at_limit), cache

    state = (start_ids, ops.zeros((batch,), "float32"), limits < 1)
    ids, scores, _ = decode_loop(
        body, state, cache, max_len, finished=lambda state: state[-1], offset=offset
    )
    return ids[:, 1:], scores


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
        """lp(Y) of a hypothesis of `length` tokens, EOS included."""
        length = ops.cast(length, "float32")
        if ranking == "length":
            return length**length_penalty
        return ((5.0 + length) / 6.0) ** length_penalty

    def body(t, state, cache):
        alive_ids, alive_logp, finished_ids, finished_scores, done = state
        log_probs, cache = step(ops.reshape(alive_ids, (batch * k, -1)), t, cache)
        log_probs = ops.reshape(log_probs, (batch, k, vocab))
        at_limit = t + 1 >= limits  # (batch,)
        forced = at_limit[:, None, None] if force_stop else None
        allowed = _allowed_tokens(vocab, never, stops, forced)  # (batch, 1, vocab) or (vocab,)
        if prefix is not None:
            token = _forced_token(prefix, t)[:, None, None]  # (batch, 1, 1), 0: none
            allowed = _with_forced(allowed, token, vocab)
            log_probs = ops.where(token > 0, 0.0, log_probs)  # not the model's choice
        scores = ops.where(allowed, alive_logp[:, :, None] + log_probs, NEG_INF)
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

    # expand_dims, not [:, None, :]: the LiteRT file's converter (kt.export.litert).
    ids = ops.tile(ops.expand_dims(start_ids, 1), (1, k, 1))  # (batch, beam, T + 1)
    first_beam_only = ops.convert_to_tensor([0.0] + [NEG_INF] * (k - 1))  # the k starts are one
    state = (
        ids,
        ops.tile(first_beam_only[None, :], (batch, 1)),  # (batch, beam)
        ops.zeros_like(ids),
        ops.full((batch, k), NEG_INF, "float32"),
        limits < 1,
    )
    state = decode_loop(
        body, state, cache, max_len, finished=lambda state: state[-1], offset=offset
    )
    _, _, finished_ids, finished_scores, _ = state
    if num_hypotheses is None:
        return finished_ids[:, 0, 1:], finished_scores[:, 0]
    return finished_ids[:, :n_best, 1:], finished_scores[:, :n_best]


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


def greedy_choice(log_probs, t):
    """The most likely token of each row: int32 `[batch]`."""
    return backends.argmax(log_probs)


def sampling_choice(temperature, top_k, top_p, seed, vocab):
    """Checks sampling's settings; returns `choose(log_probs [batch, vocab], t)`, a token
    drawn per row from softmax(log_probs / temperature) over the top k (0: all) and then the
    nucleus of mass top_p (1: all), with the stateless seed `(seed, t)`."""
    if not 0 < temperature < math.inf:
        raise ValueError(f"temperature={temperature} must be a finite number > 0")
    if temperature < FLOAT32_TINY:  # flushed to 0 where float32 is computed: 0 / 0
        raise ValueError(
            f"temperature={temperature} is below float32's smallest normal number "
            f"{FLOAT32_TINY:.3g}; greedy search is its limit"
        )
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k={top_k!r} must be an integer >= 0")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p={top_p} must be in (0, 1]")
    seed = ops.cast(backends.random_seed() if seed is None else seed, "int32")
    top_k = min(top_k, vocab)

    def choose(log_probs, t):
        # Scaled from each row's best, which stays 0 at any temperature, and held above
        # NEG_INF (a tiny temperature would take the others to -inf, which TensorFlow's
        # sampler does not take); the tokens the search excluded stay excluded.
        best = ops.max(log_probs, axis=-1, keepdims=True)
        scaled = ops.maximum((log_probs - best) / temperature, NEG_INF)
        logits = ops.where(log_probs > NEG_INF, scaled, NEG_INF)
        if top_k:
            kth_best = ops.top_k(logits, top_k)[0][:, -1:]  # (batch, 1)
            logits = ops.where(logits < kth_best, NEG_INF, logits)
        if top_p < 1:
            ranked = ops.top_k(logits, vocab)[0]  # (batch, vocab), descending
            probs = ops.softmax(ranked, axis=-1)
            # A token stays if the tokens ranked above it hold less than top_p: the first
            # always does.
            stays = ops.cumsum(probs, axis=-1) - probs < top_p
            smallest = ops.min(ops.where(stays, ranked, -NEG_INF), axis=-1, keepdims=True)
            logits = ops.where(logits < smallest, NEG_INF, logits)
        return backends.stateless_categorical(logits, ops.stack([seed, t]))

    return choose


def _translation(bos_id, eos_id) -> dict:
    """What the translation searches pass `_single_path` and `_beam`: padding and the start
    token never chosen, EOS the one stop token, forced at the length limit."""
    return {"never": (PAD_ID, bos_id), "stops": (eos_id,), "force_stop": True}


def _target_prefix(target_prefix, batch):
    """A search's `target_prefix` as int32 `[batch, prefix_len + 1]`, its last column 0 (so
    that every step has a column to read, an empty prefix too), or None for none."""
    if target_prefix is None:
        return None
    prefix = ops.cast(ops.convert_to_tensor(target_prefix), "int32")
    if len(prefix.shape) == 1:
        prefix = ops.broadcast_to(prefix[None, :], (batch, ops.shape(prefix)[0]))
    if len(prefix.shape) != 2:
        raise ValueError(
            f"target_prefix must be [batch, prefix_len] or [prefix_len] ids, got shape "
            f"{prefix.shape}"
        )
    return ops.pad(prefix, [[0, 0], [0, 1]])


def _forced_token(prefix, t):
    """The token `prefix` `[batch, prefix_len + 1]` forces at step t: `[batch]`, 0 where
    none (past the prefix, or in a shorter row's padding)."""
    last = ops.shape(prefix)[1] - 1
    return ops.take(prefix, ops.minimum(t, last)[None], axis=1)[:, 0]


def _with_forced(allowed, forced, vocab):
    """`allowed` (broadcastable to `forced`'s shape + `[vocab]`), but only the `forced` token
    where it is not 0: `forced` is `[batch, 1]` or `[batch, 1, 1]`."""
    token = ops.arange(vocab, dtype="int32")
    return ops.where(forced > 0, token == forced, allowed)


def _is_stop(tokens, stops):
    """Boolean, True where `tokens` is one of `stops` (a tuple of ints; none: all False)."""
    if not stops:
        return ops.zeros_like(tokens, "bool")
    result = tokens == stops[0]
    for stop in stops[1:]:
        result = result | (tokens == stop)
    return result


def _prepare(model, source_ids, max_extra_length, max_length):
    """Checks the arguments; returns `(source_ids, limits [batch], max_len)`, the per-sentence
    output length limits and the buffer length (their upper bound, known from shapes)."""
    if isinstance(max_extra_length, bool) or not isinstance(max_extra_length, int):
        raise ValueError(f"max_extra_length={max_extra_length!r} must be an integer >= 0")
    if max_extra_length < 0:
        raise ValueError(f"max_extra_length={max_extra_length} must be >= 0")
    if max_length is not None and (not isinstance(max_length, int) or max_length < 1):
        raise ValueError(f"max_length={max_length!r} must be None or an integer >= 1")
    source_ids = ops.cast(ops.convert_to_tensor(source_ids), "int32")
    if len(source_ids.shape) != 2:
        raise ValueError(f"source_ids must be [batch, src_len], got shape {source_ids.shape}")
    cap = model.config.max_length
    if max_length is not None:
        cap = min(max_length, cap)
    lengths = ops.sum(ops.cast(ops.not_equal(source_ids, PAD_ID), "int32"), axis=1)  # (batch,)
    limits = ops.clip(lengths + max_extra_length, 1, cap)
    width = ops.shape(source_ids)[1]  # an int when static (always on JAX)
    if isinstance(width, int):
        max_len = min(max(width + max_extra_length, 1), cap)
    else:
        max_len = ops.clip(width + max_extra_length, 1, cap)
    return source_ids, limits, max_len


def _phase_lengths(max_len, phases: int | None = None, shortest: int = 8):
    """The number of positions the self-attention buffers hold in each phase of the loop:
    `ceil((p + 1) * max_len / phases)`, the last one `max_len`, none below `shortest` (or
    `max_len` if smaller: a buffer of one position would be a softmax over one key).
    `phases` None takes `loop_phases`'s (`PHASES`)."""
    phases = phases or _phases.get()
    if isinstance(max_len, int):
        floor = min(max_len, shortest)
        return [max((max_len * (p + 1) + phases - 1) // phases, floor) for p in range(phases)]
    floor = ops.minimum(max_len, shortest)
    return [ops.maximum((max_len * (p + 1) + phases - 1) // phases, floor) for p in range(phases)]


def _batch_size(source_ids):
    """The batch size: a Python int when the shape tells it (so loop shapes stay static,
    an empty batch included), else a scalar tensor."""
    return ops.shape(source_ids)[0]


def _start_ids(batch, max_len, bos_id):
    """`[batch, max_len + 1]`: BOS, then room for max_len output tokens."""
    return ops.concatenate(
        [ops.full((batch, 1), bos_id, "int32"), ops.zeros((batch, max_len), "int32")], 1
    )


def _allowed_tokens(vocab, never, stops, at_limit=None):
    """Boolean `[..., vocab]`: never a token of `never` (padding and the start token when
    translating: an OPUS-MT model's start is its padding, which transformers never generates
    either); only a token of `stops` where `at_limit` (broadcast), if given."""
    token = ops.arange(vocab, dtype="int32")
    allowed = ~_is_stop(token, never)
    if at_limit is None:
        return allowed
    return allowed & (~at_limit | _is_stop(token, stops))


__all__ = [
    "BOS_ID",
    "EOS_ID",
    "beam_search",
    "decode",
    "decode_loop",
    "greedy_search",
    "loop_phases",
    "sample",
    "translate_ids",
]

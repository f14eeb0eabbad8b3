"""Greedy search and sampling: one hypothesis a sentence, over `kt.decoding.loop`'s loop
(`kt.decoding.search` says how every search decodes).
"""

from __future__ import annotations

import math

from keras import ops

from keras_transformer import _backends as backends
from keras_transformer.decoding.loop import (
    FLOAT32_TINY,
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
from keras_transformer.decoding.settings import DEFAULT
from keras_transformer.special_ids import BOS_ID, EOS_ID, PAD_ID


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
    phases: int | None = None,
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

        phases: int or None. The loops of `decode_loop` (`kt.decoding.plan.DecodingPlan`'s
            trace option; 1 holds the decoder step once in a traced graph). Defaults to
            None (`PHASES`).

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
    return _one_path(
        model, source_ids, greedy_choice, max_extra_length, max_length, use_cache,
        target_prefix, phases, bos_id, eos_id,
    )  # fmt: skip


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
    phases: int | None = None,
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

        phases: int or None. The loops of `decode_loop` (`kt.decoding.plan.DecodingPlan`'s
            trace option; 1 holds the decoder step once in a traced graph). Defaults to
            None (`PHASES`).

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
    return _one_path(
        model, source_ids, choose, max_extra_length, max_length, True,
        target_prefix, phases, bos_id, eos_id,
    )  # fmt: skip


def _one_path(
    model, source_ids, choose, max_extra_length, max_length, use_cache, target_prefix, phases,
    bos_id, eos_id,
):  # fmt: skip
    """Greedy search's and sampling's one hypothesis a sentence: the sources prepared, the
    decoder step built, then `_single_path` with `choose` picking each next token."""
    source_ids, limits, max_len = _prepare(model, source_ids, max_extra_length, max_length)
    step, cache = _decoder(model, source_ids, 1, max_len, use_cache, phases)
    start = _start_ids(_batch_size(source_ids), max_len, bos_id)
    prefix = _target_prefix(target_prefix, _batch_size(source_ids))
    return _single_path(
        step,
        cache,
        limits,
        start,
        choose,
        prefix=prefix,
        phases=phases,
        **_translation(bos_id, eos_id),
    )


def _single_path(
    step,
    cache,
    limits,
    start_ids,
    choose,
    *,
    never,
    stops,
    force_stop,
    offset=0,
    prefix=None,
    phases=None,
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
            log_probs.shape[-1], never, stops, at_limit if force_stop else None
        )  # (batch, vocab) or (vocab,)
        forced = None if prefix is None else _forced_token(prefix, t)  # (batch,), 0: none
        if forced is not None:
            allowed = _with_forced(allowed, forced[:, None], log_probs.shape[-1])
        token = choose(_masked(log_probs, allowed), t)  # (batch,)
        token = ops.where(finished, PAD_ID, token)
        chosen = backends.batch_gather(log_probs, token[:, None])[:, 0]  # (batch,)
        if forced is not None:
            chosen = ops.where(forced > 0, 0.0, chosen)  # not the model's choice
        scores += ops.where(finished, 0.0, chosen)
        ids = ops.slice_update(ids, [0, t + 1], token[:, None])  # (batch, T + 1)
        return (ids, scores, finished | _is_stop(token, stops) | at_limit), cache

    state = (start_ids, ops.zeros((batch,), "float32"), limits < 1)
    ids, scores, _ = decode_loop(
        body, state, cache, max_len, finished=lambda state: state[-1], offset=offset, phases=phases
    )
    return ids[:, 1:], scores


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


__all__ = ["greedy_search", "sample"]

"""The loop every search runs, and what the searches share: `decode_loop` (the phased
`keras.ops.while_loop`s), the cached decoder step (`_decoder`), the output-length limits
(`_prepare`: `core.rules.output_limit`), the forced target prefix and the allowed tokens.
`kt.decoding.search` says how the searches use them.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import NamedTuple

from keras import ops

from keras_transformer import _deprecation as deprecation
from keras_transformer import fast
from keras_transformer.core import rules
from keras_transformer.special_ids import PAD_ID

FLOAT32_TINY = 2.0**-126  # the smallest normal float32
NEG_INF = -1e9  # the log-probability of impossible choices; finite, so sums never give NaN
# The self-attention buffers start with room for the first quarter of the output and grow
# at each of these phases, so a step's attention reads about the part written so far.
PHASES = 4
_phases = contextvars.ContextVar("phases", default=PHASES)  # the deprecated `loop_phases`'


@contextlib.contextmanager
def loop_phases(phases: int):
    """Deprecated: pass `phases` to the search (`kt.decoding.plan.DecodingPlan(phases=...)`).

    The searches traced inside the block, given no `phases`, run `decode_loop` as `phases`
    loops (`PHASES` outside). One loop holds the decoder step once in a traced graph, where
    each loop holds its own copy of it (a LiteRT file carries every copy); its buffers have
    room for the whole output from the first step.
    """
    # The caller's line: 3 frames up from here (this generator, contextlib's __enter__).
    deprecation.warn(
        "keras_transformer.decoding.search.loop_phases",
        "phases= of the search (keras_transformer.decoding.DecodingPlan(settings, phases=...))",
        stacklevel=3,
    )
    if not isinstance(phases, int) or phases < 1:
        raise ValueError(f"phases={phases!r} must be an int >= 1")
    token = _phases.set(phases)
    try:
        yield
    finally:
        _phases.reset(token)


def decode_loop(body, state, cache, max_len, finished, offset=0, phases=None):
    """The loop of every search: `state, cache = body(t, state, cache)` for t = 0, 1, ...
    until `finished(state)` (a boolean `[batch]`) holds everywhere or t reaches `max_len`.

    It runs as `phases` `keras.ops.while_loop`s (None: `PHASES`) one after another, the cache
    grown between them (`cache.grow`) from a quarter of `max_len` to all of it, so that a
    step reads about the part of the buffers written so far, and a decode that ends early
    never allocates the rest. `cache` must start with room for `offset` + the first phase,
    `_phase_lengths(max_len, phases)[0]` positions (as `_decoder` makes it); `offset` is the number
    of positions written before the loop (a prompt's, `generate`), so step t writes at
    `offset + t`.

    Returns:
        The final `state`.
    """
    t = ops.convert_to_tensor(0, "int32")
    for phase, end in enumerate(_phase_lengths(max_len, phases)):
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


def _decoder(model, source_ids, copies, max_len, use_cache, phases=None):
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
            return fast.log_softmax(ops.take(logits, t, axis=1)), cache

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
        return fast.log_softmax(project(x[:, 0])), cache  # (n, vocab), float32

    return cached_step, model.decoder.init_cache(memory, _phase_lengths(max_len, phases)[0])


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
    # The output-length limit (`core.rules.output_limit`), at least 1.
    limits = ops.maximum(rules.output_limit(lengths, max_extra_length, cap, ops.minimum), 1)
    width = ops.shape(source_ids)[1]  # an int when static (always on JAX)
    if isinstance(width, int):
        max_len = max(rules.output_limit(width, max_extra_length, cap), 1)
    else:
        max_len = ops.maximum(rules.output_limit(width, max_extra_length, cap, ops.minimum), 1)
    return source_ids, limits, max_len


def _phase_lengths(max_len, phases: int | None = None, shortest: int = 8):
    """The number of positions the self-attention buffers hold in each phase of the loop:
    `ceil((p + 1) * max_len / phases)`, the last one `max_len`, none below `shortest` (or
    `max_len` if smaller: a buffer of one position would be a softmax over one key).
    `phases` None takes `PHASES` (or, inside the deprecated `loop_phases`, its)."""
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


def _masked(scores, allowed):
    """`ops.where(allowed, scores, NEG_INF)` (`allowed` boolean, broadcast to `scores`) as
    `scores * keep + (1 - keep) * NEG_INF`, `keep` its 1s and 0s: the same values for the
    finite scores of a search (`x * 1 + -0.0` is x, signed zeros too; `x * 0 + NEG_INF` is
    NEG_INF), in elementwise products and sums that XNNPACK runs in a LiteRT file, where a
    select with a scalar operand runs a slow broadcasting kernel (`benchmarks.litert_profile`)."""
    keep = ops.cast(allowed, scores.dtype)
    return scores * keep + (1.0 - keep) * NEG_INF


def _allowed_tokens(vocab, never, stops, at_limit=None):
    """Boolean `[vocab]`: never a token of `never` (padding and the start token when
    translating: an OPUS-MT model's start is its padding, which transformers never generates
    either). With `at_limit` (boolean, any shape), `at_limit.shape + [vocab]`: where it
    holds, only a token of `stops`.

    The rows are taken from a constant two-row table (before the limit, at it) by one
    gather: a mask computed at every step would take several vocabulary-wide ops, each its
    own kernel in a LiteRT file, and a select broadcast over the vocabulary."""
    token = ops.arange(vocab, dtype="int32")
    allowed = ~_is_stop(token, never)
    if at_limit is None:
        return allowed
    table = ops.stack([allowed, allowed & _is_stop(token, stops)])  # (2, vocab)
    # The row's index by a select: LiteRT's converter folds a cast boolean's `take`
    # (its check of negative indices) into an op without a boolean kernel.
    return ops.take(table, ops.where(at_limit, 1, 0), axis=0)


__all__ = ["NEG_INF", "PHASES", "decode_loop", "loop_phases"]

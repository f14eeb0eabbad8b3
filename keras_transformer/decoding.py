"""Incremental decoding with a trained `Transformer`: greedy search, beam search, sampling.

The encoder runs once; each step embeds one token, runs `Decoder.call_with_cache` (self-
attention keys and values written into fixed-size buffers at position t, encoder-decoder keys
and values projected once) and projects to float32 logits. The loop is a `tf.while_loop` over
static-shaped state (only the batch may be unknown), so every function here runs eagerly,
inside `tf.function` with unknown batch and length, and under XLA (`jit_compile=True`). It
runs in `PHASES` loops one after the other, the buffers growing between them (to a quarter
of the output length, half, ...): a step's attention reads about the part of them written so
far, not the whole.

Output length: a sentence may have at most its own number of source tokens +
`max_extra_length` output tokens (paper 6.1: "maximum output length to input length + 50"),
capped by `max_length` and by `model.config.max_length`; a hypothesis that reaches its limit
ends with EOS there. Returned ids are `[batch, out_len]` without the leading BOS, 0-padded
after EOS, with `out_len = min(src_len + max_extra_length, max_length, config.max_length)` for
the padded source width `src_len` (a width known from shapes alone, as XLA needs).

The padding id 0 is never generated. Decoding stops once every sentence has finished.

`parallel_search` compiles any of these with XLA and decodes slices of a batch side by side
(one per CPU core), which is faster on CPUs than one program for the whole batch.
"""

from __future__ import annotations

import tensorflow as tf
from keras import ops

from keras_transformer.config import PAD_ID

BOS_ID, EOS_ID = 2, 3
NEG_INF = -1e9  # the log-probability of impossible choices; finite, so sums never give NaN
# The loops run in phases: the self-attention buffers start with room for the first quarter
# of the positions and grow at each phase, so a step reads only about the part written so
# far (and a decode that ends early never reads the rest).
PHASES = 4


def greedy_search(
    model,
    source_ids,
    *,
    max_extra_length: int = 50,
    max_length: int | None = None,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    use_cache: bool = True,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Decodes the most likely token at each step.

    Args:
        model: a `keras_transformer.Transformer`.
        source_ids: int `[batch, src_len]`, 0-padded.
        max_extra_length: int. Output may have this many more tokens than the input.
            Defaults to 50 (paper 6.1).
        max_length: int or None. A cap on the output length (EOS included). Defaults to None.
        bos_id, eos_id: ints. Start and end tokens. Default to 2 and 3.
        use_cache: bool. False recomputes the whole model on the prefix at every step (the
            reference for tests and benchmarks). Defaults to True.

    Returns:
        `(ids int32 [batch, out_len], scores float32 [batch])`: ids end with EOS, then 0s;
        a score is the sum of its tokens' log-probabilities, EOS included.

    Example:
    >>> from keras_transformer import TransformerConfig, build_transformer
    >>> model = build_transformer(TransformerConfig.preset("tiny", vocab_size=20))
    >>> ids, scores = greedy_search(model, [[5, 6, 7, 0]], max_extra_length=3)
    >>> ids.shape, ids.dtype, scores.shape  # out_len = src_len + max_extra_length
    (TensorShape([1, 7]), tf.int32, TensorShape([1]))
    """
    source_ids, limits, max_len = _prepare(model, source_ids, max_extra_length, max_length)
    step, cache, grow = _decoder_step(model, source_ids, 1, max_len, use_cache)

    def choose(log_probs, t):
        return top_k_by_blocks(log_probs, 1)[1][:, 0]  # the argmax, faster under XLA

    return _single_path(step, cache, grow, limits, max_len, choose, bos_id, eos_id)


def sample(
    model,
    source_ids,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    seed: int | None = None,
    max_extra_length: int = 50,
    max_length: int | None = None,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Draws each token from softmax(logits / temperature), optionally over the top k only.

    Args:
        temperature: float > 0. Below 1 sharpens, above 1 flattens. Defaults to 1.0.
        top_k: int. Sample among the k most likely tokens; 0 keeps all, 1 is greedy.
            Defaults to 0.
        seed: int or None. With a seed the draws are stateless and repeatable (step t uses
            the seed `(seed, t)`); None draws a fresh seed per call. Defaults to None.
        model, source_ids, max_extra_length, max_length, bos_id, eos_id: see `greedy_search`.

    Returns:
        `(ids, scores)` as `greedy_search`; scores are the model's log-probabilities (before
        temperature and top-k).

    Example:
    >>> from keras_transformer import TransformerConfig, build_transformer
    >>> model = build_transformer(TransformerConfig.preset("tiny", vocab_size=20))
    >>> first = sample(model, [[5, 6, 7]], top_k=5, seed=1)[0]
    >>> bool(tf.reduce_all(first == sample(model, [[5, 6, 7]], top_k=5, seed=1)[0]))
    True
    """
    if not temperature > 0:
        raise ValueError(f"temperature={temperature} must be > 0")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k={top_k!r} must be an integer >= 0")
    source_ids, limits, max_len = _prepare(model, source_ids, max_extra_length, max_length)
    step, cache, grow = _decoder_step(model, source_ids, 1, max_len, use_cache=True)
    if seed is None:
        seed = tf.random.uniform([], maxval=2**31 - 1, dtype=tf.int32)
    seed = tf.cast(seed, tf.int32)
    top_k = min(top_k, model.config.target_vocab)

    def choose(log_probs, t):
        logits = log_probs / temperature  # (batch, vocab)
        if top_k:
            kth_best = tf.math.top_k(logits, top_k).values[:, -1:]  # (batch, 1)
            logits = tf.where(logits < kth_best, NEG_INF, logits)
        drawn = tf.random.stateless_categorical(logits, 1, tf.stack([seed, t]), tf.int32)
        return drawn[:, 0]

    return _single_path(step, cache, grow, limits, max_len, choose, bos_id, eos_id)


def beam_search(
    model,
    source_ids,
    *,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    max_extra_length: int = 50,
    max_length: int | None = None,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    use_cache: bool = True,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Beam search with the length penalty of Wu et al. (2016), as in the paper (6.1).

    Each sentence keeps `beam_size` alive hypotheses, ranked by their log-probability, and
    the `beam_size` best finished ones, ranked by logP(Y) / lp(Y) with
    lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al., section 7; |Y| counts EOS). Each step takes
    the 2k best extensions of the alive hypotheses: those ending in EOS and ranked among the
    first k join the finished ones (as in fairseq), the k best others stay alive. Finished
    hypotheses are never extended. A sentence stops when no alive hypothesis can beat its
    best finished one any more (its log-probability only falls, and lp is largest at the
    length limit), or at its length limit. With `length_penalty=0`, `beam_size=1` is greedy
    search.

    Args:
        beam_size: int. Hypotheses kept per sentence, k. Defaults to 4 (paper 6.1).
        length_penalty: float >= 0. alpha; 0 ranks by log-probability alone. Defaults to 0.6
            (paper 6.1).
        model, source_ids, max_extra_length, max_length, bos_id, eos_id, use_cache: see
            `greedy_search`.

    Returns:
        `(ids int32 [batch, out_len], scores float32 [batch])`: the best finished hypothesis
        of each sentence and its length-normalised score.

    Example:
    >>> from keras_transformer import TransformerConfig, build_transformer
    >>> model = build_transformer(TransformerConfig.preset("tiny", vocab_size=20))
    >>> search = tf.function(lambda source: beam_search(model, source), jit_compile=True)
    >>> ids, scores = search(tf.constant([[5, 6, 7, 0], [8, 9, 0, 0]]))
    >>> ids.shape, scores.shape  # out_len = src_len + 50
    (TensorShape([2, 54]), TensorShape([2]))
    """
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size={beam_size!r} must be an integer >= 1")
    if not length_penalty >= 0:
        raise ValueError(f"length_penalty={length_penalty} must be >= 0")
    source_ids, limits, max_len = _prepare(model, source_ids, max_extra_length, max_length)
    k, vocab = beam_size, model.config.target_vocab
    step, state, follow, grow = _beam_step(model, source_ids, k, max_len, use_cache)
    batch = _batch_size(source_ids)

    def lp(length):
        return ((5.0 + tf.cast(length, tf.float32)) / 6.0) ** length_penalty

    def body(t, alive_ids, alive_logp, finished_ids, finished_scores, done, state):
        log_probs, state = step(alive_ids, t, state)  # (batch, beam, vocab)
        at_limit = t + 1 >= limits  # (batch,)
        allowed = _allowed_tokens(vocab, eos_id, at_limit[:, None, None])  # (batch, 1, vocab)
        scores = tf.where(allowed, alive_logp[:, :, None] + log_probs, NEG_INF)
        top_logp, top_index = top_k_by_blocks(tf.reshape(scores, [batch, k * vocab]), 2 * k)
        parents, tokens = top_index // vocab, top_index % vocab  # (batch, 2 * beam)
        candidates = tf.gather(alive_ids, parents, batch_dims=1)  # (batch, 2 * beam, T + 1)
        candidates = ops.slice_update(candidates, [0, 0, t + 1], tokens[:, :, None])
        ends = tokens == eos_id

        # The k best candidates not ending in EOS stay alive; their histories follow them.
        alive_logp, pick = tf.math.top_k(tf.where(ends, NEG_INF, top_logp), k)  # (batch, beam)
        alive_ids = tf.gather(candidates, pick, batch_dims=1)  # (batch, beam, T + 1)
        state = follow(state, tf.gather(parents, pick, batch_dims=1))

        # EOS candidates among the first k join the finished, scored logP / lp(t + 1).
        joins = ends & (tf.range(2 * k) < k) & (top_logp > NEG_INF / 2) & ~done[:, None]
        new_scores = tf.where(joins, top_logp / lp(t + 1), NEG_INF)  # (batch, 2 * beam)
        finished_scores, pick = tf.math.top_k(tf.concat([finished_scores, new_scores], 1), k)
        finished_ids = tf.gather(tf.concat([finished_ids, candidates], 1), pick, batch_dims=1)

        best_alive_bound = alive_logp[:, 0] / lp(limits)  # (batch,)
        done = done | at_limit | (finished_scores[:, 0] >= best_alive_bound)
        return t + 1, alive_ids, alive_logp, finished_ids, finished_scores, done, state

    def not_done(t, alive_ids, alive_logp, finished_ids, finished_scores, done, state):
        return (t < end) & ~tf.reduce_all(done)

    ids = tf.tile(_start_ids(batch, max_len, bos_id)[:, None, :], [1, k, 1])  # (b, beam, T+1)
    first_beam_only = tf.constant([0.0] + [NEG_INF] * (k - 1))  # the k starts are one
    loop_state = (
        tf.constant(0),
        ids,
        tf.tile(first_beam_only[None, :], [batch, 1]),  # (batch, beam)
        tf.zeros_like(ids),
        tf.fill([batch, k], NEG_INF),
        tf.zeros([batch], tf.bool),
        state,
    )
    for phase, end in enumerate(_phase_lengths(max_len)):
        if phase:
            loop_state = (*loop_state[:-1], grow(loop_state[-1], end))
        loop_state = tf.while_loop(not_done, body, loop_state)
    _, _, _, finished_ids, finished_scores, _, _ = loop_state
    return finished_ids[:, 0, 1:], finished_scores[:, 0]


def translate_ids(
    model,
    source_ids,
    *,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    max_extra_length: int = 50,
) -> tuple[tf.Tensor, tf.Tensor]:
    """`greedy_search` when `beam_size` is 1, else `beam_search`: what translators call."""
    if beam_size == 1:
        return greedy_search(model, source_ids, max_extra_length=max_extra_length)
    return beam_search(
        model,
        source_ids,
        beam_size=beam_size,
        length_penalty=length_penalty,
        max_extra_length=max_extra_length,
    )


def parallel_search(search, *, shards: int = 2):
    """`search` compiled with XLA and run on `shards` slices of each batch at the same time.

    On a CPU, a decoding step of a few dozen sentences is a chain of about a hundred and fifty
    small XLA operations run one after another; only the matrix products among them are
    split over the cores, so one program leaves cores idle much of the time. Here each
    slice of the batch is decoded by its own XLA program, and TensorFlow's executor runs the
    programs side by side on its inter-op threads, so that one's single-threaded work
    overlaps the other's (BENCHMARKS.md: `small`, 32 sentences, 2 cores: 1.24x greedy and
    1.29x beam 4 over one program). Sentences are independent in
    `greedy_search` and `beam_search`, so the results are those of the whole batch, up to
    float rounding; `sample` with a seed draws differently when the batch is cut differently.

    Args:
        search: `search(source_ids) -> (ids [batch, out_len], scores [batch])`, e.g.
            `lambda source_ids: greedy_search(model, source_ids)`. XLA compiles it once for
            each slice shape it meets.
        shards: int >= 1. How many slices to cut a batch into: equal, or the first ones one
            sentence longer (a batch smaller than `shards` leaves some empty). One per CPU
            core is the usual choice; 1 runs the batch whole under XLA. Defaults to 2.

    Returns:
        A `tf.function` `source_ids int32 [batch, src_len] -> (ids, scores)`, rows in the
        order of the input.

    Example:
    >>> from keras_transformer import TransformerConfig, build_transformer
    >>> model = build_transformer(TransformerConfig.preset("tiny", vocab_size=20))
    >>> search = parallel_search(lambda s: greedy_search(model, s, max_extra_length=3))
    >>> ids, scores = search([[5, 6, 7, 0], [8, 9, 0, 0], [4, 0, 0, 0]])
    >>> ids.shape, scores.shape
    (TensorShape([3, 7]), TensorShape([3]))
    """
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ValueError(f"shards={shards!r} must be an integer >= 1")
    compiled = tf.function(search, jit_compile=True)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, "source_ids")])
    def run(source_ids):
        if shards == 1:
            return compiled(source_ids)
        batch = tf.shape(source_ids)[0]
        sizes = tf.stack([(batch + shards - 1 - i) // shards for i in range(shards)])
        # Independent calls: the executor runs them concurrently, each on its own thread.
        results = [compiled(part) for part in tf.split(source_ids, sizes, num=shards)]
        return tuple(tf.concat(parts, axis=0) for parts in zip(*results, strict=True))

    return run


def top_k_by_blocks(x, k: int, block: int | None = None) -> tuple[tf.Tensor, tf.Tensor]:
    """`tf.math.top_k(x, k)` over the last axis of a 2-D `x`, ties included, reading `x` once.

    The k largest entries of a row lie in the k blocks (runs of `block` entries) with the
    largest maxima: a block holding one of them has a maximum at least as large, and at most
    k - 1 other blocks can beat it. So the row's block maxima are taken (one vectorised
    pass), then the k best blocks, and `top_k` runs over their `k * block` entries only.
    XLA's CPU top-k over beam search's `beam * vocab` candidates (32 sentences of 64,000 at
    beam 4 and 16,000 pieces, k = 8) took 3.7 ms a step, a fifth of beam search's time;
    this takes 1.2 ms, most of it reading the candidates once. With k = 1 it is greedy
    search's argmax: XLA's CPU `argmax` over 32 rows of 16,000 is an unvectorised reduction
    of (value, index) pairs, 370 us a step against 53 us for this. The chosen blocks are
    taken in index order, so equal values come out lower index first, as from
    `tf.math.top_k` (and `argmax`).

    Args:
        x: float `[rows, n]` with a static `n`.
        k: int, 1 <= k <= n.
        block: int or None. Block length; a divisor of n. Defaults to None: the divisor of n
            nearest to 2 * sqrt(n / k), or plain `tf.math.top_k` when n has none in
            [16, 4096] (or when k blocks would cover half the row).

    Returns:
        `(values [rows, k], indices int32 [rows, k])`, sorted by value, largest first.
    """
    n = x.shape[-1]
    if block is None:
        block = _block_length(n, k)
    elif n % block:
        raise ValueError(f"block={block} must divide the row length {n}")
    if block is None or 2 * k * block > n:
        return tf.math.top_k(x, k)
    blocks = tf.reshape(x, [-1, n // block, block])
    chosen = tf.sort(tf.math.top_k(tf.reduce_max(blocks, axis=-1), k).indices, axis=-1)
    candidates = tf.reshape(tf.gather(blocks, chosen, batch_dims=1), [-1, k * block])
    values, position = tf.math.top_k(candidates, k)
    indices = tf.gather(chosen, position // block, batch_dims=1) * block + position % block
    return values, indices


def _block_length(n, k):
    """The divisor of n in [16, 4096] nearest to 2 * sqrt(n / k), or None (fewer blocks
    than that leave more candidates to the second top-k; more blocks, more to the first)."""
    target = 2 * (n / k) ** 0.5
    divisors = [d for d in range(16, min(n, 4096) + 1) if n % d == 0]
    return min(divisors, key=lambda d: abs(d - target), default=None)


def _prepare(model, source_ids, max_extra_length, max_length):
    """Checks the arguments; returns `(source_ids, limits [batch], max_len)`, the per-sentence
    output length limits and the buffer length (their upper bound, known from shapes)."""
    if isinstance(max_extra_length, bool) or not isinstance(max_extra_length, int):
        raise ValueError(f"max_extra_length={max_extra_length!r} must be an integer >= 0")
    if max_extra_length < 0:
        raise ValueError(f"max_extra_length={max_extra_length} must be >= 0")
    if max_length is not None and (not isinstance(max_length, int) or max_length < 1):
        raise ValueError(f"max_length={max_length!r} must be None or an integer >= 1")
    source_ids = tf.cast(tf.convert_to_tensor(source_ids), tf.int32)
    if source_ids.shape.rank != 2:
        raise ValueError(f"source_ids must be [batch, src_len], got shape {source_ids.shape}")
    cap = model.config.max_length
    if max_length is not None:
        cap = min(max_length, cap)
    lengths = tf.reduce_sum(tf.cast(source_ids != PAD_ID, tf.int32), axis=1)  # (batch,)
    limits = tf.clip_by_value(lengths + max_extra_length, 1, cap)
    max_len = tf.clip_by_value(tf.shape(source_ids)[1] + max_extra_length, 1, cap)
    return source_ids, limits, max_len


def _decoder_step(model, source_ids, copies, max_len, use_cache):
    """The model as a next-token distribution.

    Returns `(step, cache, grow)`: `step(ids [n, T + 1], t, cache) -> (log_probs [n, vocab],
    cache)` with `n = batch * copies` (each sentence repeated `copies` times), where
    `ids[:, t]` is the token at decoder position t (BOS at 0); `cache` is the initial decoder
    cache, with room for the first phase; `grow(cache, length)` makes room for `length`.
    """
    if not use_cache:
        source_ids = tf.repeat(source_ids, copies, axis=0)  # (n, src_len)

        def full_step(ids, t, cache):
            inputs = {"source_ids": source_ids, "target_ids": ids[:, :-1]}
            logits = model(inputs, training=False)  # (n, T, vocab): the whole prefix again
            return tf.nn.log_softmax(tf.gather(logits, t, axis=1)), cache

        return full_step, [], lambda cache, length: cache

    memory, source_mask = model.encode(source_ids)  # (batch, src_len, d_model)
    memory = tf.repeat(memory, copies, axis=0)  # (n, src_len, d_model)
    source_mask = tf.repeat(source_mask, copies, axis=0)  # (n, src_len)
    kernel = model.target_embedding.output_kernel()  # (d_model, vocab), once for all steps

    def cached_step(ids, t, cache):
        token = tf.gather(ids, t[None], axis=1)  # (n, 1)
        x = model.target_embedding(token, start_index=t, training=False)  # (n, 1, d_model)
        x, cache = model.decoder.call_with_cache(x, cache, t, encoder_padding_mask=source_mask)
        return tf.nn.log_softmax(_project(x[:, 0], kernel)), cache  # (n, vocab)

    first = _phase_lengths(max_len)[0]
    return cached_step, model.decoder.init_cache(memory, first), model.decoder.grow_cache


def _beam_step(model, source_ids, k, max_len, use_cache):
    """The model as the next-token distributions of k hypotheses a sentence.

    Returns `(step, state, follow, grow)`: `step(ids [batch, k, T + 1], t, state) ->
    (log_probs [batch, k, vocab], state)`, `follow(state, parents [batch, k]) -> state` after
    hypothesis j of each sentence has become an extension of hypothesis `parents[:, j]`, and
    `grow(state, length) -> state` with room for `length` positions (the next phase).

    With the cache, the k hypotheses of a sentence are decoded as k query positions of one
    row: one copy of the encoder output and its projected keys and values a sentence, and
    self-attention buffers `[batch, heads, length * k, depth]` where step t writes the k
    hypotheses' keys and values side by side at `t * k`. Nothing in the buffers moves when
    beams are reordered: `ancestry [batch, k, length]` records, for each hypothesis and
    position, which of the k slots holds its ancestor's entry, and the self-attention mask
    shows each hypothesis those slots only. (Reordering the buffers instead costs a copy
    of every layer's keys and values each step.) `length` is the current phase's.
    """
    if not use_cache:
        full_step, _, _ = _decoder_step(model, source_ids, k, max_len, use_cache=False)

        def recompute(ids, t, state):
            n = tf.shape(ids)[0] * k
            log_probs, _ = full_step(tf.reshape(ids, [n, -1]), t, [])
            return tf.reshape(log_probs, [-1, k, tf.shape(log_probs)[-1]]), state

        return recompute, (), lambda state, parents: state, lambda state, length: state

    memory, source_mask = model.encode(source_ids)  # (batch, src_len, d_model)
    kernel = model.target_embedding.output_kernel()  # (d_model, vocab), once for all steps
    batch = _batch_size(source_ids)
    slots = tf.range(k)

    def step(ids, t, state):
        cache, ancestry = state
        token = tf.reshape(tf.gather(ids, t, axis=2), [batch * k, 1])
        x = model.target_embedding(token, start_index=t, training=False)  # (batch * k, 1, d)
        x = tf.reshape(x, [batch, k, tf.shape(x)[-1]])  # the k hypotheses as k positions
        own = tf.broadcast_to(slots[None, :, None], [batch, k, 1])  # hypothesis j wrote slot j
        ancestry = ops.slice_update(ancestry, [0, 0, t], own)
        length = tf.shape(ancestry)[2]  # positions the buffers hold in this phase
        visible = (ancestry[..., None] == slots) & (tf.range(length) <= t)[:, None]
        visible = tf.reshape(visible, [batch, k, length * k])  # (position, slot) flattened
        x, cache = model.decoder.call_with_cache(
            x, cache, t * k, encoder_padding_mask=source_mask, self_attention_mask=visible
        )
        return tf.nn.log_softmax(_project(x, kernel)), (cache, ancestry)  # (batch, k, vocab)

    def follow(state, parents):
        cache, ancestry = state
        return cache, tf.gather(ancestry, parents, batch_dims=1)

    def grow(state, length):
        cache, ancestry = state
        grown = tf.pad(ancestry, [[0, 0], [0, 0], [0, length - tf.shape(ancestry)[2]]])
        return model.decoder.grow_cache(cache, length * k), grown

    first = _phase_lengths(max_len)[0]
    state = (model.decoder.init_cache(memory, first * k), tf.zeros([batch, k, first], tf.int32))
    return step, state, follow, grow


def _project(x, kernel):
    """Float32 logits `[..., vocab]` of decoder outputs `[..., d_model]`."""
    logits = tf.matmul(tf.reshape(x, [-1, x.shape[-1]]), kernel)  # (n, vocab)
    shape = tf.concat([tf.shape(x)[:-1], [kernel.shape[-1]]], 0)
    return tf.cast(tf.reshape(logits, shape), tf.float32)


def _single_path(step, cache, grow, limits, max_len, choose, bos_id, eos_id):
    """The loop of greedy search and sampling: `choose(log_probs, t)` picks each token."""
    batch = tf.shape(limits)[0]

    def body(t, ids, scores, finished, cache):
        log_probs, cache = step(ids, t, cache)  # (batch, vocab)
        at_limit = t + 1 >= limits  # (batch,)
        allowed = _allowed_tokens(log_probs.shape[-1], eos_id, at_limit[:, None])
        token = choose(tf.where(allowed, log_probs, NEG_INF), t)  # (batch,)
        token = tf.where(finished, PAD_ID, token)
        token_logp = tf.gather(log_probs, token, batch_dims=1)
        scores += tf.where(finished, 0.0, token_logp)
        ids = ops.slice_update(ids, [0, t + 1], token[:, None])  # (batch, T + 1)
        return t + 1, ids, scores, finished | (token == eos_id), cache

    def not_done(t, ids, scores, finished, cache):
        return (t < end) & ~tf.reduce_all(finished)

    state = (
        tf.constant(0),
        _start_ids(batch, max_len, bos_id),
        tf.zeros([batch]),
        tf.zeros([batch], tf.bool),
        cache,
    )
    for phase, end in enumerate(_phase_lengths(max_len)):
        if phase:
            state = (*state[:-1], grow(state[-1], end))
        state = tf.while_loop(not_done, body, state)
    _, ids, scores, _, _ = state
    return ids[:, 1:], scores


def _phase_lengths(max_len, phases: int = PHASES, shortest: int = 8):
    """The number of positions the self-attention buffers hold in each phase of the loop:
    `ceil((p + 1) * max_len / phases)`, the last one `max_len`, none below `shortest` (or
    `max_len` if smaller: a buffer of one position would be a softmax over one key)."""
    floor = tf.minimum(max_len, shortest)
    return [tf.maximum((max_len * (p + 1) + phases - 1) // phases, floor) for p in range(phases)]


def _batch_size(source_ids):
    """The batch size: a Python int when the shape tells it (so loop shapes stay static,
    an empty batch included), else a scalar tensor."""
    static = source_ids.shape[0]
    return tf.shape(source_ids)[0] if static is None else static


def _start_ids(batch, max_len, bos_id):
    """`[batch, max_len + 1]`: BOS, then room for max_len output tokens."""
    return tf.concat([tf.fill([batch, 1], bos_id), tf.zeros([batch, max_len], tf.int32)], 1)


def _allowed_tokens(vocab, eos_id, at_limit):
    """Boolean `[..., vocab]`: never padding; only EOS where `at_limit` (broadcast)."""
    token = tf.range(vocab)
    return (token != PAD_ID) & (~at_limit | (token == eos_id))

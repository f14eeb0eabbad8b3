"""The opt-in speed path: tricks that pay on the benchmarks, behind one switch.

The layers, the loss and the decoders are written as the paper reads, from Keras's own parts
and plain operations: that is the stock path, the reference in every test. A trick stays only
if it earns at least 5% in speed or peak memory on `benchmarks.run` (medians of alternating
runs against the stock path, BENCHMARKS.md); it then lives here, and the code that can use
it asks `is_enabled()` when it is traced, as Keras's attention asks
`keras.config.is_flash_attention_enabled()`.

The switch is off unless turned on: a user who reuses a layer or the loss gets the stock
path. The trainers (training, evaluation and export, as the experiment's `training.fast`
says: on by default) and the benchmarks (`--fast on`) turn it on. Graphs already traced keep
the path they were traced with; an exported SavedModel keeps the path it was exported with.
The tricks are TensorFlow's: on another backend the switch stays off, and `enable` says so.

What it switches:
- `smoothed_cross_entropy`: the label-smoothed loss with a hand-written gradient that holds
  one vocabulary-sized buffer instead of two (peak memory at large vocabularies).
- `top_k`: beam search's top-2k over `beam * vocab` candidates by block maxima.
- `dropout`: 16 random bits an element instead of 32, for `kt.layers.PerReplicaDropout`
  (Keras's draws when the switch is off).
- `output_projection`: the decoders' tied pre-softmax projection with its matrix transposed
  once a decode instead of at every step, for steps of a few rows.

A device file (`kt.export.litert`) is traced with the switch off and `for_device_files()`:
the tricks that pay there and cost the file nothing, `top_k` (LiteRT's TOPK_V2 sorts its way
through a whole row) and `log_softmax` (LiteRT's LOG_SOFTMAX kernel is scalar, its SOFTMAX
XNNPACK's), and not `output_projection` (its laid-out copy would be a second copy
of the embedding table in the file). Inside `device_lookups` the export also gives an
embedding's token lookup a table of its own (`token_lookup`): the int8 file's lookup copy,
gathered row by row where the converter would dequantize the whole table once a request.
"""

from __future__ import annotations

import collections.abc
import contextlib

import keras
from keras import ops

from keras_transformer import _backends as backends
from keras_transformer.config import PAD_ID

_switch = {"enabled": False, "device_files": False, "lookups": {}}


def enable() -> None:
    """Turns the speed path on (for graphs traced from now on). TensorFlow only."""
    backends.require_tensorflow("kt.fast's speed path")
    _switch["enabled"] = True


def disable() -> None:
    """Turns the speed path off: the stock path (the default)."""
    _switch["enabled"] = False


def is_enabled() -> bool:
    """Whether the speed path is on."""
    return _switch["enabled"]


@contextlib.contextmanager
def switched(enabled: bool):
    """The speed path on (or off) for the graphs traced inside the block, then as it was.

    Examples:
        >>> from keras_transformer import fast
        >>> with fast.switched(True):
        ...     fast.is_enabled()
        True
        >>> fast.is_enabled()  # off again, as it was
        False
    """
    was_enabled = is_enabled()
    enable() if enabled else disable()
    try:
        yield
    finally:
        enable() if was_enabled else disable()


@contextlib.contextmanager
def for_device_files():
    """For the graphs traced inside the block, whatever the switch: the tricks a device file
    takes (the module doc), `top_k` by blocks; then as it was. The LiteRT export traces its
    signatures inside (`kt.export.litert_trace.traced`).

    Examples:
        >>> from keras_transformer import fast
        >>> with fast.switched(False), fast.for_device_files():
        ...     fast.is_enabled()  # the switch itself stays off: no laid-out projection
        False
    """
    was = _switch["device_files"]
    _switch["device_files"] = True
    try:
        yield
    finally:
        _switch["device_files"] = was


def device_lookups(lookups: dict) -> contextlib.AbstractContextManager:
    """For the graphs traced inside the block: `token_lookup` of each embedding table in
    `lookups` (`{table layer: function(ids) -> rows}`, a table layer being a
    `TransformerEmbedding`'s `token_embedding`) is that function, not the layer's own call;
    then as it was. The LiteRT export traces its int8 files' lookups so
    (`kt.export.litert_trace.int8_lookup`).

    Returns:
        A context manager (`with kt.fast.device_lookups({table: lookup}): ...`).

    Raises:
        TypeError: here, at the call: a key is not a Keras `Embedding` layer (a
            `TransformerEmbedding` itself, say, whose lookup would never be asked for), or a
            value is not callable; `lookups` is not a mapping.
    """
    if not isinstance(lookups, collections.abc.Mapping):
        raise TypeError(
            "kt.fast.device_lookups: give a dict {table layer: function of the ids}, not "
            f"{type(lookups).__name__}"
        )
    for layer, lookup in lookups.items():
        if problem := _lookup_problem(layer, lookup):
            raise TypeError(f"kt.fast.device_lookups: {problem}")
    return _with_lookups({id(layer): lookup for layer, lookup in lookups.items()})


@contextlib.contextmanager
def _with_lookups(by_table_id: dict):
    was = _switch["lookups"]
    _switch["lookups"] = {**was, **by_table_id}
    try:
        yield
    finally:
        _switch["lookups"] = was


def _lookup_problem(layer, lookup) -> str | None:
    """Why `{layer: lookup}` cannot be one of `device_lookups`'s entries, or None."""
    # A layer that holds the table (a TransformerEmbedding), told by its attribute: the
    # layers import this module, so it does not import them.
    if isinstance(getattr(layer, "token_embedding", None), keras.layers.Embedding):
        return (
            f"a key is the table layer, not the {type(layer).__name__} {layer.name!r}: pass "
            "its `.token_embedding`"
        )
    if not isinstance(layer, keras.layers.Embedding):
        return f"a key must be a Keras Embedding layer (a table), not {type(layer).__name__}"
    if not callable(lookup):
        return (
            f"the lookup of {layer.name!r} must be a function of the ids, not "
            f"{type(lookup).__name__}"
        )
    return None


def token_lookup(table, ids):
    """The rows of `ids` (int `[...]`) in an embedding table layer (`table`, a Keras
    `Embedding`): the layer's own call, or inside `device_lookups` the function given for
    it."""
    lookup = _switch["lookups"].get(id(table))
    return table(ids) if lookup is None else lookup(ids)


# With the switch on, an element's keep/drop decision compares 16 random bits with
# round(rate * 2^16).
LEVELS = 2**16


def dropout(inputs, rate: float, seed):
    """Dropout at `rate` with two 16-bit draws from each 32-bit Philox word (the speed path
    of `kt.layers.PerReplicaDropout`).

    Keras draws one 32-bit uniform number an element; generating them is a noticeable share
    of a training step on a CPU. Here each 32-bit word (Philox, as Keras's own) gives two
    16-bit draws, and an element is dropped when its draw is below `round(rate * 2^16)`;
    kept elements are scaled by the exact inverse of the keep probability, so the expected
    output equals the input. The dropped fraction differs from `rate` by less than 2^-17.

    Args:
        inputs: float tensor. rate: float in [0, 1]. seed: int32 `[2]`, a stateless seed.

    Returns:
        A tensor like `inputs`.
    """
    import tensorflow as tf

    drop_levels = round(rate * LEVELS)
    if drop_levels == 0:
        return inputs
    if drop_levels == LEVELS:
        return ops.zeros_like(inputs)
    size = tf.size(inputs)
    words = tf.random.stateless_uniform(
        [(size + 1) // 2], seed, minval=None, maxval=None, dtype=tf.uint32, alg="philox"
    )
    draws = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:size]  # two per word
    keep = tf.reshape(draws >= drop_levels, tf.shape(inputs))
    scale = ops.cast(LEVELS / (LEVELS - drop_levels), inputs.dtype)
    return ops.where(keep, inputs * scale, ops.zeros_like(inputs))


def top_k(x, k: int):
    """`ops.top_k(x, k)` over the last axis of a 2-D `x`: by block maxima when the switch
    is on or inside `for_device_files` (`top_k_by_blocks`), else the backend's own."""
    if is_enabled() or _switch["device_files"]:
        return top_k_by_blocks(x, k)
    return ops.top_k(x, k)


def log_softmax(logits):
    """A decoding step's log-probabilities, float `[..., vocab]` -> the same shape:
    `ops.log_softmax` over the last axis, or inside `for_device_files` the same quantity
    through a softmax, `(x - max) + log(max(softmax(x - max)))`: the softmax's largest
    value is `1 / sum(exp(x - max))`, so this is `x - max - log(sum(exp(x - max)))`, which
    LiteRT's XNNPACK computes vectorized where its LOG_SOFTMAX kernel goes an element at a
    time (both within float32 rounding of TensorFlow's log_softmax)."""
    if not _switch["device_files"]:
        return ops.log_softmax(logits, axis=-1)
    shifted = logits - ops.max(logits, axis=-1, keepdims=True)
    largest = ops.max(ops.softmax(shifted, axis=-1), axis=-1, keepdims=True)
    return shifted + ops.log(largest)


# Decoding steps of at most this many rows take the output projection by the laid-out copy.
FEW_ROWS = 8


def output_projection(embedding, rows):
    """The pre-softmax projection of a decoder that projects at every step, prepared once
    before its loop: `project(x [rows, d_model]) -> float32 logits [rows, vocab]`.

    `embedding` is a `kt.layers.TransformerEmbedding`. With the switch off, `project` is its
    own tied projection, `embedding(x, reverse=True)`. Keras's `ReversibleEmbedding` takes
    `x @ E^T` with `E` transposed inside the product, which XLA's CPU backend computes as a
    product with a transposed operand: slow for the few rows of a decoding step. With the
    switch on and at most `FEW_ROWS` rows (a beam-4 request of one sentence, say), `E^T` is
    laid out once (a `[d_model, vocab]` copy, taken where this is called) and each step
    multiplies by the copy: the same logits (LoRA's update included: the table's
    `embeddings` carry it). With more rows the copy does not pay (docs/guides/performance.md,
    "Tried and dropped"). Whenever the projection is more than that product, Keras's own call
    stays: untied, quantized, with a reverse dtype or soft-capped logits.

    Args:
        embedding: the decoder's `TransformerEmbedding`.
        rows: int or int32 scalar tensor. The rows of each step's `x`: from the static
            shape where it is known, else `tf.shape(...)[0]`.

    Returns:
        A function of `x` (in the layer's compute dtype).
    """
    table = embedding.token_embedding
    plain_tied = (
        table.tie_weights
        and table.quantization_mode is None
        and table.reverse_dtype is None
        and table.logit_soft_cap is None
    )
    if not (is_enabled() and plain_tied) or (isinstance(rows, int) and rows > FEW_ROWS):
        return lambda x: embedding(x, reverse=True)
    # In the table's own dtype, as Keras multiplies (the layer does not autocast it).
    kernel = ops.transpose(table.embeddings)  # (d_model, vocab)

    def laid_out(x):
        return embedding.add_logits_bias(ops.matmul(x, kernel))

    if isinstance(rows, int):
        return laid_out
    # Rows known only when the graph runs: under XLA the choice is a constant and the branch
    # not taken (with the copy, when unused) is compiled away.
    import tensorflow as tf

    few = rows <= FEW_ROWS
    return lambda x: tf.cond(
        few,
        lambda: laid_out(x),
        lambda: embedding(x, reverse=True),
    )


def smoothed_cross_entropy(labels, logits, label_smoothing, pad_id=PAD_ID):
    """Per-token `(1 - eps) * -log p(y) + eps * mean_v(-log p(v))`, the mean over every id
    but `pad_id` (`keras_transformer.losses.smoothed_cross_entropy`), with a hand-written
    gradient that never reads the logits.

    Automatic differentiation of the same expression builds the gradient from three
    `[..., vocab]` terms (the log-normalizer's softmax, a scatter for the label, the mean's
    broadcast), each a buffer the size of the logits. Written out,
    `softmax(logits) - (1 - eps) * onehot(y) - eps / vocab` is one elementwise pass, and it
    is taken over `exp(logits - max)`, which the forward pass writes out anyway (XLA's CPU
    backend sums it in a separate kernel): with the logits dead after the forward pass, XLA
    computes the exponentials in the logits' buffer and the gradient in theirs, so the
    vocabulary-sized memory of the loss is one buffer, not two. For the paper's base model
    on 4,096 target tokens and 37,000 pieces, 600 MB of logits, that is one such buffer less
    at peak (BENCHMARKS.md).

    Everything is computed on `[tokens, vocab]`, the shape of the output projection's
    matrix product: a reshape between two elementwise passes would keep XLA from writing
    one in place of the other.

    Args:
        labels: int32 `[...]`. logits: float32 `[..., vocab]`. label_smoothing: float eps.
        pad_id: int or None. The id left out of the mean (None: none).

    Returns:
        float32 `[...]`, one loss a position.
    """
    import tensorflow as tf

    eps = label_smoothing
    vocab = tf.shape(logits)[-1]
    rows = tf.reshape(logits, [-1, vocab])  # (tokens, vocab)
    row_labels = tf.reshape(labels, [-1])  # (tokens,)

    @tf.custom_gradient
    def per_token(rows):
        label_logits = tf.gather(rows, row_labels[:, None], batch_dims=1)[:, 0]
        # The label's logit is in the row, so this is the row maximum; taking it here puts
        # the gather before the exponentials, which may then overwrite the logits.
        peak = tf.maximum(tf.reduce_max(rows, axis=-1), label_logits)
        peak = tf.where(tf.math.is_finite(peak), peak, 0.0)  # as tf.reduce_logsumexp
        exponentials = tf.exp(rows - peak[:, None])  # (tokens, vocab)
        total = tf.reduce_sum(exponentials, axis=-1)
        log_normalizer = peak + tf.math.log(total)
        nll = log_normalizer - label_logits  # -log p(y)
        logit_sum, count = tf.reduce_sum(rows, axis=-1), tf.cast(vocab, tf.float32)
        if pad_id is not None:
            logit_sum, count = logit_sum - rows[:, pad_id], count - 1.0
        uniform = log_normalizer - logit_sum / count  # mean_v -log p(v), v != pad

        def grad(upstream):
            is_label = tf.range(vocab) == row_labels[:, None]
            spread = eps / count
            if pad_id is not None:
                spread = tf.where(tf.range(vocab) == pad_id, 0.0, spread)  # (vocab,)
            target = tf.where(is_label, 1.0 - eps, 0.0) + spread
            probs = exponentials * (1.0 / total)[:, None]
            return upstream[:, None] * (probs - target)

        return (1.0 - eps) * nll + eps * uniform, grad

    return tf.reshape(per_token(rows), tf.shape(labels))


def top_k_by_blocks(x, k: int, block: int | None = None) -> tuple:
    """`tf.math.top_k(x, k)` over the last axis of a 2-D `x`, ties included, reading `x` once.

    The k largest entries of a row lie in the k blocks (runs of `block` entries) with the
    largest maxima: a block holding one of them has a maximum at least as large, and at most
    k - 1 other blocks can beat it. So the row's block maxima are taken (one vectorised
    pass), then the k best blocks, and `top_k` runs over their `k * block` entries only.
    XLA's CPU top-k sorts each whole row; this reads the row once and sorts `k * block`
    entries. The chosen blocks are taken in index order, so equal values come out lower
    index first, as from `tf.math.top_k`.

    Args:
        x: float `[rows, n]` with a static `n`.
        k: int, 1 <= k <= n.
        block: int or None. Block length; a divisor of n. Defaults to None: the divisor of n
            nearest to 2 * sqrt(n / k), or plain `tf.math.top_k` when n has none in
            [16, 4096] (or when k blocks would cover half the row).

    Returns:
        `(values [rows, k], indices int32 [rows, k])`, sorted by value, largest first.
    """
    import tensorflow as tf

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


__all__ = [
    "device_lookups",
    "disable",
    "dropout",
    "enable",
    "for_device_files",
    "is_enabled",
    "log_softmax",
    "output_projection",
    "smoothed_cross_entropy",
    "switched",
    "token_lookup",
    "top_k",
    "top_k_by_blocks",
]

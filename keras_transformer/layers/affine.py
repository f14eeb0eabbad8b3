"""Bias and LayerNorm layers whose parameter gradients sum fast on a CPU under XLA.

The gradient of a bias, or of LayerNorm's scale and offset, sums the upstream gradient over
every token: a reduction over the rows of a `[tokens, width]` matrix. XLA's CPU code does
that reduction slowly: 94 us for a `[1024, 256]` gradient in a compiled loop, where adding
its 8 blocks of 128 rows elementwise (vectorised along the width) and then reducing the
`[128, 256]` sum takes 22 us (`[1024, 1024]`: 360 against 80 us). A training step of the
`small` preset has about 50 such sums. `column_sum` does them the second way, and
`bias_add`, `head_bias_add` and `scale_and_shift` are the forward operations with gradients
that use it when the graph is compiled with XLA and a gradient tape records (eagerly, in
plain graphs and in inference they are the plain operations: TensorFlow's own reduction
kernels are not slow, and the extra operations would only cost). `Dense` and
`LayerNormalization` are Keras's layers (same weights, same config) computed through them.
Forward results are those of the plain operations (the LayerNorm's up to float rounding: it
normalizes, then scales and shifts, where Keras folds the scale into the normalization); the
parameter gradients differ from autodiff's only in the order of float32 additions. On the
Xeon of BENCHMARKS.md, training `small` ran 1.03x as fast as with the plain operations (5
alternating runs).
"""

from __future__ import annotations

import keras
import tensorflow as tf
from tensorflow.python.eager import record  # whether a gradient tape is recording
from tensorflow.python.ops import control_flow_util  # the XLA-context test Keras 2 used

# Rows are summed in this many blocks elementwise before the last, short reduction.
BLOCKS = 8


def column_sum(x, width_rank: int = 1):
    """The float32 sum of `x` over all axes but its last `width_rank`.

    Equals `tf.reduce_sum(x, axis=range(rank - width_rank))` up to float rounding, computed
    as an elementwise sum of `BLOCKS` blocks of rows (zero-padded to a multiple of
    `BLOCKS`) and a reduction of the result: faster under XLA on a CPU (module docstring).
    Any leading shape works, static or not.
    """
    x = tf.cast(tf.convert_to_tensor(x), tf.float32)
    static = x.shape
    if static.rank is not None and static.is_fully_defined():  # as XLA sees it: few ops
        width_shape = static[static.rank - width_rank :]
        rows = tf.reshape(x, [-1, width_shape.num_elements()])
        if rows.shape[0] % BLOCKS:
            rows = tf.pad(rows, [[0, -rows.shape[0] % BLOCKS], [0, 0]])
    else:
        width_shape = tf.shape(x)[tf.rank(x) - width_rank :]
        rows = tf.reshape(x, [-1, tf.reduce_prod(width_shape)])
        rows = tf.pad(rows, [[0, -tf.shape(rows)[0] % BLOCKS], [0, 0]])
    blocks = tf.split(rows, BLOCKS, axis=0)
    total = tf.add_n(blocks)  # (rows / BLOCKS, width): elementwise, vectorised by XLA
    return tf.reshape(tf.reduce_sum(total, axis=0), width_shape)


def bias_add(x, bias):
    """`x + bias` for a bias over the last axes of `x`; under XLA, the bias gradient via
    `column_sum` (elsewhere TensorFlow's own reduction, which is not slow)."""
    x, bias = tf.convert_to_tensor(x), tf.convert_to_tensor(bias)
    if not training_under_xla():
        return x + tf.cast(bias, x.dtype)
    return _bias_add(x, bias)


def head_bias_add(x, bias):
    """`x [batch, heads, len, depth] + bias [heads, depth]`, the bias broadcast over batch and
    positions (attention's split-head projections); under XLA, the bias gradient via
    `column_sum`."""
    x, bias = tf.convert_to_tensor(x), tf.convert_to_tensor(bias)
    if not training_under_xla():
        return x + tf.cast(bias, x.dtype)[None, :, None, :]
    return _head_bias_add(x, bias)


def scale_and_shift(x, scale, offset):
    """`x * scale + offset` over the last axes of `x`; under XLA, the parameter gradients via
    `column_sum`."""
    x, scale, offset = (tf.convert_to_tensor(a) for a in (x, scale, offset))
    if not training_under_xla():
        return x * scale + offset
    return _scale_and_shift(x, scale, offset)


def compiling_with_xla():
    """Whether the current graph is being built for XLA (`jit_compile=True`); False eagerly."""
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def training_under_xla():
    """Whether custom gradients written for XLA's CPU code are worth their extra operations:
    under XLA, with a gradient tape recording (not in inference, e.g. the decoding loops)."""
    return compiling_with_xla() and record.could_possibly_record()


@tf.custom_gradient
def _bias_add(x, bias):
    def grad(upstream):
        return upstream, tf.cast(column_sum(upstream, bias.shape.rank), bias.dtype)

    return x + tf.cast(bias, x.dtype), grad


@tf.custom_gradient
def _head_bias_add(x, bias):
    def grad(upstream):
        per_position = tf.transpose(upstream, [0, 2, 1, 3])  # (batch, len, heads, depth)
        return upstream, tf.cast(column_sum(per_position, 2), bias.dtype)

    return x + tf.cast(bias, x.dtype)[None, :, None, :], grad


@tf.custom_gradient
def _scale_and_shift(x, scale, offset):
    def grad(upstream):
        rank = scale.shape.rank
        return (
            upstream * scale,
            tf.cast(column_sum(upstream * x, rank), scale.dtype),
            tf.cast(column_sum(upstream, rank), offset.dtype),
        )

    return x * scale + offset, grad


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dense(keras.layers.Dense):
    """`keras.layers.Dense` (same arguments, weights and config) with its bias added by
    `bias_add`. Quantized layers keep Keras's own computation."""

    def call(self, inputs, training=None):
        if self.bias is None or getattr(self, "quantization_mode", None):
            return super().call(inputs, training=training)
        x = bias_add(keras.ops.matmul(inputs, self.kernel), self.bias)
        return x if self.activation is None else self.activation(x)


@keras.saving.register_keras_serializable(package="keras_transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` (same arguments, weights and config), normalizing
    over the last axis in at least float32 as Keras does, then scaling and shifting with
    `scale_and_shift`. Other axes, `rms_scaling`, or no scale or no offset keep Keras's own
    computation."""

    def call(self, inputs):
        last = len(inputs.shape) - 1
        plain = self.axis in ([-1], [last]) and self.scale and self.center
        if not plain or self.rms_scaling:
            return super().call(inputs)
        x = tf.convert_to_tensor(inputs)
        if x.dtype.size < 4:
            x = tf.cast(x, tf.float32)
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        normalized = (x - mean) * tf.math.rsqrt(variance + self.epsilon)
        outputs = scale_and_shift(
            normalized, tf.cast(self.gamma, x.dtype), tf.cast(self.beta, x.dtype)
        )
        return tf.cast(outputs, self.compute_dtype)

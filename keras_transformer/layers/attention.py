"""Multi-head attention (paper 3.2.2) with padding/causal masks and key/value caches."""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_transformer import ops as kt_ops
from keras_transformer.layers.affine import bias_add, head_bias_add
from keras_transformer.layers.dropout import Dropout


def _as_matrix(initializer, rows_axes: int):
    """Initializes an n-d kernel as the 2-D matrix it stands for, so fan-in and fan-out are
    those of the projection (`[d_model, heads * depth]`), not of the n-d shape."""

    def init(shape, dtype=None):
        rows = math.prod(shape[:rows_axes])
        return ops.reshape(initializer((rows, math.prod(shape) // rows), dtype=dtype), shape)

    return init


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K,
    V W_i^V)  (paper 3.2.2).

    The weights have the layout of `keras.layers.MultiHeadAttention` (query, key, value and
    output kernels `[d_in, heads, depth]`/`[heads, depth, d_out]` with biases, in that order),
    so `set_weights(keras_mha.get_weights())` moves weights between the two. The attention
    itself is `_compute_attention`: override it to swap the attention without forking the
    layer. Probabilities are computed and returned in float32 under any dtype policy.

    Args:
        num_heads: int. Number of heads h.
        key_dim: int or None. Depth d_k of each query/key head. Defaults to None, which means
            the query width divided by `num_heads`.
        value_dim: int or None. Depth d_v of each value head. Defaults to None (= `key_dim`).
        dropout: float. Dropout on the attention probabilities. Defaults to 0.0.
        use_bias: bool. Whether the projections have biases. Defaults to True.
        output_dim: int or None. Width of the output. Defaults to None (= the query width).
        kernel_initializer: initializer of the projection matrices, applied to each as a 2-D
            matrix. Defaults to "glorot_uniform".
        bias_initializer: initializer of the biases. Defaults to "zeros".
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`...).

    Call arguments:
        query: tensor `[batch, q_len, d_in]`.
        value: tensor `[batch, k_len, d_in]`, or None for self-attention (value = query).
        key: tensor `[batch, k_len, d_in]`, or None (key = value).
        padding_mask: boolean `[batch, k_len]`, True at real key tokens. Defaults to None.
        attention_mask: boolean `[batch, q_len, k_len]`, True = attend. Defaults to None.
        use_causal_mask: bool. Query i attends to keys 0..i only (decoder self-attention).
            Defaults to False.
        training: bool. Whether dropout is active.

    Returns:
        `[batch, q_len, output_dim]` in the compute dtype. `call_with_weights` also returns the
        float32 weights `[batch, heads, q_len, k_len]`; `call_with_cache` decodes incrementally.

    Example:
    >>> import numpy as np
    >>> mha = MultiHeadAttention(num_heads=2)
    >>> x = np.random.rand(3, 5, 8).astype("float32")
    >>> mha(x, padding_mask=np.array([[True] * 4 + [False]] * 3)).shape
    TensorShape([3, 5, 8])
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int | None = None,
        value_dim: int | None = None,
        dropout: float = 0.0,
        use_bias: bool = True,
        output_dim: int | None = None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if num_heads < 1:
            raise ValueError(f"num_heads={num_heads} must be >= 1")
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.output_dim = output_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.dropout_layer = Dropout(dropout, dtype=self.dtype_policy, name="dropout")

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        query_width = query_shape[-1]
        if self.key_dim is None and query_width % self.num_heads:
            raise ValueError(
                f"query width {query_width} is not divisible by num_heads={self.num_heads}; "
                "pass key_dim explicitly"
            )
        self.head_key_dim = self.key_dim or query_width // self.num_heads
        self.head_value_dim = self.value_dim or self.head_key_dim
        out_width = self.output_dim or query_width
        h = self.num_heads

        def projection(name, d_in, depth):
            kernel = self.add_weight(
                name=f"{name}_kernel",
                shape=(d_in, h, depth),
                initializer=_as_matrix(self.kernel_initializer, 1),
            )
            bias = None
            if self.use_bias:
                bias = self.add_weight(
                    name=f"{name}_bias", shape=(h, depth), initializer=self.bias_initializer
                )
            return kernel, bias

        self.query_kernel, self.query_bias = projection("query", query_width, self.head_key_dim)
        self.key_kernel, self.key_bias = projection("key", key_shape[-1], self.head_key_dim)
        self.value_kernel, self.value_bias = projection(
            "value", value_shape[-1], self.head_value_dim
        )
        self.output_kernel = self.add_weight(
            name="output_kernel",
            shape=(h, self.head_value_dim, out_width),
            initializer=_as_matrix(self.kernel_initializer, 2),
        )
        self.output_bias = None
        if self.use_bias:
            self.output_bias = self.add_weight(
                name="output_bias", shape=(out_width,), initializer=self.bias_initializer
            )
        self.built = True

    # -- the math -------------------------------------------------------------------------

    # The casts are no-ops inside `__call__`, which autocasts variables to the compute dtype;
    # they keep `call_with_cache` and friends in that dtype under mixed precision too.

    def _split_heads(self, x, kernel, bias):
        """[batch, len, d_in] @ [d_in, heads, depth] -> [batch, heads, len, depth]."""
        x = ops.einsum("btd,dhk->bhtk", x, ops.cast(kernel, x.dtype))
        if bias is not None:
            x = head_bias_add(x, ops.cast(bias, x.dtype))
        return x

    def _merge_heads(self, x):
        """[batch, heads, len, depth_v] @ W^O -> [batch, len, output_dim]."""
        x = ops.einsum("bhtk,hkd->btd", x, ops.cast(self.output_kernel, x.dtype))
        if self.output_bias is not None:
            x = bias_add(x, ops.cast(self.output_bias, x.dtype))
        return x

    def _compute_attention(self, query, key, value, mask=None, training=None):
        """The attention proper, on split heads; override to swap it.

        Args:
            query: `[batch, heads, q_len, d_k]`. key: `[batch, heads, k_len, d_k]`.
            value: `[batch, heads, k_len, d_v]`. mask: boolean, broadcastable to
            `[batch, heads, q_len, k_len]`, True = attend.

        Returns:
            `(output [batch, heads, q_len, d_v], float32 weights [batch, heads, q_len, k_len])`.
        """
        weights = kt_ops.attention_probabilities(query, key, mask)
        dropped = self.dropout_layer(ops.cast(weights, value.dtype), training=training)
        return ops.matmul(dropped, value), weights

    def _attend(self, query, value, key, padding_mask, attention_mask, use_causal_mask, training):
        value = query if value is None else value
        key = value if key is None else key
        q = self._split_heads(query, self.query_kernel, self.query_bias)  # (b, h, q_len, d_k)
        k = self._split_heads(key, self.key_kernel, self.key_bias)  # (b, h, k_len, d_k)
        v = self._split_heads(value, self.value_kernel, self.value_bias)  # (b, h, k_len, d_v)
        causal = None
        if use_causal_mask:
            causal = kt_ops.causal_mask(ops.shape(query)[1], ops.shape(key)[1])
        mask = kt_ops.combine_masks(padding_mask, attention_mask, causal)
        output, weights = self._compute_attention(q, k, v, mask, training=training)
        return self._merge_heads(output), weights

    def call(
        self,
        query,
        value=None,
        key=None,
        *,
        padding_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        training=None,
    ):
        output, _ = self._attend(
            query, value, key, padding_mask, attention_mask, use_causal_mask, training
        )
        return output

    def call_with_weights(
        self,
        query,
        value=None,
        key=None,
        *,
        padding_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        training=None,
    ):
        """Like `call`, returning `(output, weights)` with the float32 attention weights
        `[batch, heads, q_len, k_len]` (for inspection and pictures)."""
        self._require_built("call_with_weights")
        query, value, key = (
            None if x is None else ops.cast(x, self.compute_dtype) for x in (query, value, key)
        )
        return self._attend(
            query, value, key, padding_mask, attention_mask, use_causal_mask, training
        )

    # -- incremental decoding ---------------------------------------------------------------

    def init_cache(self, batch_size, max_length: int):
        """An empty self-attention cache: zero key/value buffers of a fixed size.

        Returns:
            `{"key": [batch, heads, max_length, d_k], "value": [batch, heads, max_length, d_v]}`
            in the compute dtype. `call_with_cache` fills it one step at a time.
        """
        self._require_built("init_cache")
        h, dtype = self.num_heads, self.compute_dtype
        return {
            "key": ops.zeros((batch_size, h, max_length, self.head_key_dim), dtype),
            "value": ops.zeros((batch_size, h, max_length, self.head_value_dim), dtype),
        }

    def grow_cache(self, cache, max_length):
        """A self-attention cache with room for `max_length` positions: the buffers of
        `cache` (from `init_cache` or `call_with_cache`), 0-padded at the end. The entries
        already written keep their positions, so decoding goes on where it was."""
        padding = max_length - ops.shape(cache["key"])[2]
        return {
            name: ops.pad(buffer, [[0, 0], [0, 0], [0, padding], [0, 0]])
            for name, buffer in cache.items()
        }

    def compute_cache(self, value, key=None):
        """Projects a fixed memory (the encoder output) once, for encoder-decoder attention.

        Returns:
            `{"key": [batch, heads, k_len, d_k], "value": [batch, heads, k_len, d_v]}`.
        """
        self._require_built("compute_cache")
        value = ops.cast(value, self.compute_dtype)
        key = value if key is None else ops.cast(key, self.compute_dtype)
        return {
            "key": self._split_heads(key, self.key_kernel, self.key_bias),
            "value": self._split_heads(value, self.value_kernel, self.value_bias),
        }

    def call_with_cache(
        self, query, cache, *, cache_index=None, padding_mask=None, attention_mask=None
    ):
        """Attention of new query positions against cached keys and values (inference only).

        Two uses:
        - Self-attention (`cache_index` given): the new tokens' keys and values are written
          into the fixed-size buffers at `cache_index` (`init_cache`), and query i attends to
          cached positions 0..cache_index + i. Shapes stay static, so this runs in a
          `tf.while_loop` and under XLA.
        - Encoder-decoder attention (`cache_index` None): keys and values come unchanged from
          `compute_cache`; `padding_mask` `[batch, k_len]` hides source padding.

        `attention_mask` narrows either further. Beam search uses it to decode the k
        hypotheses of a sentence as k query positions of one row: each step writes their k
        keys and values side by side, and the mask lets each hypothesis see only the slots
        of its own ancestors, so the buffers never move when beams are reordered.

        Args:
            query: `[batch, new_len, d_in]`, usually `new_len` = 1.
            cache: `{"key": ..., "value": ...}` from `init_cache` or `compute_cache`.
            cache_index: scalar int (tensor), the position of the first new token, or None.
            padding_mask: boolean `[batch, k_len]` over the cached keys. Defaults to None.
            attention_mask: boolean `[batch, new_len, k_len]`, True = attend, over the cached
                keys (after this call's writes). Defaults to None.

        Returns:
            `(output [batch, new_len, output_dim], updated cache)`.
        """
        self._require_built("call_with_cache")
        query = ops.cast(query, self.compute_dtype)
        q = self._split_heads(query, self.query_kernel, self.query_bias)
        causal = None
        if cache_index is not None:
            start = [0, 0, cache_index, 0]
            cache = {
                "key": ops.slice_update(
                    cache["key"], start, self._split_heads(query, self.key_kernel, self.key_bias)
                ),
                "value": ops.slice_update(
                    cache["value"],
                    start,
                    self._split_heads(query, self.value_kernel, self.value_bias),
                ),
            }
            causal = kt_ops.causal_mask(
                ops.shape(query)[1], ops.shape(cache["key"])[2], offset=cache_index
            )
        mask = kt_ops.combine_masks(padding_mask, attention_mask, causal)
        output, _ = self._compute_attention(q, cache["key"], cache["value"], mask, training=False)
        return self._merge_heads(output), cache

    def _require_built(self, method):
        if not self.built:
            raise ValueError(
                f"{self.name}.{method}() needs built weights: call the layer once, or build it "
                "by building the model that holds it"
            )

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        return (*query_shape[:-1], self.output_dim or query_shape[-1])

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "dropout": self.dropout,
            "use_bias": self.use_bias,
            "output_dim": self.output_dim,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }

"""Multi-head attention (paper 3.2.2), made of Keras's `EinsumDense` projections."""

from __future__ import annotations

from typing import NamedTuple

import keras
from keras import ops

from keras_transformer import ops as kt_ops
from keras_transformer.layers.cache import AttentionCache
from keras_transformer.layers.dropout import PerReplicaDropout
from keras_transformer.layers.initializers import fresh
from keras_transformer.layers.quantization import dtype_policy_with_sublayers, sublayer_policy


class AttentionOutput(NamedTuple):
    """What `TransformerAttention.forward` returns.

    outputs: `[batch, q_len, output_dim]` in the compute dtype.
    cache: the updated `AttentionCache` when one was given, else None.
    weights: float32 `[batch, heads, q_len, k_len]` when asked for, else None.
    """

    outputs: object
    cache: AttentionCache | None
    weights: object


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K,
    V W_i^V)  (paper 3.2.2).

    The four projections are `keras.layers.EinsumDense` sublayers named `query`, `key`,
    `value` and `output`, so Keras's tools (`quantize`, `enable_lora`) reach them. Their
    kernels have the layout of `keras.layers.MultiHeadAttention`'s (`[d_in, heads, depth]` /
    `[heads, depth, d_out]`); the query/key/value biases are `[heads, 1, depth]` where Keras
    has `[heads, depth]`, because the heads come out as `[batch, heads, len, depth]` (the
    layout of the paper's code, tensor2tensor's `split_heads`), which feeds eq. (1)'s two
    batched products without a transpose. Reshape those biases to move weights between the
    two layers. The attention itself is
    `kt.ops.scaled_dot_product_attention` (eq. 1), called from `compute_attention`: override
    that method to swap the attention without forking the layer.

    It was named `MultiHeadAttention`, Keras's layer's name, although its bias layout, call
    arguments and cache are its own: that name still works for one release, with a
    `DeprecationWarning`, and files saved under it load.

    Args:
        num_heads: int. Number of heads h.
        key_dim: int or None. Depth d_k of each query/key head. Defaults to None, which means
            the query width divided by `num_heads`.
        value_dim: int or None. Depth d_v of each value head. Defaults to None (= `key_dim`).
        dropout: float. Dropout on the attention weights. Defaults to 0.0.
        use_bias: bool. Whether the projections have biases. Defaults to True.
        output_dim: int or None. Width of the output. Defaults to None (= the query width).
        kernel_initializer: initializer of the projection matrices. Defaults to
            "glorot_uniform".
        bias_initializer: initializer of the biases. Defaults to "zeros".
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`...).

    Call arguments (`call` and `forward`):
        query: tensor `[batch, q_len, d_in]`.
        value: tensor `[batch, k_len, d_in]`, or None for self-attention (value = query).
        key: tensor `[batch, k_len, d_in]`, or None (key = value).
        padding_mask: boolean `[batch, k_len]`, True at real key tokens. Defaults to None:
            the Keras masks of the keys and values (those of `key` and `value`, both where
            both carry one; else `query`'s), if they carry one
            (`keras.layers.Embedding(mask_zero=True)`...), as `keras.layers.MultiHeadAttention`.
        attention_mask: boolean `[batch, q_len, k_len]` or `[q_len, k_len]` (the same for
            every sentence), True = attend. Defaults to None.
        use_causal_mask: bool. Query i attends to keys 0..i only (decoder self-attention).
            Defaults to False.
        training: bool. Whether dropout is active.

    `forward` also takes `cache`, `cache_index` and `return_weights` (see its docstring).

    Returns:
        `call`: `[batch, q_len, output_dim]` in the compute dtype. `forward`: an
        `AttentionOutput(outputs, cache, weights)`.

    Examples:
        >>> import numpy as np
        >>> from keras_transformer.layers import TransformerAttention
        >>> mha = TransformerAttention(num_heads=2)
        >>> x = np.random.rand(3, 5, 8).astype("float32")  # (batch, len, d_model)
        >>> tuple(mha(x, padding_mask=np.array([[True] * 4 + [False]] * 3)).shape)
        (3, 5, 8)
        >>> tuple(mha.forward(x, return_weights=True).weights.shape)  # (batch, heads, q, k)
        (3, 2, 5, 5)
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
        self.dropout_layer = PerReplicaDropout(dropout, dtype=self.dtype_policy, name="dropout")
        self.supports_masking = True  # the output keeps the query's Keras mask

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

        def projection(name, input_shape, depth):
            # [batch, len, d_in] -> [batch, heads, len, depth]: split into heads
            layer = keras.layers.EinsumDense(
                "abc,cde->adbe",
                output_shape=(self.num_heads, None, depth),
                bias_axes="de" if self.use_bias else None,
                kernel_initializer=fresh(self.kernel_initializer),
                bias_initializer=fresh(self.bias_initializer),
                dtype=sublayer_policy(self, name),
                name=name,
            )
            layer.build(input_shape)
            # Each position projected alone: a Keras mask on the inputs may pass (EinsumDense
            # would drop it, with a warning). Only this layer reads the projections.
            layer.supports_masking = True
            return layer

        self.query_dense = projection("query", query_shape, self.head_key_dim)
        self.key_dense = projection("key", key_shape, self.head_key_dim)
        self.value_dense = projection("value", value_shape, self.head_value_dim)
        # [batch, heads, len, d_v] -> [batch, len, output_dim]: Concat(heads) W^O
        self.output_dense = keras.layers.EinsumDense(
            "abcd,bde->ace",
            output_shape=(None, out_width),
            bias_axes="e" if self.use_bias else None,
            kernel_initializer=fresh(self.kernel_initializer),
            bias_initializer=fresh(self.bias_initializer),
            dtype=sublayer_policy(self, "output"),
            name="output",
        )
        self.output_dense.build(
            (query_shape[0], self.num_heads, query_shape[1], self.head_value_dim)
        )
        self.built = True

    def compute_attention(self, query, key, value, mask=None, training=None):
        """The attention proper, on split heads: eq. (1) with dropout on the weights.

        Args:
            query: `[batch, heads, q_len, d_k]`.
            key: `[batch, heads, k_len, d_k]`.
            value: `[batch, heads, k_len, d_v]`.
            mask: boolean, broadcastable to `[batch, heads, q_len, k_len]`, True = attend.

        Returns:
            `(output [batch, heads, q_len, d_v], float32 weights [batch, heads, q_len, k_len])`.
        """
        return kt_ops.scaled_dot_product_attention(
            query,
            key,
            value,
            mask,
            dropout=lambda weights: self.dropout_layer(weights, training=training),
        )

    def forward(
        self,
        query,
        value=None,
        key=None,
        *,
        padding_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        cache: AttentionCache | None = None,
        cache_index=None,
        return_weights: bool = False,
        training=None,
    ) -> AttentionOutput:
        """The layer's one forward pass; `call` returns its `outputs`.

        With a cache (incremental decoding), two uses:
        - Self-attention (`cache_index` given): the new positions' keys and values are
          written into the cache's buffers at `cache_index` (`AttentionCache.write`), and
          query i attends to positions 0..cache_index + i of the buffers.
        - Encoder-decoder attention (`cache_index` None): the keys and values are the
          cache's, from `compute_cache`; `value` and `key` are not read.

        `query`, `value`, `key`, `padding_mask`, `attention_mask`, `use_causal_mask` and
        `training` are as in the class docstring; with a cache, masks are over the cached
        positions.

        Args:
            cache: `AttentionCache` or None. Defaults to None.
            cache_index: scalar int (tensor) or None: the position of the first query in the
                self-attention cache. Defaults to None.
            return_weights: bool. Also return the float32 attention weights. Defaults to
                False.

        Returns:
            `AttentionOutput(outputs, cache, weights)`.
        """
        q = self.query_dense(query)  # (batch, heads, q_len, d_k)
        causal = None
        if cache is None:
            value = query if value is None else value
            key = value if key is None else key
            k = self.key_dense(key)  # (batch, heads, k_len, d_k)
            v = self.value_dense(value)  # (batch, heads, k_len, d_v)
            if use_causal_mask:
                causal = kt_ops.causal_mask(ops.shape(query)[1], ops.shape(key)[1])
        else:
            if cache_index is not None:  # self-attention: the new positions join the cache
                cache = cache.write(cache_index, self.key_dense(query), self.value_dense(query))
                causal = kt_ops.causal_mask(ops.shape(query)[1], cache.length, cache_index)
            k, v = cache.key, cache.value
        mask = kt_ops.combine_masks(padding_mask, attention_mask, causal)
        output, weights = self.compute_attention(q, k, v, mask, training=training)
        output = self.output_dense(output)  # (batch, q_len, output_dim)
        return AttentionOutput(output, cache, weights if return_weights else None)

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
        mask=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
    ):
        # Keras's masks (`mask` with the query alone or given by the caller, `<name>_mask`
        # with more tensors): the keys' and values' decide which positions are attended to
        # (both, where both carry one, as keras.layers.MultiHeadAttention); the query's
        # stays on the output.
        if value is None and key is None:
            implicit = kt_ops.first_mask(mask, query_mask)
        else:  # the values are the query's where `value` is not given
            implicit = None
            for keras_mask in (query_mask if value is None else value_mask, key_mask):
                if keras_mask is not None:
                    implicit = (
                        keras_mask if implicit is None else ops.logical_and(implicit, keras_mask)
                    )
        return self.forward(
            query,
            value,
            key,
            padding_mask=kt_ops.first_mask(padding_mask, implicit),
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
            training=training,
        ).outputs

    def empty_cache(self, batch_size, length) -> AttentionCache:
        """An empty self-attention cache with room for `length` positions."""
        self._require_built("empty_cache")
        return AttentionCache.empty(
            batch_size,
            length,
            self.num_heads,
            self.head_key_dim,
            self.head_value_dim,
            self.compute_dtype,
        )

    def compute_cache(self, value, key=None) -> AttentionCache:
        """Projects a fixed memory (the encoder output `[batch, k_len, d_in]`) once, for
        encoder-decoder attention over it."""
        self._require_built("compute_cache")
        key = value if key is None else key
        return AttentionCache(self.key_dense(key), self.value_dense(value))

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
            "dtype": keras.dtype_policies.serialize(dtype_policy_with_sublayers(self)),
        }


def __getattr__(name: str):
    # PEP 562: the layer's name before its rename, for one release (layers/_renamed.py).
    if name == "MultiHeadAttention":
        from keras_transformer.layers import _renamed

        return _renamed.deprecated(__name__, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AttentionOutput", "TransformerAttention"]

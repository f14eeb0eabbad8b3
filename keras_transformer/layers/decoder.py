"""The decoder layer and the decoder stack (paper 3.1), with incremental decoding."""

from __future__ import annotations

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.block import TransformerBlock
from keras_transformer.layers.feed_forward import PositionwiseFeedForward


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(TransformerBlock):
    """One decoder layer: masked self-attention, encoder-decoder attention and a feed-forward
    network, each wrapped in a residual connection, dropout and layer norm (paper 3.1).

    The self-attention is causal: position i sees target positions 0..i only, so the
    prediction for i + 1 cannot read it from its input (paper 3.1, 3.2.3).

    Args:
        num_heads, d_ff, dropout, attention_dropout, activation_dropout, activation,
            norm_first, layer_norm_epsilon, kernel_initializer: see `TransformerBlock`.

    Call arguments:
        inputs: tensor `[batch, tgt_len, d_model]`, the embedded target, shifted right.
        encoder_output: tensor `[batch, src_len, d_model]`.
        padding_mask: boolean `[batch, tgt_len]`, True at real target tokens. Defaults to None.
        encoder_padding_mask: boolean `[batch, src_len]`, True at real source tokens.
            Defaults to None.
        training: bool. Whether dropout is active.

    Returns:
        `[batch, tgt_len, d_model]`. `call_with_cache` decodes one step at a time.

    Example:
    >>> import numpy as np
    >>> layer = DecoderLayer(num_heads=2, d_ff=32)
    >>> target = np.random.rand(2, 4, 8).astype("float32")
    >>> memory = np.random.rand(2, 6, 8).astype("float32")
    >>> layer(target, memory).shape
    TensorShape([2, 4, 8])
    """

    def build(self, inputs_shape, encoder_output_shape):
        self._check_width(inputs_shape)

        def attention(name, query_shape, value_shape):
            layer = MultiHeadAttention(
                self.num_heads,
                dropout=self.attention_dropout,
                kernel_initializer=self.kernel_initializer,
                dtype=self.dtype_policy,
                name=name,
            )
            layer.build(query_shape, value_shape)
            return layer

        self.self_attention = attention("self_attention", inputs_shape, inputs_shape)
        self.self_attention_residual = self._add_and_norm("self_attention_residual", inputs_shape)
        self.cross_attention = attention("cross_attention", inputs_shape, encoder_output_shape)
        self.cross_attention_residual = self._add_and_norm("cross_attention_residual", inputs_shape)
        self.feed_forward = PositionwiseFeedForward(
            self.d_ff,
            activation=self.activation,
            dropout=self.activation_dropout,
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="feed_forward",
        )
        self.feed_forward.build(inputs_shape)
        self.feed_forward_residual = self._add_and_norm("feed_forward_residual", inputs_shape)
        self.built = True

    def call(
        self,
        inputs,
        encoder_output,
        padding_mask=None,
        encoder_padding_mask=None,
        training=None,
    ):
        outputs, _ = self._forward(
            inputs, encoder_output, padding_mask, encoder_padding_mask, training, False
        )
        return outputs

    def call_with_attention(
        self, inputs, encoder_output, padding_mask=None, encoder_padding_mask=None
    ):
        """Like `call` at inference, also returning the float32 attention weights:
        `(outputs, {"self_attention": [batch, heads, tgt_len, tgt_len],
        "cross_attention": [batch, heads, tgt_len, src_len]})`."""
        return self._forward(
            inputs, encoder_output, padding_mask, encoder_padding_mask, False, True
        )

    def _forward(self, x, memory, padding_mask, encoder_padding_mask, training, with_weights):
        def attend(layer, query, value, **masks):
            if with_weights:
                return layer.call_with_weights(query, value, training=training, **masks)
            return layer(query, value, training=training, **masks), None

        # (batch, tgt_len, d_model) throughout
        h = self.self_attention_residual.normalize_input(x)
        h, self_weights = attend(
            self.self_attention, h, h, padding_mask=padding_mask, use_causal_mask=True
        )
        x = self.self_attention_residual(x, h, training=training)
        h = self.cross_attention_residual.normalize_input(x)
        h, cross_weights = attend(
            self.cross_attention, h, memory, padding_mask=encoder_padding_mask
        )
        x = self.cross_attention_residual(x, h, training=training)
        h = self.feed_forward(self.feed_forward_residual.normalize_input(x), training=training)
        x = self.feed_forward_residual(x, h, training=training)
        return x, {"self_attention": self_weights, "cross_attention": cross_weights}

    def init_cache(self, encoder_output, max_length: int):
        """The decoding state of this layer for one batch of sources.

        Args:
            encoder_output: `[batch, src_len, d_model]`.
            max_length: int. Longest target the self-attention buffers hold.

        Returns:
            `{"self_attention": empty buffers [batch, heads, max_length, depth],
            "cross_attention": the projected encoder output [batch, heads, src_len, depth]}`.
        """
        batch_size = keras.ops.shape(encoder_output)[0]
        return {
            "self_attention": self.self_attention.init_cache(batch_size, max_length),
            "cross_attention": self.cross_attention.compute_cache(encoder_output),
        }

    def grow_cache(self, cache, max_length: int):
        """This layer's state with self-attention buffers for `max_length` positions
        (`MultiHeadAttention.grow_cache`)."""
        grown = self.self_attention.grow_cache(cache["self_attention"], max_length)
        return {**cache, "self_attention": grown}

    def call_with_cache(
        self, inputs, cache, cache_index, encoder_padding_mask=None, self_attention_mask=None
    ):
        """Decodes new target positions given the cache of the earlier ones (inference only).

        Args:
            inputs: `[batch, new_len, d_model]`, the embedded tokens at positions
                cache_index.. cache_index + new_len - 1 (usually one).
            cache: this layer's state, from `init_cache` or a previous call.
            cache_index: scalar int (tensor), position of the first new token.
            encoder_padding_mask: boolean `[batch, src_len]`. Defaults to None.
            self_attention_mask: boolean `[batch, new_len, max_length]`, which cached
                positions each new one may see besides the causal limit (beam search: its
                ancestors'; see `MultiHeadAttention.call_with_cache`). Defaults to None.

        Returns:
            `(outputs [batch, new_len, d_model], updated cache)`: the same outputs the full
            `call` gives at those positions.
        """
        x = inputs
        h = self.self_attention_residual.normalize_input(x)
        h, self_cache = self.self_attention.call_with_cache(
            h, cache["self_attention"], cache_index=cache_index, attention_mask=self_attention_mask
        )
        x = self.self_attention_residual(x, h, training=False)
        h = self.cross_attention_residual.normalize_input(x)
        h, cross_cache = self.cross_attention.call_with_cache(
            h, cache["cross_attention"], padding_mask=encoder_padding_mask
        )
        x = self.cross_attention_residual(x, h, training=False)
        h = self.feed_forward(self.feed_forward_residual.normalize_input(x), training=False)
        x = self.feed_forward_residual(x, h, training=False)
        return x, {"self_attention": self_cache, "cross_attention": cross_cache}

    def compute_output_shape(self, inputs_shape, encoder_output_shape=None):
        return inputs_shape


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(TransformerBlock):
    """A stack of `num_layers` identical `DecoderLayer`s (paper 3.1; N = 6 in the base model).

    With `norm_first=True` a final LayerNorm closes the stack, as pre-norm models need.

    Args:
        num_layers: int. Number of layers N.
        num_heads, d_ff, dropout, attention_dropout, activation_dropout, activation,
            norm_first, layer_norm_epsilon, kernel_initializer: see `TransformerBlock`.

    Call arguments:
        inputs: tensor `[batch, tgt_len, d_model]`, the embedded target, shifted right.
        encoder_output: tensor `[batch, src_len, d_model]`.
        padding_mask: boolean `[batch, tgt_len]`. Defaults to None.
        encoder_padding_mask: boolean `[batch, src_len]`. Defaults to None.
        training: bool. Whether dropout is active.

    Returns:
        `[batch, tgt_len, d_model]`, ready for the output projection.

    Example:
    >>> import numpy as np
    >>> decoder = Decoder(num_layers=2, num_heads=2, d_ff=32)
    >>> target = np.random.rand(2, 4, 8).astype("float32")
    >>> memory = np.random.rand(2, 6, 8).astype("float32")
    >>> decoder(target, memory).shape
    TensorShape([2, 4, 8])
    """

    def __init__(self, num_layers: int, num_heads: int, d_ff: int, **kwargs):
        super().__init__(num_heads, d_ff, **kwargs)
        if num_layers < 1:
            raise ValueError(f"num_layers={num_layers} must be >= 1")
        self.num_layers = num_layers

    def build(self, inputs_shape, encoder_output_shape):
        self._check_width(inputs_shape)
        self.decoder_layers = []
        for i in range(self.num_layers):
            layer = DecoderLayer(**self._block_args(), name=f"layer_{i}")
            layer.build(inputs_shape, encoder_output_shape)
            self.decoder_layers.append(layer)
        self.final_norm = self._final_norm(inputs_shape)
        self.built = True

    def call(
        self,
        inputs,
        encoder_output,
        padding_mask=None,
        encoder_padding_mask=None,
        training=None,
    ):
        x = inputs
        for layer in self.decoder_layers:
            x = layer(
                x,
                encoder_output,
                padding_mask=padding_mask,
                encoder_padding_mask=encoder_padding_mask,
                training=training,
            )
        return x if self.final_norm is None else self.final_norm(x)

    def call_with_attention(
        self, inputs, encoder_output, padding_mask=None, encoder_padding_mask=None
    ):
        """Like `call` at inference, also returning each layer's attention weights:
        `(outputs, [DecoderLayer.call_with_attention weights, one dict a layer])`."""
        x, weights = inputs, []
        for layer in self.decoder_layers:
            x, layer_weights = layer.call_with_attention(
                x,
                encoder_output,
                padding_mask=padding_mask,
                encoder_padding_mask=encoder_padding_mask,
            )
            weights.append(layer_weights)
        return (x if self.final_norm is None else self.final_norm(x)), weights

    def init_cache(self, encoder_output, max_length: int):
        """One `DecoderLayer.init_cache` state a layer, as a list."""
        return [layer.init_cache(encoder_output, max_length) for layer in self.decoder_layers]

    def grow_cache(self, cache, max_length: int):
        """`DecoderLayer.grow_cache` for each layer's state."""
        return [
            layer.grow_cache(layer_cache, max_length)
            for layer, layer_cache in zip(self.decoder_layers, cache, strict=True)
        ]

    def call_with_cache(
        self, inputs, cache, cache_index, encoder_padding_mask=None, self_attention_mask=None
    ):
        """`DecoderLayer.call_with_cache` through the stack: `(outputs, updated cache list)`."""
        x, new_cache = inputs, []
        for layer, layer_cache in zip(self.decoder_layers, cache, strict=True):
            x, layer_cache = layer.call_with_cache(
                x,
                layer_cache,
                cache_index,
                encoder_padding_mask=encoder_padding_mask,
                self_attention_mask=self_attention_mask,
            )
            new_cache.append(layer_cache)
        return (x if self.final_norm is None else self.final_norm(x)), new_cache

    def compute_output_shape(self, inputs_shape, encoder_output_shape=None):
        return inputs_shape

    def get_config(self):
        return {**super().get_config(), "num_layers": self.num_layers}

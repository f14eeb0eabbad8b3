"""The decoder layer and the decoder stack (paper 3.1), with incremental decoding."""

from __future__ import annotations

import keras

from keras_transformer import ops as kt_ops
from keras_transformer.layers.attention import TransformerAttention
from keras_transformer.layers.block import LayerOutput, TransformerBlock
from keras_transformer.layers.cache import DecoderCache, DecoderLayerCache
from keras_transformer.layers.feed_forward import PositionwiseFeedForward


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(TransformerBlock):
    """One decoder layer: masked self-attention, encoder-decoder attention and a feed-forward
    network, each wrapped in a residual connection, dropout and layer norm (paper 3.1).

    The self-attention is causal: position i sees target positions 0..i only, so the
    prediction for i + 1 cannot read it from its input (paper 3.1, 3.2.3).

    Built without an encoder output (`layer(x)`, or `build(inputs_shape)`), the layer has no
    encoder-decoder attention: masked self-attention and the feed-forward network only, the
    block of decoder-only language models (GPT).

    The block's settings (`num_heads`, `d_ff`, `dropout`, `attention_dropout`,
    `activation_dropout`, `activation`, `norm_first`, `layer_norm_epsilon`,
    `kernel_initializer`) are `TransformerBlock`'s.

    Args:

    Call arguments:
        inputs: tensor `[batch, tgt_len, d_model]`, the embedded target, shifted right.
        encoder_output: tensor `[batch, src_len, d_model]`, or None for a layer without
            encoder-decoder attention. Defaults to None.
        padding_mask: boolean `[batch, tgt_len]`, True at real target tokens. Defaults to None:
            the Keras mask `inputs` carries, if any (`keras.layers.Embedding(mask_zero=True)`).
        encoder_padding_mask: boolean `[batch, src_len]`, True at real source tokens.
            Defaults to None: the Keras mask `encoder_output` carries, if any.
        training: bool. Whether dropout is active.

    Returns:
        `[batch, tgt_len, d_model]`. `forward` returns a `LayerOutput`, and with a cache
        decodes one step at a time.

    Examples:
        >>> import numpy as np
        >>> from keras_transformer.layers import DecoderLayer
        >>> layer = DecoderLayer(num_heads=2, d_ff=32)
        >>> target = np.random.rand(2, 4, 8).astype("float32")  # (batch, tgt_len, d_model)
        >>> memory = np.random.rand(2, 6, 8).astype("float32")  # the encoder's output
        >>> tuple(layer(target, memory).shape)
        (2, 4, 8)
        >>> tuple(DecoderLayer(num_heads=2, d_ff=32)(target).shape)  # no cross-attention
        (2, 4, 8)
    """

    def build(self, inputs_shape, encoder_output_shape=None):
        self._check_width(inputs_shape)

        def attention(name, query_shape, value_shape):
            layer = TransformerAttention(
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
        self.cross_attention = self.cross_attention_residual = None
        if encoder_output_shape is not None:
            self.cross_attention = attention("cross_attention", inputs_shape, encoder_output_shape)
            self.cross_attention_residual = self._add_and_norm(
                "cross_attention_residual", inputs_shape
            )
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

    def forward(
        self,
        inputs,
        encoder_output=None,
        *,
        padding_mask=None,
        encoder_padding_mask=None,
        cache: DecoderLayerCache | None = None,
        cache_index=None,
        return_weights: bool = False,
        training=None,
    ) -> LayerOutput:
        """The layer's one forward pass; `call` returns its `outputs`.

        `inputs`, `encoder_output`, `padding_mask`, `encoder_padding_mask` and `training` are as
        in the class docstring. With a cache, `encoder_output` is not read (its keys and values
        are in the cache) and may be None.

        Args:
            cache: `DecoderLayerCache` or None: incremental decoding (inference). `inputs`
                are then the new positions `cache_index .. cache_index + new_len - 1`
                (usually one), and the outputs at those positions equal those of the full
                `call` on the whole prefix. `padding_mask` is then over the positions the
                self-attention buffers hold, `[batch, cache length]`, True at those that may
                be attended to: a batch of left-padded prompts passes False at each row's
                padding, which is then never attended to (`kt.decoding.generate`).
                Defaults to None.
            cache_index: scalar int (tensor): the position of the first new token. Needed
                with a cache. Defaults to None.
            return_weights: bool. Also return the float32 attention weights
                `{"self_attention": [batch, heads, tgt_len, tgt_len], "cross_attention":
                [batch, heads, tgt_len, src_len]}` (None for a layer without encoder-decoder
                attention). Defaults to False.

        Returns:
            `LayerOutput(outputs, cache, weights)`: the updated cache when one was given.
        """
        self._check_forward(encoder_output, cache, cache_index)
        self_cache, cross_cache = (None, None) if cache is None else cache
        x = inputs  # (batch, tgt_len, d_model) throughout
        h = self.self_attention_residual.normalize_input(x)
        self_attention = self.self_attention.forward(
            h,
            padding_mask=padding_mask,
            use_causal_mask=True,
            cache=self_cache,
            cache_index=cache_index,
            return_weights=return_weights,
            training=training,
        )
        x = self.self_attention_residual(x, self_attention.outputs, training=training)
        cross_weights = None
        if self.cross_attention is not None:
            h = self.cross_attention_residual.normalize_input(x)
            cross_attention = self.cross_attention.forward(
                h,
                encoder_output,
                padding_mask=encoder_padding_mask,
                cache=cross_cache,
                return_weights=return_weights,
                training=training,
            )
            x = self.cross_attention_residual(x, cross_attention.outputs, training=training)
            cross_weights = cross_attention.weights
        h = self.feed_forward(self.feed_forward_residual.normalize_input(x), training=training)
        x = self.feed_forward_residual(x, h, training=training)
        if cache is not None:
            cache = DecoderLayerCache(self_attention.cache, cross_cache)
        weights = None
        if return_weights:
            weights = {"self_attention": self_attention.weights, "cross_attention": cross_weights}
        return LayerOutput(x, cache, weights)

    def _check_forward(self, encoder_output, cache, cache_index):
        """Raises when `forward`'s cache lacks its index, or when `encoder_output` is given to
        a layer without encoder-decoder attention or missing from one with it (no cache)."""
        if cache is not None:
            if cache_index is None:
                raise ValueError(f"{self.name}.forward: a cache needs cache_index")
        elif (encoder_output is None) != (self.cross_attention is None):
            raise ValueError(
                f"{self.name}: built without encoder-decoder attention (decoder-only), so it "
                "takes no encoder_output"
                if self.cross_attention is None
                else f"{self.name}: built with encoder-decoder attention; pass encoder_output"
            )

    def call(
        self,
        inputs,
        encoder_output=None,
        padding_mask=None,
        encoder_padding_mask=None,
        training=None,
        mask=None,
        inputs_mask=None,
        encoder_output_mask=None,
    ):
        # Keras's masks of the inputs stand in for masks not given: `mask` (given by the
        # caller, or by Keras when the inputs are the only tensor) before `inputs_mask`
        # (Keras's, beside other tensor arguments such as a caller's `mask`).
        return self.forward(
            inputs,
            encoder_output,
            padding_mask=kt_ops.first_mask(padding_mask, mask, inputs_mask),
            encoder_padding_mask=kt_ops.first_mask(encoder_padding_mask, encoder_output_mask),
            training=training,
        ).outputs

    def init_cache(self, encoder_output=None, length=None, *, batch_size=None):
        """The decoding state of this layer: empty self-attention buffers with room for
        `length` target positions, and the encoder output `[batch, src_len, d_model]`
        projected once for encoder-decoder attention. A layer without encoder-decoder
        attention takes `batch_size` instead of `encoder_output`; its cache's
        `cross_attention` is an empty tuple. Returns a `DecoderLayerCache`."""
        if length is None:
            raise ValueError(f"{self.name}.init_cache needs length")
        if (encoder_output is None) != (self.cross_attention is None):
            raise ValueError(
                f"{self.name}.init_cache: decoder-only, pass batch_size and no encoder_output"
                if self.cross_attention is None
                else f"{self.name}.init_cache needs encoder_output"
            )
        if encoder_output is None:
            if batch_size is None:
                raise ValueError(f"{self.name}.init_cache needs batch_size")
            return DecoderLayerCache(self.self_attention.empty_cache(batch_size, length), ())
        batch_size = keras.ops.shape(encoder_output)[0]
        return DecoderLayerCache(
            self.self_attention.empty_cache(batch_size, length),
            self.cross_attention.compute_cache(encoder_output),
        )

    def compute_output_shape(self, inputs_shape, encoder_output_shape=None):
        return inputs_shape


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(TransformerBlock):
    """A stack of `num_layers` identical `DecoderLayer`s (paper 3.1; N = 6 in the base model).

    With `norm_first=True` a final LayerNorm closes the stack, as pre-norm models need.
    Built without an encoder output, its layers have no encoder-decoder attention (a
    decoder-only language model's stack; see `DecoderLayer`).

    The block's settings (`num_heads`, `d_ff`, `dropout`, `attention_dropout`,
    `activation_dropout`, `activation`, `norm_first`, `layer_norm_epsilon`,
    `kernel_initializer`) are `TransformerBlock`'s.

    Args:
        num_layers: int. Number of layers N.

    Call arguments:
        inputs: tensor `[batch, tgt_len, d_model]`, the embedded target, shifted right.
        encoder_output: tensor `[batch, src_len, d_model]`, or None (decoder-only).
            Defaults to None.
        padding_mask: boolean `[batch, tgt_len]`. Defaults to None.
        encoder_padding_mask: boolean `[batch, src_len]`. Defaults to None.
        training: bool. Whether dropout is active.

    Returns:
        `[batch, tgt_len, d_model]`, ready for the output projection.

    Examples:
        >>> import numpy as np
        >>> from keras_transformer.layers import Decoder
        >>> decoder = Decoder(num_layers=2, num_heads=2, d_ff=32)
        >>> target = np.random.rand(2, 4, 8).astype("float32")  # (batch, tgt_len, d_model)
        >>> memory = np.random.rand(2, 6, 8).astype("float32")  # the encoder's output
        >>> tuple(decoder(target, memory).shape)
        (2, 4, 8)
    """

    def __init__(self, num_layers: int, num_heads: int, d_ff: int, **kwargs):
        super().__init__(num_heads, d_ff, **kwargs)
        if num_layers < 1:
            raise ValueError(f"num_layers={num_layers} must be >= 1")
        self.num_layers = num_layers

    def build(self, inputs_shape, encoder_output_shape=None):
        self._check_width(inputs_shape)
        self.decoder_layers = []
        for i in range(self.num_layers):
            layer = DecoderLayer(**self._block_args(), name=f"layer_{i}")
            layer.build(inputs_shape, encoder_output_shape)
            self.decoder_layers.append(layer)
        self.final_norm = self._final_norm(inputs_shape)
        self.built = True

    def forward(
        self,
        inputs,
        encoder_output=None,
        *,
        padding_mask=None,
        encoder_padding_mask=None,
        cache: DecoderCache | None = None,
        cache_index=None,
        return_weights: bool = False,
        training=None,
    ) -> LayerOutput:
        """The stack's one forward pass; `call` returns its `outputs`.

        Arguments as `DecoderLayer.forward`, with `cache` a `DecoderCache` (from
        `init_cache`). Returns `LayerOutput(outputs, cache, weights)`, weights a list of
        `DecoderLayer.forward` weights, bottom layer first, when `return_weights`.
        """
        x, weights, layer_caches = inputs, [], []
        for i, layer in enumerate(self.decoder_layers):
            x, layer_cache, layer_weights = layer.forward(
                x,
                encoder_output,
                padding_mask=padding_mask,
                encoder_padding_mask=encoder_padding_mask,
                cache=None if cache is None else cache.layers[i],
                cache_index=cache_index,
                return_weights=return_weights,
                training=training,
            )
            weights.append(layer_weights)
            layer_caches.append(layer_cache)
        x = x if self.final_norm is None else self.final_norm(x)
        cache = None if cache is None else DecoderCache(tuple(layer_caches))
        return LayerOutput(x, cache, weights if return_weights else None)

    def call(
        self,
        inputs,
        encoder_output=None,
        padding_mask=None,
        encoder_padding_mask=None,
        training=None,
        mask=None,
        inputs_mask=None,
        encoder_output_mask=None,
    ):
        # Keras's masks of the inputs stand in for masks not given: `mask` (given by the
        # caller, or by Keras when the inputs are the only tensor) before `inputs_mask`
        # (Keras's, beside other tensor arguments such as a caller's `mask`).
        return self.forward(
            inputs,
            encoder_output,
            padding_mask=kt_ops.first_mask(padding_mask, mask, inputs_mask),
            encoder_padding_mask=kt_ops.first_mask(encoder_padding_mask, encoder_output_mask),
            training=training,
        ).outputs

    def init_cache(self, encoder_output=None, length=None, *, batch_size=None) -> DecoderCache:
        """An empty decoding state for the sources whose encoder output is `encoder_output`
        `[batch, src_len, d_model]`, with room for `length` target positions (it grows with
        `DecoderCache.grow`). A decoder-only stack takes `batch_size` instead of
        `encoder_output`."""
        return DecoderCache(
            tuple(
                layer.init_cache(encoder_output, length, batch_size=batch_size)
                for layer in self.decoder_layers
            )
        )

    def compute_output_shape(self, inputs_shape, encoder_output_shape=None):
        return inputs_shape

    def get_config(self):
        return {**super().get_config(), "num_layers": self.num_layers}


__all__ = ["Decoder", "DecoderLayer"]

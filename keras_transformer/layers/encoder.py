"""The encoder layer and the encoder stack (paper 3.1)."""

from __future__ import annotations

import keras

from keras_transformer import ops as kt_ops
from keras_transformer.layers.attention import TransformerAttention
from keras_transformer.layers.block import LayerOutput, TransformerBlock
from keras_transformer.layers.feed_forward import PositionwiseFeedForward


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(TransformerBlock):
    """One encoder layer: self-attention, then a feed-forward network, each wrapped in a
    residual connection, dropout and layer norm (paper 3.1).

    The block's settings (`num_heads`, `d_ff`, `dropout`, `attention_dropout`,
    `activation_dropout`, `activation`, `norm_first`, `layer_norm_epsilon`,
    `kernel_initializer`) are `TransformerBlock`'s.

    Args:

    Call arguments:
        inputs: tensor `[batch, src_len, d_model]`.
        padding_mask: boolean `[batch, src_len]`, True at real tokens. Defaults to None: the
            Keras mask `inputs` carries, if any (`keras.layers.Embedding(mask_zero=True)`).
        training: bool. Whether dropout is active.

    Returns:
        `[batch, src_len, d_model]`. `forward` returns a `LayerOutput` and can also return the
        attention weights.

    Examples:
        >>> import numpy as np
        >>> from keras_transformer.layers import EncoderLayer
        >>> layer = EncoderLayer(num_heads=2, d_ff=32)
        >>> tuple(layer(np.random.rand(2, 5, 8).astype("float32")).shape)  # (batch, len, d_model)
        (2, 5, 8)
    """

    def build(self, inputs_shape):
        self._check_width(inputs_shape)
        self.self_attention = TransformerAttention(
            self.num_heads,
            dropout=self.attention_dropout,
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="self_attention",
        )
        self.self_attention.build(inputs_shape)
        self.self_attention_residual = self._add_and_norm("self_attention_residual", inputs_shape)
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
        self, inputs, *, padding_mask=None, return_weights: bool = False, training=None
    ) -> LayerOutput:
        """The layer's one forward pass; `call` returns its `outputs`.

        Returns:
            `LayerOutput(outputs, None, weights)`, weights `{"self_attention": float32
            [batch, heads, src_len, src_len]}` when `return_weights`, else None.
        """
        x = inputs  # (batch, src_len, d_model)
        h = self.self_attention_residual.normalize_input(x)
        attention = self.self_attention.forward(
            h, padding_mask=padding_mask, return_weights=return_weights, training=training
        )
        x = self.self_attention_residual(x, attention.outputs, training=training)
        h = self.feed_forward(self.feed_forward_residual.normalize_input(x), training=training)
        x = self.feed_forward_residual(x, h, training=training)
        weights = {"self_attention": attention.weights} if return_weights else None
        return LayerOutput(x, None, weights)

    def call(self, inputs, padding_mask=None, training=None, mask=None, inputs_mask=None):
        # Keras's mask of the inputs stands in for a padding_mask not given: `mask` (given
        # by the caller, or by Keras when the inputs are the only tensor) before
        # `inputs_mask` (Keras's, beside another tensor argument such as a caller's `mask`).
        padding_mask = kt_ops.first_mask(padding_mask, mask, inputs_mask)
        return self.forward(inputs, padding_mask=padding_mask, training=training).outputs

    def compute_output_shape(self, inputs_shape):
        return inputs_shape


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(TransformerBlock):
    """A stack of `num_layers` identical `EncoderLayer`s (paper 3.1; N = 6 in the base model).

    With `norm_first=True` a final LayerNorm closes the stack, as pre-norm models need.

    The block's settings (`num_heads`, `d_ff`, `dropout`, `attention_dropout`,
    `activation_dropout`, `activation`, `norm_first`, `layer_norm_epsilon`,
    `kernel_initializer`) are `TransformerBlock`'s.

    Args:
        num_layers: int. Number of layers N.

    Call arguments:
        inputs: tensor `[batch, src_len, d_model]`, the embedded source.
        padding_mask: boolean `[batch, src_len]`, True at real tokens. Defaults to None: the
            Keras mask `inputs` carries, if any (`keras.layers.Embedding(mask_zero=True)`).
        training: bool. Whether dropout is active.

    Returns:
        The encoder output ("memory"), `[batch, src_len, d_model]`.

    Examples:
        >>> import numpy as np
        >>> from keras_transformer.layers import Encoder
        >>> encoder = Encoder(num_layers=2, num_heads=2, d_ff=32)
        >>> x = np.random.rand(2, 5, 8).astype("float32")  # (batch, src_len, d_model)
        >>> tuple(encoder(x, padding_mask=np.array([[True] * 5, [True] * 3 + [False] * 2])).shape)
        (2, 5, 8)
    """

    def __init__(self, num_layers: int, num_heads: int, d_ff: int, **kwargs):
        super().__init__(num_heads, d_ff, **kwargs)
        if num_layers < 1:
            raise ValueError(f"num_layers={num_layers} must be >= 1")
        self.num_layers = num_layers

    def build(self, inputs_shape):
        self._check_width(inputs_shape)
        self.encoder_layers = []
        for i in range(self.num_layers):
            layer = EncoderLayer(**self._block_args(), name=f"layer_{i}")
            layer.build(inputs_shape)
            self.encoder_layers.append(layer)
        self.final_norm = self._final_norm(inputs_shape)
        self.built = True

    def forward(
        self, inputs, *, padding_mask=None, return_weights: bool = False, training=None
    ) -> LayerOutput:
        """The stack's one forward pass; `call` returns its `outputs`.

        Returns:
            `LayerOutput(outputs, None, weights)`, weights a list of `EncoderLayer.forward`
            weights, bottom layer first, when `return_weights`, else None.
        """
        x, weights = inputs, []
        for layer in self.encoder_layers:
            x, _, layer_weights = layer.forward(
                x, padding_mask=padding_mask, return_weights=return_weights, training=training
            )
            weights.append(layer_weights)
        x = x if self.final_norm is None else self.final_norm(x)
        return LayerOutput(x, None, weights if return_weights else None)

    def call(self, inputs, padding_mask=None, training=None, mask=None, inputs_mask=None):
        # Keras's mask of the inputs stands in for a padding_mask not given: `mask` (given
        # by the caller, or by Keras when the inputs are the only tensor) before
        # `inputs_mask` (Keras's, beside another tensor argument such as a caller's `mask`).
        padding_mask = kt_ops.first_mask(padding_mask, mask, inputs_mask)
        return self.forward(inputs, padding_mask=padding_mask, training=training).outputs

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        return {**super().get_config(), "num_layers": self.num_layers}


__all__ = ["Encoder", "EncoderLayer"]

"""What encoder/decoder layers and stacks share: their hyper-parameters and residual wiring."""

from __future__ import annotations

from typing import NamedTuple

import keras

from keras_transformer.layers.quantization import dtype_policy_with_sublayers
from keras_transformer.layers.residual import AddAndNorm


class LayerOutput(NamedTuple):
    """What `forward` returns in encoder and decoder layers and stacks.

    outputs: `[batch, len, d_model]`.
    cache: the updated decoding cache when one was given (decoder only), else None.
    weights: the float32 attention weights when asked for, else None: a dict
        `{"self_attention": [batch, heads, q_len, k_len], "cross_attention": ...}` for a
        layer, a list of those dicts (bottom layer first) for a stack.
    """

    outputs: object
    cache: object
    weights: object


class TransformerBlock(keras.layers.Layer):
    """Base of `EncoderLayer`, `DecoderLayer`, `Encoder` and `Decoder`: stores the
    hyper-parameters they share, serializes them, and builds their `AddAndNorm`s.

    Args:
        num_heads: int. Attention heads; must divide the input width d_model.
        d_ff: int. Inner width of the feed-forward network.
        dropout: float. Residual dropout (paper 5.4). Defaults to 0.1.
        attention_dropout: float. Dropout on attention probabilities. Defaults to 0.0.
        activation_dropout: float. Dropout after the feed-forward activation. Defaults to 0.0.
        activation: str or callable. Feed-forward activation. Defaults to "relu".
        norm_first: bool. Pre-norm instead of the paper's post-norm. Defaults to False.
        layer_norm_epsilon: float. LayerNorm epsilon. Defaults to 1e-6.
        kernel_initializer: initializer of all projection matrices. Defaults to
            "glorot_uniform".
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`...).
    """

    def __init__(
        self,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation="relu",
        norm_first: bool = False,
        layer_norm_epsilon: float = 1e-6,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.supports_masking = True  # an output position is its input's: the mask stays
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.activation = keras.activations.get(activation)
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def _check_width(self, shape):
        d_model = shape[-1]
        if d_model is None or d_model % self.num_heads:
            raise ValueError(
                f"{self.name}: d_model={d_model} is not divisible by num_heads={self.num_heads}"
            )

    def _block_args(self):
        """The shared arguments as objects, to build sublayers and stacked layers with."""
        return dict(
            num_heads=self.num_heads,
            d_ff=self.d_ff,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            activation_dropout=self.activation_dropout,
            activation=self.activation,
            norm_first=self.norm_first,
            layer_norm_epsilon=self.layer_norm_epsilon,
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
        )

    def _add_and_norm(self, name, shape):
        """A built `AddAndNorm` with this block's dropout, norm placement and epsilon."""
        residual = AddAndNorm(
            self.dropout,
            norm_first=self.norm_first,
            layer_norm_epsilon=self.layer_norm_epsilon,
            dtype=self.dtype_policy,
            name=name,
        )
        residual.build(shape)
        return residual

    def _final_norm(self, shape):
        """The LayerNorm that closes a pre-norm stack, or None for post-norm."""
        if not self.norm_first:
            return None
        norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="final_norm"
        )
        norm.build(shape)
        return norm

    def get_config(self):
        config = {**super().get_config(), **self._block_args()}
        # The policy serialized, with the quantized sublayers' (see quantization.py).
        config["dtype"] = keras.dtype_policies.serialize(dtype_policy_with_sublayers(self))
        config["activation"] = keras.activations.serialize(self.activation)
        config["kernel_initializer"] = keras.initializers.serialize(self.kernel_initializer)
        return config


__all__ = ["LayerOutput", "TransformerBlock"]

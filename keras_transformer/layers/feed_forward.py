"""The position-wise feed-forward network (paper 3.3, eq. 2)."""

from __future__ import annotations

import keras

from keras_transformer.layers.dropout import PerReplicaDropout
from keras_transformer.layers.initializers import fresh
from keras_transformer.layers.quantization import dtype_policy_with_sublayers, sublayer_policy


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionwiseFeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position alike (paper 3.3,
    eq. 2): two `keras.layers.Dense` named `inner_dense` and `output_dense`.

    Args:
        d_ff: int. Inner width (2048 in the base model).
        activation: str or callable. Inner activation, "relu" as the paper or "gelu".
            Defaults to "relu".
        dropout: float. Dropout after the activation. Defaults to 0.0.
        kernel_initializer: initializer of both matrices. Defaults to "glorot_uniform".
        bias_initializer: initializer of both biases. Defaults to "zeros".
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`...).

    Call arguments:
        inputs: tensor `[batch, len, d_model]`.
        training: bool. Whether dropout is active.

    Returns:
        `[batch, len, d_model]`: the output width equals the input width.

    Examples:
        >>> import numpy as np
        >>> from keras_transformer.layers import PositionwiseFeedForward
        >>> tuple(PositionwiseFeedForward(d_ff=32)(np.ones((2, 3, 8), "float32")).shape)
        (2, 3, 8)
    """

    def __init__(
        self,
        d_ff: int,
        activation="relu",
        dropout: float = 0.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.supports_masking = True  # position-wise: a Keras mask passes through
        self.d_ff = d_ff
        self.activation = keras.activations.get(activation)
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, inputs_shape):
        d_model = inputs_shape[-1]
        if d_model is None:
            raise ValueError(f"{self.name} needs a known last dimension, got {inputs_shape}")

        def dense(units, name, **kwargs):
            return keras.layers.Dense(
                units,
                kernel_initializer=fresh(self.kernel_initializer),
                bias_initializer=fresh(self.bias_initializer),
                dtype=sublayer_policy(self, name),
                name=name,
                **kwargs,
            )

        self.inner_dense = dense(self.d_ff, "inner_dense", activation=self.activation)
        self.inner_dense.build(inputs_shape)
        self.dropout_layer = PerReplicaDropout(
            self.dropout, dtype=self.dtype_policy, name="dropout"
        )
        self.output_dense = dense(d_model, "output_dense")
        self.output_dense.build((*inputs_shape[:-1], self.d_ff))
        self.built = True

    def call(self, inputs, training=None):
        x = self.inner_dense(inputs)  # (batch, len, d_ff)
        x = self.dropout_layer(x, training=training)
        return self.output_dense(x)  # (batch, len, d_model)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        return {
            **super().get_config(),
            "d_ff": self.d_ff,
            "activation": keras.activations.serialize(self.activation),
            "dropout": self.dropout,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "dtype": keras.dtype_policies.serialize(dtype_policy_with_sublayers(self)),
        }


__all__ = ["PositionwiseFeedForward"]

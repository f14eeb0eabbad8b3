"""Add & norm: the residual connection and layer normalization around every sublayer (paper
3.1, 5.4)."""

from __future__ import annotations

import warnings

import keras

from keras_transformer.layers.dropout import PerReplicaDropout


@keras.saving.register_keras_serializable(package="keras_transformer")
class AddAndNorm(keras.layers.Layer):
    """LayerNorm(x + Dropout(Sublayer(x))) (paper 3.1, 5.4), or its pre-norm variant: the
    sublayer connection that wraps every attention and feed-forward sublayer of the encoder
    and decoder layers, made of `keras.layers.LayerNormalization` and a dropout
    (`kt.layers.PerReplicaDropout`: Keras's `Dropout`, each replica drawing its own masks).

    Post-norm (the paper, `norm_first=False`): `call(x, sublayer(x))` returns
    `LayerNorm(x + Dropout(sublayer(x)))`.
    Pre-norm (`norm_first=True`): the sublayer reads `normalize_input(x)` = `LayerNorm(x)` and
    `call(x, sublayer(LayerNorm(x)))` returns `x + Dropout(...)`; the residual stream itself
    is never normalized, which keeps deep stacks trainable without warmup.

    A layer uses it in two calls around its sublayer:

        h = residual.normalize_input(x)       # LayerNorm(x) with pre-norm, else x
        x = residual(x, sublayer(h))          # LayerNorm(x + Dropout(.)) or x + Dropout(.)

    Layer normalization is computed in float32 under mixed precision (Keras's
    `LayerNormalization` upcasts half-precision inputs) and returned in the compute dtype.

    Args:
        dropout: float. Residual dropout on the sublayer output. Defaults to 0.0.
        norm_first: bool. Pre-norm instead of the paper's post-norm. Defaults to False.
        layer_norm_epsilon: float. LayerNorm epsilon. Defaults to 1e-6. (Its former name,
            `epsilon`, is still accepted for one release, with a `DeprecationWarning`; a
            config saved with it loads.)
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`...).

    Call arguments:
        residual: tensor `[batch, len, d_model]`, the sublayer's input x.
        sublayer_output: tensor `[batch, len, d_model]`, Sublayer(x).
        training: bool. Whether dropout is active.

    Returns:
        `[batch, len, d_model]` in the compute dtype.

    Examples:
        >>> import numpy as np
        >>> from keras_transformer.layers import AddAndNorm
        >>> x = np.random.rand(2, 3, 8).astype("float32")  # the sublayer's input
        >>> tuple(AddAndNorm()(x, 2 * x).shape)  # LayerNorm(x + Dropout(2 * x)), sublayer 2 * x
        (2, 3, 8)
    """

    def __init__(
        self,
        dropout: float = 0.0,
        norm_first: bool = False,
        layer_norm_epsilon: float = 1e-6,
        **kwargs,
    ):
        if "epsilon" in kwargs:  # the former name, for one release
            epsilon = kwargs.pop("epsilon")
            warnings.warn(
                "AddAndNorm(epsilon=) is deprecated: pass layer_norm_epsilon=, as to every "
                "other layer; epsilon= goes in the next release",
                DeprecationWarning,
                stacklevel=2,
            )
            if layer_norm_epsilon not in (1e-6, epsilon):
                raise ValueError(
                    f"epsilon={epsilon} and layer_norm_epsilon={layer_norm_epsilon}: pass "
                    "layer_norm_epsilon alone"
                )
            layer_norm_epsilon = epsilon
        super().__init__(**kwargs)
        self.supports_masking = True  # position-wise: the residual's Keras mask passes through
        self.dropout = dropout
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.dropout_layer = PerReplicaDropout(dropout, dtype=self.dtype_policy, name="dropout")
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
        )

    @property
    def epsilon(self) -> float:
        """The former name of `layer_norm_epsilon`, for one release. (It does not warn:
        Keras's saving reads every attribute of a layer.)"""
        return self.layer_norm_epsilon

    def build(self, residual_shape, sublayer_output_shape=None):
        self.layer_norm.build(residual_shape)
        self.built = True

    def normalize_input(self, x):
        """The sublayer's input: LayerNorm(x) with pre-norm, x itself with post-norm."""
        return self.layer_norm(x) if self.norm_first else x

    def call(self, residual, sublayer_output, training=None):
        x = residual + self.dropout_layer(sublayer_output, training=training)
        return x if self.norm_first else self.layer_norm(x)

    def compute_output_shape(self, residual_shape, sublayer_output_shape=None):
        return residual_shape

    def get_config(self):
        return {
            **super().get_config(),
            "dropout": self.dropout,
            "norm_first": self.norm_first,
            "layer_norm_epsilon": self.layer_norm_epsilon,
        }

    @classmethod
    def from_config(cls, config):
        # A config saved before the rename holds `epsilon`: a file read, not a use of the
        # former name, so it loads without a warning.
        config = dict(config)
        if "epsilon" in config:
            config["layer_norm_epsilon"] = config.pop("epsilon")
        return super().from_config(config)


__all__ = ["AddAndNorm"]

"""Quantized sublayers in a layer's config, so that a quantized layer saves and loads.

`quantize("int8")` gives each projection (`Dense`, `EinsumDense`, `Embedding`) its own
quantized policy, which the config of the layer holding them does not name: rebuilt from that
config, the projections would be built in float again and could not take the saved int8
weights. Keras's recipe (`keras.dtype_policies.DTypePolicyMap`'s docstring, keras-hub's
`Backbone.get_config`): the holder's config carries a map from the paths of its quantized
sublayers to their policies, and the holder, rebuilt with that map as its dtype, builds each
sublayer with its entry.
"""

from __future__ import annotations

import keras

from keras_transformer import _workarounds as workarounds


def dtype_policy_with_sublayers(layer: keras.layers.Layer) -> keras.DTypePolicy:
    """The dtype policy that rebuilds `layer` with its sublayers' quantization.

    A `keras.dtype_policies.DTypePolicyMap` from the paths of `layer`'s quantized sublayers
    to their policies, with `layer`'s own policy as its default; with nothing quantized,
    `layer`'s own policy.

    Args:
        layer: keras.layers.Layer or keras.Model. Built, for its sublayers' paths.

    Returns:
        A `keras.DTypePolicy` for the `dtype` entry of `layer`'s config (serialize it).

    Examples:
        >>> import numpy as np
        >>> from keras_transformer.layers import TransformerAttention
        >>> from keras_transformer.layers.quantization import dtype_policy_with_sublayers
        >>> mha = TransformerAttention(num_heads=2)
        >>> _ = mha(np.ones((1, 3, 8), "float32"))
        >>> mha.query_dense.quantize("int8")
        >>> dtype_policy_with_sublayers(mha)[mha.query_dense.path].name
        'int8_from_float32'
    """
    policy = layer.dtype_policy
    if isinstance(policy, keras.dtype_policies.DTypePolicyMap):
        policy = policy.default_policy
    quantized = {
        sublayer.path: sublayer.dtype_policy
        for sublayer in workarounds.sublayers(layer)
        if sublayer.quantization_mode is not None
    }
    if not quantized:
        return policy
    return keras.dtype_policies.DTypePolicyMap(policy, quantized)


def sublayer_policy(layer: keras.layers.Layer, name: str) -> keras.DTypePolicy:
    """The dtype policy of the Keras layer (`Dense`, `EinsumDense`, `Embedding`...) that
    `layer` builds, in its `build`, as its sublayer `name`.

    `layer`'s own policy or, when that is a `DTypePolicyMap` (`layer` rebuilt from a quantized
    config), the map's entry for the sublayer's path. Keras's layers get that policy rather
    than the map, which they would look up themselves: Keras 3.15's `Dense`, `EinsumDense` and
    `Embedding` save their weights by `dtype_policy.quantization_mode`, which a map answers
    with its default's, so a layer loaded quantized with a map could not be saved again
    ("Invalid dtype: object"). Layers of this package take the map itself.

    Args:
        layer: keras.layers.Layer. The holder, inside its `build` (its `path` is set).
        name: str. The sublayer's name.

    Returns:
        A `keras.DTypePolicy`.
    """
    policy = layer.dtype_policy
    if isinstance(policy, keras.dtype_policies.DTypePolicyMap):
        return policy[f"{layer.path}/{name}"]
    return policy


__all__ = ["dtype_policy_with_sublayers", "sublayer_policy"]

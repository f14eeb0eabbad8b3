"""AddAndNorm: post-norm and pre-norm, layer norm in float32 under mixed precision, and
`layer_norm_epsilon` (`epsilon` before, still read for one release)."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.testing import TestCase

from keras_transformer import layers

X = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
Y = np.random.default_rng(1).normal(size=(2, 3, 8)).astype("float32")


def layer_norm(x, epsilon=1e-6):
    x = x.astype("float64")
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon)


class AddAndNormLayerTest(TestCase):
    def test_layer(self):
        for norm_first in (False, True):
            self.run_layer_test(
                layers.AddAndNorm,
                init_kwargs={"dropout": 0.1, "norm_first": norm_first},
                input_shape={"residual_shape": (2, 3, 8), "sublayer_output_shape": (2, 3, 8)},
                expected_output_shape=(2, 3, 8),
                expected_num_trainable_weights=2,
                expected_num_seed_generators=1,
                run_training_check=False,  # two inputs: Keras's harness trains one-input layers
            )


def test_post_norm_is_layer_norm_of_the_sum():
    layer = layers.AddAndNorm()
    np.testing.assert_allclose(layer(X, Y), layer_norm(X + Y), atol=1e-5)
    np.testing.assert_array_equal(layer.normalize_input(X), X)


def test_pre_norm_normalizes_the_sublayer_input_only():
    layer = layers.AddAndNorm(norm_first=True)
    np.testing.assert_allclose(layer(X, Y), X + Y, atol=1e-6)
    np.testing.assert_allclose(layer.normalize_input(X), layer_norm(X), atol=1e-5)


@pytest.mark.exact
def test_layer_norm_is_computed_in_float32_under_float16():
    # Values near 200: their squares summed over 256 features overflow float16 (max 65504),
    # so a float16 layer norm would return inf/NaN. Inputs are exact in float16.
    rng = np.random.default_rng(2)
    x = (200 + np.round(rng.normal(size=(2, 4, 256)) * 8) / 8).astype("float32")
    layer = layers.AddAndNorm(dtype="mixed_float16")
    out = layer(x, np.zeros_like(x))
    assert out.dtype == tf.float16
    # float16 outputs of order 1: within float16's rounding.
    np.testing.assert_allclose(np.asarray(out, "float32"), layer_norm(x), atol=1e-2)


def test_layer_norm_epsilon_is_the_layer_norms():
    layer = layers.AddAndNorm(layer_norm_epsilon=1e-3)
    assert layer.layer_norm.epsilon == 1e-3 == layer.get_config()["layer_norm_epsilon"]
    assert "epsilon" not in layer.get_config()


def test_the_former_epsilon_argument_warns_once_and_sets_it():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layer = layers.AddAndNorm(0.1, epsilon=1e-3)
    assert [w.category for w in caught] == [DeprecationWarning]
    assert "layer_norm_epsilon" in str(caught[0].message) and caught[0].filename == __file__
    assert layer.layer_norm_epsilon == layer.layer_norm.epsilon == layer.epsilon == 1e-3
    assert layer.get_config()["layer_norm_epsilon"] == 1e-3
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="alone"):
        layers.AddAndNorm(epsilon=1e-3, layer_norm_epsilon=1e-5)


def test_a_config_saved_with_epsilon_loads_without_a_warning():
    saved = keras.layers.serialize(layers.AddAndNorm(0.1, norm_first=True, layer_norm_epsilon=1e-3))
    saved["config"]["epsilon"] = saved["config"].pop("layer_norm_epsilon")  # before the rename
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        restored = keras.layers.deserialize(saved)
    assert type(restored) is layers.AddAndNorm
    assert restored.layer_norm_epsilon == restored.layer_norm.epsilon == 1e-3
    assert restored.norm_first and restored.dropout == 0.1

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.testing import TestCase

from keras_transformer import layers
from keras_transformer.layers.dropout import LEVELS

X = np.random.default_rng(0).normal(size=(8, 64, 256)).astype("float32")  # 131,072 elements

# Eagerly (Philox) and under XLA (Threefry): the statistics below must hold for both.
EXECUTION = ["eager", "xla"]


def apply(layer, x, execution):
    if execution == "eager":
        return layer(x, training=True).numpy()
    return tf.function(lambda t: layer(t, training=True), jit_compile=True)(x).numpy()


class DropoutLayerTest(TestCase):
    def test_layer(self):
        self.run_layer_test(
            layers.Dropout,
            init_kwargs={"rate": 0.1, "seed": 3},
            input_shape=(2, 3, 8),
            expected_output_shape=(2, 3, 8),
            expected_num_trainable_weights=0,
            expected_num_seed_generators=1,
            run_training_check=False,  # nothing to train
        )


def test_inference_is_the_identity():
    np.testing.assert_array_equal(layers.Dropout(0.3)(X, training=False), X)
    np.testing.assert_array_equal(layers.Dropout(0.3)(X), X)


@pytest.mark.parametrize("execution", EXECUTION)
@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5])
def test_drops_the_rate_and_scales_the_rest_to_keep_the_mean(rate, execution):
    y = apply(layers.Dropout(rate, seed=1), X, execution)
    dropped = y == 0
    # 131,072 Bernoulli draws: the standard deviation of the fraction is below 0.0014.
    assert abs(dropped.mean() - rate) < 0.006
    keep = 1 - round(rate * LEVELS) / LEVELS
    np.testing.assert_allclose(y[~dropped], X[~dropped] / keep, rtol=1e-6)


@pytest.mark.parametrize("execution", EXECUTION)
def test_the_two_halves_of_each_random_word_are_independent(execution):
    # Elements 2i and 2i+1 share a 32-bit word: their decisions must not be correlated.
    dropped = apply(layers.Dropout(0.5, seed=2), np.ones((1 << 18,), "float32"), execution) == 0
    pairs = dropped.reshape(-1, 2).astype("float64")
    assert abs(np.corrcoef(pairs[:, 0], pairs[:, 1])[0, 1]) < 0.02
    # and the both-dropped pairs are a quarter of all, as for independent halves
    assert abs(pairs.prod(axis=1).mean() - 0.25) < 0.006


@pytest.mark.parametrize("execution", EXECUTION)
def test_each_call_draws_a_new_mask_and_a_seed_repeats_them(execution):
    a, b = layers.Dropout(0.5, seed=7), layers.Dropout(0.5, seed=7)
    first = apply(a, X, execution)
    assert not np.array_equal(first, apply(a, X, execution))
    np.testing.assert_array_equal(first, apply(b, X, execution))


def test_xla_draws_its_masks_with_threefry():
    """The generator is chosen by where the layer runs; nothing else tells them apart."""
    eager = apply(layers.Dropout(0.5, seed=9), X, "eager") == 0
    xla = apply(layers.Dropout(0.5, seed=9), X, "xla") == 0
    assert 0.4 < (eager != xla).mean() < 0.6  # independent masks, not the same one


def test_odd_sizes_and_unknown_shapes_under_xla():
    layer = layers.Dropout(0.2, seed=4)
    x = np.ones((3, 5, 7), "float32")  # 105 elements: one 16-bit draw of the last word unused
    drop = tf.function(
        lambda t: layer(t, training=True),
        jit_compile=True,
        input_signature=[tf.TensorSpec([None, 5, 7], tf.float32)],
    )
    y = drop(x).numpy()
    assert y.shape == x.shape
    assert set(np.unique(y)) <= {0.0, np.float32(1 / (1 - round(0.2 * LEVELS) / LEVELS))}


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_keeps_the_compute_dtype(policy):
    layer = layers.Dropout(0.1, dtype=policy)
    y = layer(X, training=True)
    assert keras.backend.standardize_dtype(y.dtype) == keras.DTypePolicy(policy).compute_dtype


def test_rates_zero_and_one_and_a_noise_shape():
    np.testing.assert_array_equal(layers.Dropout(0.0)(X, training=True), X)
    np.testing.assert_array_equal(layers.Dropout(1.0)(X, training=True), np.zeros_like(X))
    # A mask shared along the sequence axis: Keras's own dropout does it.
    y = layers.Dropout(0.5, noise_shape=(8, 1, 256), seed=5)(X, training=True).numpy()
    np.testing.assert_array_equal(y[:, :1] == 0, y[:, 1:2] == 0)

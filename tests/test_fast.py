"""The speed path (keras_transformer/fast.py): the switch, and each trick against the stock
path. The loss's hand-written gradient is tested in tests/test_losses.py, beam search with
the switch on in tests/test_decoding.py."""

import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.fast import top_k_by_blocks
from tests.fast_switch import fast_path


@pytest.fixture
def fast_on():
    """The switch on for one test, then back as it was."""
    with fast_path(True):
        yield


def test_the_switch_is_off_until_enabled():
    """In a fresh process: a user who imports the library gets the stock path."""
    code = (
        "import keras_transformer as kt; off = kt.fast.is_enabled(); kt.fast.enable(); "
        "on = kt.fast.is_enabled(); kt.fast.disable(); print(off, on, kt.fast.is_enabled())"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False", "True", "False"]


def _ties_below_a_few_late_maxima():
    """Rows of 0s, 1s and 2s with their 3 largest values near the end: the blocks holding
    those come first by maximum, the tied 2s must still come out lowest index first."""
    values = np.random.default_rng(3).integers(0, 3, (6, 4000))
    values[:, [-1, -200, -500]] = [10, 9, 8]
    return values


@pytest.mark.parametrize(
    "values",
    [
        np.random.default_rng(0).standard_normal((6, 4000)),
        np.random.default_rng(1).integers(0, 3, (6, 4000)),  # ties everywhere
        _ties_below_a_few_late_maxima(),
        np.where(np.random.default_rng(2).random((6, 4000)) < 0.99, -1e9, 0.5),  # ties at top
    ],
    ids=["distinct", "ties", "late-maxima", "few-finite"],
)
@pytest.mark.parametrize("k", [1, 8])
@pytest.mark.parametrize("block", [None, 16, 400])
def test_top_k_by_blocks_equals_top_k(values, k, block):
    x = tf.constant(values, tf.float32)
    expected_values, expected_indices = tf.math.top_k(x, k)
    xla = tf.function(lambda x: top_k_by_blocks(x, k, block), jit_compile=True)
    for got_values, got_indices in (top_k_by_blocks(x, k, block), xla(x)):
        np.testing.assert_array_equal(got_values, expected_values)
        np.testing.assert_array_equal(got_indices, expected_indices)


def test_top_k_by_blocks_needs_a_dividing_block():
    with pytest.raises(ValueError, match="block=300 must divide the row length 4000"):
        top_k_by_blocks(tf.zeros([2, 4000]), 4, block=300)


@pytest.mark.parametrize("shape, k", [((6, 4000), 8), ((3, 16000), 8), ((5, 20), 8), ((2, 7), 1)])
@pytest.mark.parametrize("enabled", [False, True], ids=["stock", "fast"])
def test_fast_top_k_equals_top_k_with_the_switch_on_or_off(request, shape, k, enabled):
    """Rows that go by blocks (4,000 and 16,000 entries) and rows too short for them."""
    if enabled:
        request.getfixturevalue("fast_on")
    x = tf.constant(np.random.default_rng(4).standard_normal(shape), tf.float32)
    expected_values, expected_indices = tf.math.top_k(x, k)
    xla = tf.function(lambda x: kt.fast.top_k(x, k), jit_compile=True)
    for values, indices in (kt.fast.top_k(x, k), xla(x)):
        np.testing.assert_array_equal(values, expected_values)
        np.testing.assert_array_equal(indices, expected_indices)


def test_dropout_is_keras_dropout_with_the_switch_off():
    x = np.random.default_rng(0).normal(size=(8, 300)).astype("float32")
    ours, theirs = kt.fast.Dropout(0.3, seed=5), keras.layers.Dropout(0.3, seed=5)
    for training in (True, False):
        np.testing.assert_array_equal(ours(x, training=training), theirs(x, training=training))
    assert ours.get_config() == {**theirs.get_config(), "name": ours.name}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "xla"])
@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_dropout_with_the_switch_on_keeps_the_rate_and_the_mean(fast_on, rate, compiled):
    layer = kt.fast.Dropout(rate, seed=2)
    x = np.ones((200, 1001), "float32")  # odd size: the last 32-bit word is half used
    call = lambda x: layer(x, training=True)  # noqa: E731
    y = np.asarray(tf.function(call, jit_compile=True)(x) if compiled else call(x))
    drop_levels = round(rate * kt.fast.LEVELS)
    keep = 1 - drop_levels / kt.fast.LEVELS
    assert set(np.unique(y).tolist()) == {0.0, np.float32(1 / keep)}
    dropped = (y == 0).mean()
    assert abs(dropped - rate) < 4 * (rate * (1 - rate) / y.size) ** 0.5  # 4 sigma
    assert abs(y.mean() - 1.0) < 0.01
    assert not np.array_equal(y, call(x))  # a new mask each call
    np.testing.assert_array_equal(layer(x, training=False), x)


def test_dropout_with_the_switch_on_leaves_edge_rates_and_noise_shape_to_keras(fast_on):
    x = np.ones((4, 6), "float32")
    np.testing.assert_array_equal(kt.fast.Dropout(0.0)(x, training=True), x)
    shared = kt.fast.Dropout(0.5, noise_shape=(4, 1), seed=1)(x, training=True).numpy()
    assert all(len(set(row.tolist())) == 1 for row in shared)  # one decision a row

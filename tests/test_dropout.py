"""`kt.layers.PerReplicaDropout`: Keras's dropout on one replica, its own masks on each replica
under `tf.distribute`, and the 16-bit draws of the speed switch (keras_transformer/fast.py)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.fast import switched as fast_path


@pytest.fixture(params=[False, True], ids=["stock", "fast"])
def switch(request):
    """Each test that takes it runs with the speed switch off and on."""
    with fast_path(request.param):
        yield request.param


def test_is_keras_dropout_on_one_replica_with_the_switch_off():
    x = np.random.default_rng(0).normal(size=(8, 300)).astype("float32")
    ours, theirs = kt.layers.PerReplicaDropout(0.3, seed=5), keras.layers.Dropout(0.3, seed=5)
    for training in (True, False):
        np.testing.assert_array_equal(ours(x, training=training), theirs(x, training=training))
    assert ours.get_config() == {**theirs.get_config(), "name": ours.name}


def test_round_trips_through_keras_serialization():
    layer = kt.layers.PerReplicaDropout(0.2, noise_shape=(None, 1), seed=3, name="drop")
    restored = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(restored) is kt.layers.PerReplicaDropout
    assert restored.get_config() == layer.get_config()


def _masks_per_replica(strategy, layer, x):
    """The layer applied to the same `x` on every replica: one output a replica."""

    @tf.function
    def step():
        return strategy.run(lambda: layer(x, training=True))

    return [np.asarray(y) for y in strategy.experimental_local_results(step())]


def test_each_replica_draws_its_own_mask(mirrored, switch):
    x = np.ones((64, 256), "float32")
    with mirrored.scope():
        layer = kt.layers.PerReplicaDropout(0.3, seed=7)
    first, second = _masks_per_replica(mirrored, layer, x)
    for y in (first, second):
        assert abs((y == 0).mean() - 0.3) < 0.02
    assert (first == 0).mean() > 0.2 and not np.array_equal(first == 0, second == 0)
    # Independent masks agree on about 0.3^2 + 0.7^2 = 58% of positions, the same mask on all.
    assert abs(((first == 0) == (second == 0)).mean() - 0.58) < 0.03


def test_replica_masks_are_reproducible_and_change_every_call(mirrored, switch):
    x = np.ones((16, 128), "float32")
    with mirrored.scope():
        one, two = (
            kt.layers.PerReplicaDropout(0.5, seed=11),
            kt.layers.PerReplicaDropout(0.5, seed=11),
        )
    first_call = _masks_per_replica(mirrored, one, x)
    for ours, again in zip(first_call, _masks_per_replica(mirrored, two, x), strict=True):
        np.testing.assert_array_equal(ours, again)  # same seed, same masks
    for before, after in zip(first_call, _masks_per_replica(mirrored, one, x), strict=True):
        assert not np.array_equal(before, after)  # the generator moves on


def test_a_mirrored_model_drops_differently_on_each_replica(mirrored):
    """The issue's check: the tiny preset with dropout 0.3, the same batch on both replicas,
    training=True: the replicas' logits differ (with Keras's own dropout they were equal)."""
    rng = np.random.default_rng(0)
    source = rng.integers(3, 50, size=(2, 9)).astype("int32")
    target = rng.integers(3, 50, size=(2, 7)).astype("int32")
    with mirrored.scope():
        config = kt.TransformerConfig.preset("tiny", vocab_size=50, dropout=0.3, max_length=16)
        model = kt.build_transformer(config)

    @tf.function
    def step():
        return mirrored.run(
            lambda: model({"source_ids": source, "target_ids": target}, training=True)
        )

    first, second = (np.asarray(y) for y in mirrored.experimental_local_results(step()))
    assert first.shape == (2, 7, 50)
    assert np.abs(first - second).max() > 1e-3
    inference = mirrored.experimental_local_results(
        tf.function(
            lambda: mirrored.run(
                lambda: model({"source_ids": source, "target_ids": target}, training=False)
            )
        )()
    )
    np.testing.assert_allclose(inference[0], inference[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "xla"])
@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_the_switch_on_keeps_the_rate_and_the_mean(rate, compiled):
    with fast_path(True):
        layer = kt.layers.PerReplicaDropout(rate, seed=2)
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


def test_edge_rates_and_noise_shape(switch):
    x = np.ones((4, 6), "float32")
    np.testing.assert_array_equal(kt.layers.PerReplicaDropout(0.0)(x, training=True), x)
    shared = kt.layers.PerReplicaDropout(0.5, noise_shape=(4, 1), seed=1)(x, training=True).numpy()
    assert all(len(set(row.tolist())) == 1 for row in shared)  # one decision a row

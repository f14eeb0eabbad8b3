"""Keras's own data parallelism on JAX: `keras.distribution.DataParallel` over two XLA host
devices (tests/conftest.py) trains the model with `model.fit`, and each device's share of the
batch gets its own dropout masks.

Under `DataParallel` one program runs over the global batch, sharded by rows: a dropout
mask is drawn for the global batch, so the devices' shares get different masks, and they
are the masks one device would draw for the whole batch. (Under tf.distribute each replica
runs the step on its share with the same seed state: `kt.layers.PerReplicaDropout` folds the
replica id into the seed there; tests/test_dropout.py.)
"""

import jax
import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.reversal import reversal_task


@pytest.fixture
def data_parallel():
    devices = keras.distribution.list_devices("cpu")
    assert len(devices) == 2, devices
    distribution = keras.distribution.DataParallel(devices=devices)
    keras.distribution.set_distribution(distribution)
    yield distribution
    keras.distribution.set_distribution(None)


def _fit(dropout, steps=3):
    keras.utils.set_random_seed(7)
    config = kt.TransformerConfig.preset(
        "tiny",
        vocab_size=20,
        d_model=32,
        d_ff=64,
        dropout=dropout,
        max_length=16,
        num_encoder_layers=1,  # one each side: the distribution is the point, not the depth
        num_decoder_layers=1,
    )
    model = kt.build_transformer(config)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=kt.losses.LabelSmoothedCrossEntropy())
    source, target = reversal_task(8 * steps, seed=2)
    history = model.fit(
        {"source_ids": source, "target_ids": target[:, :-1]},
        target[:, 1:],
        batch_size=8,
        epochs=1,
        shuffle=False,
        verbose=0,
    )
    return model, history.history["loss"][0]


def test_data_parallel_fit_trains_as_one_device_would(data_parallel):
    model, loss = _fit(dropout=0.1)
    kernel = model.trainable_variables[0].value
    assert len(kernel.sharding.device_set) == 2  # replicated on both devices
    keras.distribution.set_distribution(None)
    alone, alone_loss = _fit(dropout=0.1)
    assert loss == pytest.approx(alone_loss, rel=1e-5)
    for variable, expected in zip(model.weights, alone.weights, strict=True):
        np.testing.assert_allclose(
            np.asarray(variable.value), np.asarray(expected.value), atol=1e-5, err_msg=variable.path
        )


def test_each_device_share_of_the_batch_gets_its_own_dropout_masks(data_parallel):
    keras.utils.set_random_seed(3)
    layer = kt.layers.PerReplicaDropout(0.5, seed=11)
    ones = np.ones((4, 256), "float32")
    layer.build(ones.shape)
    state = [variable.value for variable in layer.non_trainable_variables]
    layout = data_parallel.get_data_layout(ones.shape)
    batch = jax.device_put(ones, layout.backend_layout)
    step = jax.jit(lambda state, x: layer.stateless_call([], state, x, training=True)[0])
    dropped = step(state, batch)
    shards = sorted(dropped.addressable_shards, key=lambda shard: shard.index[0].start)
    assert [shard.data.shape for shard in shards] == [(2, 256), (2, 256)]
    first, second = (np.asarray(shard.data) != 0 for shard in shards)
    assert not np.array_equal(first, second)
    assert 0.4 < first.mean() < 0.6 and 0.4 < second.mean() < 0.6
    # The masks of the whole batch on one device, from the same seed state.
    np.testing.assert_array_equal(np.asarray(dropped), np.asarray(step(state, ones)))

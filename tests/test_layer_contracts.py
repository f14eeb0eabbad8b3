"""What every public layer must do: save and load as `.keras` without custom objects, build and
run under MirroredStrategy, run under mixed precision, and compile with XLA."""

import keras
import numpy as np
import pytest

import keras_transformer  # noqa: F401  (registers the layers: nothing else is passed to load)
from tests.conftest import compiled
from tests.layer_cases import CASES, WEIGHTLESS

# Mixed precision against float32: a few roundings of each 16-bit type (11 bits; 8 bits).
TOLERANCE = {"mixed_float16": 2e-2, "mixed_bfloat16": 1.5e-1}


def _split(call_kwargs):
    """Tensor arguments (become model inputs) and the rest (passed as they are)."""
    tensors = {k: v for k, v in call_kwargs.items() if isinstance(v, np.ndarray)}
    return tensors, {k: v for k, v in call_kwargs.items() if k not in tensors}


def _wrap(layer, call_kwargs):
    """A functional model around `layer`, with one input per tensor argument."""
    tensors, flags = _split(call_kwargs)
    inputs = {
        k: keras.Input(shape=v.shape[1:], dtype=str(v.dtype), name=k) for k, v in tensors.items()
    }
    return keras.Model(inputs, layer(**inputs, **flags))


@pytest.mark.parametrize("name", CASES)
def test_keras_file_round_trip_without_custom_objects(name, tmp_path):
    cls, init, call = CASES[name]
    model = _wrap(cls(**init), call)
    tensors, _ = _split(call)
    expected = model(tensors, training=False)
    path = tmp_path / "layer.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    assert any(type(layer) is cls for layer in restored.layers)
    np.testing.assert_array_equal(restored(tensors, training=False), expected)


@pytest.mark.parametrize("name", CASES)
def test_config_round_trip(name):
    cls, init, _ = CASES[name]
    layer = cls(**init)
    clone = cls.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


@pytest.mark.parametrize("name", CASES)
def test_builds_and_runs_under_mirrored_strategy(name, mirrored):
    cls, init, call = CASES[name]
    tensors, _ = _split(call)
    import tensorflow as tf

    with mirrored.scope():
        model = _wrap(cls(**init), call)
    for variable in model.weights:
        assert isinstance(variable.value, tf.distribute.DistributedValues), variable.path
    expected = model(tensors, training=False)
    per_replica = mirrored.run(lambda: model(tensors, training=False))
    for output in mirrored.experimental_local_results(per_replica):
        np.testing.assert_allclose(output, expected, atol=1e-5)


@pytest.mark.parametrize("policy", sorted(TOLERANCE))
@pytest.mark.parametrize("name", CASES)
@pytest.mark.exact
def test_mixed_precision(name, policy):
    cls, init, call = CASES[name]
    reference_layer = cls(**init)
    reference = reference_layer(**call, training=False)
    layer = cls(**init, dtype=policy)
    layer(**call)  # build
    layer.set_weights(reference_layer.get_weights())
    output = layer(**call, training=False)
    compute_dtype = keras.DTypePolicy(policy).compute_dtype
    assert keras.backend.standardize_dtype(output.dtype) == compute_dtype
    assert all(keras.backend.standardize_dtype(w.dtype) == "float32" for w in layer.weights)
    output = np.asarray(keras.ops.cast(output, "float32"))
    assert np.isfinite(output).all()
    np.testing.assert_allclose(output, reference, atol=TOLERANCE[policy], rtol=TOLERANCE[policy])


@pytest.mark.parametrize("name", CASES)
def test_xla_forward_matches_eager(name):
    cls, init, call = CASES[name]
    layer = cls(**init)
    eager = layer(**call, training=False)
    tensors, flags = _split(call)
    forward = compiled(lambda tensors: layer(**tensors, **flags, training=False))
    np.testing.assert_allclose(forward(tensors), eager, atol=1e-5)


@pytest.mark.parametrize("name", [name for name in CASES if name not in WEIGHTLESS])
def test_xla_training_step(name):
    cls, init, call = CASES[name]
    tensors, _ = _split(call)
    model = _wrap(cls(**init), call)
    before = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=lambda y_true, y_pred: keras.ops.mean(keras.ops.square(y_pred)),
        jit_compile=True,
    )
    batch = next(iter(tensors.values())).shape[0]
    # train_on_batch runs the training step that fit compiles, without fit's dataset.
    loss = model.train_on_batch(tensors, np.zeros((batch, 1), "float32"))
    assert model.jit_compile
    assert np.isfinite(loss)
    after = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    assert any(not np.array_equal(a, b) for a, b in zip(before, after, strict=True))

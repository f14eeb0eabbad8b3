"""Bias and LayerNorm with fast column sums: the same values and gradients as the plain
operations and as Keras's layers, in every execution mode, and serializable."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import affine

RNG = np.random.default_rng(0)


def _floats(*shape):
    return RNG.normal(size=shape).astype("float32")


@pytest.mark.parametrize(
    "shape, width_rank",
    [((4, 32, 6), 1), ((37, 6), 1), ((3, 6), 1), ((2, 3, 4, 5), 2), ((0, 4), 1), ((5,), 1)],
)
def test_column_sum_is_the_sum_over_leading_axes(shape, width_rank):
    x = _floats(*shape)
    expected = x.reshape(-1, *shape[len(shape) - width_rank :]).astype("float64").sum(0)
    got = affine.column_sum(x, width_rank)
    assert got.dtype == tf.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_column_sum_with_shapes_known_only_when_run():
    x = _floats(3, 11, 6)
    for jit in (False, True):
        spec = tf.TensorSpec([None, None, None], tf.float32)
        fn = tf.function(lambda x: affine.column_sum(x, 1), input_signature=[spec])
        fn = tf.function(fn, jit_compile=True) if jit else fn
        np.testing.assert_allclose(fn(x), x.sum((0, 1)), rtol=1e-5, atol=1e-5)


def test_column_sum_of_half_precision_sums_in_float32():
    x = np.full((4096, 2), 1.0, "float16")  # 4096 is past float16's exact integers once summed
    assert affine.column_sum(tf.constant(x)).numpy().tolist() == [4096.0, 4096.0]


OPERATIONS = {
    "bias_add": (lambda x, b: x + b, affine.bias_add, [(4, 9, 6), (6,)]),
    "scale_and_shift": (lambda x, s, b: x * s + b, affine.scale_and_shift, [(4, 9, 6), (6,), (6,)]),
    "head_bias_add": (
        lambda x, b: x + b[None, :, None, :],
        affine.head_bias_add,
        [(2, 3, 5, 4), (3, 4)],
    ),
}


@pytest.mark.parametrize("mode", ["eager", "graph", "xla"])
@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_operations_match_autodiff(name, mode):
    plain, fast, shapes = OPERATIONS[name]
    args = [tf.constant(_floats(*shape)) for shape in shapes]
    weights = tf.constant(_floats(*shapes[0]))

    def value_and_grads(op):
        with tf.GradientTape() as tape:
            tape.watch(args)
            y = op(*args)
            loss = tf.reduce_sum(y * weights)
        return y, tape.gradient(loss, args)

    if mode != "eager":
        value_and_grads = tf.function(value_and_grads, jit_compile=mode == "xla")
    (y_plain, g_plain), (y_fast, g_fast) = value_and_grads(plain), value_and_grads(fast)
    np.testing.assert_allclose(y_fast, y_plain, rtol=1e-6, atol=1e-6)
    for got, expected in zip(g_fast, g_plain, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def _twins(kind, **kwargs):
    """Our layer and Keras's, built alike, with the same random weights."""
    ours = getattr(affine, kind)(**kwargs)
    theirs = getattr(keras.layers, kind)(**kwargs)
    for layer in (ours, theirs):
        layer.build((None, 5, 6))
    ours.set_weights([_floats(*w.shape) for w in ours.get_weights()])
    theirs.set_weights(ours.get_weights())
    return ours, theirs


LAYERS = [
    ("Dense", {"units": 7, "activation": "relu"}),
    ("Dense", {"units": 7, "use_bias": False}),
    ("LayerNormalization", {"epsilon": 1e-6}),
    ("LayerNormalization", {"epsilon": 1e-6, "center": False}),  # Keras's own computation
    ("LayerNormalization", {"axis": 1}),  # ditto
]


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("kind, kwargs", LAYERS)
def test_layers_match_keras_values_and_gradients(kind, kwargs, jit):
    ours, theirs = _twins(kind, **kwargs)
    x = tf.constant(_floats(3, 5, 6))

    def value_and_grads(layer):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(y * tf.range(y.shape[-1], dtype=y.dtype))
        return y, tape.gradient(loss, [x, *layer.trainable_weights])

    if jit:
        value_and_grads = tf.function(value_and_grads, jit_compile=True)

    (y_ours, g_ours), (y_theirs, g_theirs) = value_and_grads(ours), value_and_grads(theirs)
    np.testing.assert_allclose(y_ours, y_theirs, rtol=1e-5, atol=1e-5)
    for got, expected in zip(g_ours, g_theirs, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_layer_norm_under_mixed_precision_normalizes_in_float32(policy):
    ours = affine.LayerNormalization(epsilon=1e-6, dtype=policy)
    theirs = keras.layers.LayerNormalization(epsilon=1e-6, dtype=policy)
    x = _floats(3, 5, 6) * 100 + 1000  # float16 alone would lose the spread around the mean
    y_ours, y_theirs = ours(x), theirs(x)
    assert y_ours.dtype == y_theirs.dtype == keras.mixed_precision.Policy(policy).compute_dtype
    assert ours.gamma.dtype == "float32"
    np.testing.assert_allclose(
        tf.cast(y_ours, tf.float32), tf.cast(y_theirs, tf.float32), rtol=1e-2, atol=1e-2
    )


@pytest.mark.parametrize("kind, kwargs", LAYERS[::2])
def test_layers_round_trip_through_config_and_keras_file(kind, kwargs, tmp_path):
    ours, _ = _twins(kind, **kwargs)
    clone = type(ours).from_config(ours.get_config())
    assert clone.get_config() == ours.get_config()
    inputs = keras.Input((5, 6))
    model = keras.Model(inputs, ours(inputs))
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert type(loaded.layers[-1]) is type(ours)
    x = _floats(2, 5, 6)
    np.testing.assert_allclose(loaded(x), model(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "kind, kwargs, operation, used",
    [
        ("Dense", {"units": 7}, "bias_add", True),
        ("Dense", {"units": 7, "use_bias": False}, "bias_add", False),
        ("LayerNormalization", {}, "scale_and_shift", True),
        ("LayerNormalization", {"center": False}, "scale_and_shift", False),
        ("LayerNormalization", {"axis": 1}, "scale_and_shift", False),
    ],
)
def test_layers_take_the_fast_path_where_they_can(kind, kwargs, operation, used, monkeypatch):
    calls = []
    original = getattr(affine, operation)
    monkeypatch.setattr(affine, operation, lambda *a: calls.append(1) or original(*a))
    ours, _ = _twins(kind, **kwargs)
    ours(_floats(2, 5, 6))
    assert bool(calls) is used


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_column_sums_serve_the_gradients_under_xla_only(name, monkeypatch):
    calls = []
    original = affine.column_sum
    monkeypatch.setattr(affine, "column_sum", lambda *a: calls.append(1) or original(*a))
    _, fast, shapes = OPERATIONS[name]
    args = [tf.constant(_floats(*shape)) for shape in shapes]

    def grads():
        with tf.GradientTape() as tape:
            tape.watch(args)
            loss = tf.reduce_sum(fast(*args))
        return tape.gradient(loss, args)

    grads()
    tf.function(grads)()
    assert not calls  # eagerly and in plain graphs: TensorFlow's own reductions
    forward = tf.function(lambda: tf.reduce_sum(fast(*args)), jit_compile=True)
    concrete = forward.get_concrete_function()
    assert not calls  # inference under XLA, no tape: the plain operation
    assert not any(op.type == "IdentityN" for op in concrete.graph.get_operations())
    tf.function(grads, jit_compile=True)()
    assert calls

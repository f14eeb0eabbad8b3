"""The speed path (keras_transformer/fast.py): the switch, and each trick against the stock
path. The loss's hand-written gradient is tested in tests/test_losses.py, beam search with
the switch on in tests/test_decoding.py."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.fast import switched as fast_path
from keras_transformer.fast import top_k_by_blocks
from tests import programs


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
    result = programs.snippet(code, timeout=300)
    assert result.stdout.split() == ["False", "True", "False"]


def test_switched_sets_the_switch_for_a_block_then_restores_it():
    with fast_path(False):
        with fast_path(True):
            assert kt.fast.is_enabled()
        assert not kt.fast.is_enabled()
        with pytest.raises(ZeroDivisionError), fast_path(True):
            1 / 0  # noqa: B018
        assert not kt.fast.is_enabled()


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
@pytest.mark.exact
def test_top_k_by_blocks_equals_top_k(values, k, block):
    # Comparisons only, no arithmetic: exact on any CPU; ties come lowest index first.
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
@pytest.mark.exact
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


def test_device_files_take_top_k_by_blocks_and_leave_the_switch_off():
    """Inside `for_device_files` (the LiteRT trace's) with the switch off: `top_k` goes by
    blocks (the reduce_max of its block maxima is in the graph) and gives top_k's values and
    indices (comparisons only: exact on any CPU); the switch, which the laid-out output
    projection asks, stays off; after the block, the backend's top_k again."""
    x = tf.constant(np.random.default_rng(6).standard_normal((3, 16000)), tf.float32)

    def traced():
        function = tf.function(lambda x: kt.fast.top_k(x, 8))
        graph = function.get_concrete_function(x).graph
        return {op.type for op in graph.get_operations()}, function(x)

    with fast_path(False):
        with kt.fast.for_device_files():
            assert not kt.fast.is_enabled()
            inside, (values, indices) = traced()
        outside, _ = traced()
    assert "Max" in inside and "Max" not in outside
    expected_values, expected_indices = tf.math.top_k(x, 8)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)


def test_device_files_take_log_softmax_through_a_softmax():
    """Inside `for_device_files` `log_softmax` is `(x - max) + log(max(softmax(x - max)))`
    (a SOFTMAX op in the graph, no LogSoftmax), within float32 rounding of TensorFlow's
    log_softmax (the larger of 4 ulps of the result and 4 ulps of the row's largest
    logit: the rule for two formulas of one quantity), the same argmax on every row;
    outside the block, the backend's own log_softmax bit for bit."""
    x = tf.constant(np.random.default_rng(7).standard_normal((4, 4000)) * 8, tf.float32)

    def traced():
        function = tf.function(kt.fast.log_softmax)
        graph = function.get_concrete_function(x).graph
        return {op.type for op in graph.get_operations()}, function(x).numpy()

    with fast_path(False):
        with kt.fast.for_device_files():
            inside, through_softmax = traced()
        outside, plain = traced()
    expected = tf.nn.log_softmax(x).numpy()
    assert "Softmax" in inside and "LogSoftmax" not in inside and "LogSoftmax" in outside
    np.testing.assert_array_equal(plain, expected)
    ulp = np.spacing(np.maximum(np.abs(expected), np.abs(x.numpy()).max(-1, keepdims=True)))
    assert (np.abs(through_softmax - expected) <= 4 * ulp).all()
    np.testing.assert_array_equal(through_softmax.argmax(-1), expected.argmax(-1))


def test_device_lookups_give_a_table_its_lookup_inside_the_block_only():
    """Inside `device_lookups` an embedding's token lookup is the given function (the int8
    LiteRT file's, `kt.export.litert_trace.int8_lookup`), for that table only; outside, and
    for another embedding, the layer's own rows. Exact: the same float32 operations."""
    ids = np.array([[5, 7, 0]])
    mine, other = _embedding(), _embedding()
    plain, other_plain = np.asarray(mine(ids)), np.asarray(other(ids))

    def doubled(i):
        return 2.0 * mine.token_embedding(i)

    with kt.fast.device_lookups({mine.token_embedding: doubled}):
        inside, untouched = np.asarray(mine(ids)), np.asarray(other(ids))
    positions = plain - np.asarray(mine.token_embedding(ids)) * np.sqrt(8.0)
    np.testing.assert_allclose(inside, 2 * (plain - positions) + positions, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(mine(ids)), plain)
    np.testing.assert_array_equal(untouched, other_plain)


def test_device_lookups_refuse_a_key_that_is_not_a_table_or_a_lookup_not_callable():
    """A key that is not a Keras `Embedding` (the `TransformerEmbedding` itself, whose lookup
    `token_lookup` never asks for) or a value that is not a function is refused at the call,
    not at the `with`, in one line that names what was given."""
    mine = _embedding(name="embed")

    def doubled(i):
        return 2.0 * mine.token_embedding(i)

    with pytest.raises(TypeError) as whole_layer:
        kt.fast.device_lookups({mine: doubled})
    assert str(whole_layer.value) == (
        "kt.fast.device_lookups: a key is the table layer, not the TransformerEmbedding "
        "'embed': pass its `.token_embedding`"
    )
    with pytest.raises(TypeError) as other_layer:
        kt.fast.device_lookups({keras.layers.Dense(3): doubled})
    assert str(other_layer.value) == (
        "kt.fast.device_lookups: a key must be a Keras Embedding layer (a table), not Dense"
    )
    with pytest.raises(TypeError) as not_callable:
        kt.fast.device_lookups({mine.token_embedding: "rows"})
    assert str(not_callable.value) == (
        f"kt.fast.device_lookups: the lookup of {mine.token_embedding.name!r} must be a "
        "function of the ids, not str"
    )
    with pytest.raises(TypeError) as not_a_mapping:
        kt.fast.device_lookups([(mine.token_embedding, doubled)])
    assert str(not_a_mapping.value) == (
        "kt.fast.device_lookups: give a dict {table layer: function of the ids}, not list"
    )


def _embedding(**kwargs):
    layer = kt.layers.TransformerEmbedding(vocab_size=40, d_model=8, **kwargs)
    layer(np.array([[5, 7, 0]]))
    return layer


HIDDEN = np.random.default_rng(5).standard_normal((3, 8)).astype("float32")


@pytest.mark.parametrize("enabled", [False, True], ids=["stock", "fast"])
@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("rows", [3, 64, "tensor"], ids=["few", "many", "tensor"])
@pytest.mark.parametrize("bias", [False, True], ids=["", "bias"])
@pytest.mark.exact
def test_output_projection_is_the_tied_projection(request, enabled, dtype, rows, bias):
    """With the switch on and few rows, the product by `E^T` laid out once (plus the output
    bias); otherwise the layer's own call."""
    if enabled:
        request.getfixturevalue("fast_on")
    layer = _embedding(dtype=dtype, output_bias=bias)
    if bias:
        layer.logits_bias.assign(np.linspace(-1, 1, 40).astype("float32"))
    hidden = tf.cast(HIDDEN, layer.compute_dtype)
    if rows == "tensor":  # as in a graph with an unknown batch
        rows = tf.shape(hidden)[0]
    project = kt.fast.output_projection(layer, rows)
    xla = tf.function(lambda x: kt.fast.output_projection(layer, rows)(x), jit_compile=True)
    expected = layer(hidden, reverse=True)
    # bfloat16 logits may be rounded once less where XLA fuses the product with the bias's
    # float32 addition: within one bfloat16 ulp.
    tolerance = 8e-3 if dtype == "mixed_bfloat16" and bias else 1e-5
    for logits in (project(hidden), xla(hidden)):
        assert logits.dtype == tf.float32 and logits.shape == (3, 40)
        np.testing.assert_allclose(logits, expected, rtol=tolerance, atol=tolerance)


def _lora(layer):
    layer.token_embedding.enable_lora(2)
    layer.token_embedding.lora_embeddings_b.assign(np.ones((2, 8), "float32"))


def _int8(layer):
    layer.token_embedding.quantize("int8")


@pytest.mark.parametrize(
    "change, kwargs",
    [(None, {"tie_weights": False}), (_lora, {}), (_int8, {})],
    ids=["untied", "lora", "int8"],
)
@pytest.mark.exact
def test_output_projection_computes_what_keras_does(fast_on, change, kwargs):
    """Untied or quantized, Keras's own call; with LoRA, the product by the adapted table.
    For LoRA and int8 those logits differ from the product by the table as trained. To
    1e-5: float32 products of 8 terms in another order."""
    layer = _embedding(**kwargs)
    trained = HIDDEN @ layer.token_embedding.embeddings.numpy().T
    if change is not None:
        change(layer)
    expected = layer(HIDDEN, reverse=True)
    if change is not None:
        assert not np.allclose(expected, trained, atol=1e-3)
    project = kt.fast.output_projection(layer, rows=3)
    xla = tf.function(lambda x: kt.fast.output_projection(layer, rows=3)(x), jit_compile=True)
    for logits in (project(HIDDEN), xla(HIDDEN)):
        np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)

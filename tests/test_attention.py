"""TransformerAttention: Keras's layer test, equality with keras.layers.MultiHeadAttention,
masks, weights on request, key/value caches and the swappable attention."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops
from keras.src.testing import TestCase

from keras_transformer import layers
from keras_transformer import ops as kt_ops

RNG = np.random.default_rng(0)
QUERY = RNG.normal(size=(2, 5, 16)).astype("float32")
MEMORY = RNG.normal(size=(2, 7, 16)).astype("float32")
PADDING = np.array([[True] * 7, [True] * 4 + [False] * 3])


class TransformerAttentionLayerTest(TestCase):
    def test_self_attention(self):
        self.run_layer_test(
            layers.TransformerAttention,
            init_kwargs={"num_heads": 4, "dropout": 0.1},
            input_shape=(2, 5, 16),
            expected_output_shape=(2, 5, 16),
            expected_num_trainable_weights=8,
            expected_num_non_trainable_weights=0,
            expected_num_seed_generators=1,
        )

    def test_cross_attention_with_other_sizes(self):
        self.run_layer_test(
            layers.TransformerAttention,
            init_kwargs={
                "num_heads": 2,
                "key_dim": 3,
                "value_dim": 5,
                "output_dim": 6,
                "use_bias": False,
            },
            input_shape={"query_shape": (2, 5, 16), "value_shape": (2, 7, 12)},
            expected_output_shape=(2, 5, 6),
            expected_num_trainable_weights=4,
            run_training_check=False,  # two inputs: Keras's harness trains one-input layers
        )


def _keras_twin(ours, query, value):
    """A keras.layers.MultiHeadAttention holding `ours`'s weights."""
    theirs = keras.layers.MultiHeadAttention(num_heads=ours.num_heads, key_dim=ours.head_key_dim)
    theirs(query, value)
    # Same kernels; our query/key/value biases are [heads, 1, depth], Keras's [heads, depth].
    theirs.set_weights(
        [np.reshape(w, t.shape) for w, t in zip(ours.get_weights(), theirs.weights, strict=True)]
    )
    return theirs


@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_equals_keras_multi_head_attention(causal):
    ours = layers.TransformerAttention(num_heads=4)
    ours(QUERY)
    theirs = _keras_twin(ours, QUERY, QUERY)
    np.testing.assert_allclose(
        ours(QUERY, use_causal_mask=causal),
        theirs(QUERY, QUERY, use_causal_mask=causal),
        atol=1e-5,
    )


def test_cross_attention_with_padding_equals_keras_multi_head_attention():
    ours = layers.TransformerAttention(num_heads=4)
    ours(QUERY, MEMORY)
    theirs = _keras_twin(ours, QUERY, MEMORY)
    keras_mask = np.broadcast_to(PADDING[:, None, :], (2, 5, 7))  # Keras takes [B, T, S]
    out, _, weights = ours.forward(QUERY, MEMORY, padding_mask=PADDING, return_weights=True)
    their_out, their_scores = theirs(
        QUERY, MEMORY, attention_mask=keras_mask, return_attention_scores=True
    )
    np.testing.assert_allclose(out, their_out, atol=1e-5)
    np.testing.assert_allclose(weights, their_scores, atol=1e-6)


def test_weights_on_request_are_float32_masked_and_normalised():
    layer = layers.TransformerAttention(num_heads=4, dtype="mixed_float16")
    layer(QUERY, MEMORY)  # builds the weights
    output, _, weights = layer.forward(
        ops.cast(QUERY, "float16"), MEMORY, padding_mask=PADDING, return_weights=True
    )
    assert output.dtype == tf.float16 and weights.dtype == tf.float32
    assert weights.shape == (2, 4, 5, 7)
    np.testing.assert_allclose(ops.sum(weights, axis=-1), 1.0, atol=1e-6)
    assert np.all(np.asarray(weights)[1, :, :, 4:] == 0.0)


def test_padding_keys_change_nothing():
    layer = layers.TransformerAttention(num_heads=4)
    short = layer(QUERY, MEMORY[:, :4])
    padded = layer(QUERY, MEMORY, padding_mask=np.array([[True] * 4 + [False] * 3] * 2))
    np.testing.assert_allclose(padded, short, atol=1e-5)


def test_attention_mask_and_padding_mask_combine():
    layer = layers.TransformerAttention(num_heads=2)
    attention_mask = RNG.random((2, 5, 7)) < 0.6
    attention_mask[..., 0] = True
    layer(QUERY, MEMORY)
    weights = layer.forward(
        QUERY, MEMORY, padding_mask=PADDING, attention_mask=attention_mask, return_weights=True
    ).weights
    allowed = attention_mask & PADDING[:, None, :]
    assert np.all(np.asarray(weights).transpose(1, 0, 2, 3)[:, ~allowed] == 0.0)


def test_key_dim_must_divide_width():
    with pytest.raises(ValueError, match="query width 16 is not divisible by num_heads=3"):
        layers.TransformerAttention(num_heads=3)(QUERY)


def test_cache_methods_need_a_built_layer():
    with pytest.raises(ValueError, match="needs built weights"):
        layers.TransformerAttention(num_heads=2).empty_cache(2, 8)


def _step(layer, query, cache, index, **kwargs):
    out = layer.forward(query, cache=cache, cache_index=index, **kwargs)
    return out.outputs, out.cache


def test_incremental_self_attention_equals_causal_call():
    layer = layers.TransformerAttention(num_heads=4)
    full = layer(QUERY, use_causal_mask=True)
    cache = layer.empty_cache(batch_size=2, length=8)  # longer than the 5 steps: padding
    steps = []
    for t in range(QUERY.shape[1]):
        out, cache = _step(layer, QUERY[:, t : t + 1], cache, t)
        steps.append(out)
    np.testing.assert_allclose(ops.concatenate(steps, axis=1), full, atol=1e-5)
    assert cache.key.shape == (2, 4, 8, 4)  # (batch, heads, length, depth)


def test_incremental_self_attention_in_chunks_equals_causal_call():
    layer = layers.TransformerAttention(num_heads=4)
    full = layer(QUERY, use_causal_mask=True)
    cache = layer.empty_cache(batch_size=2, length=5)
    first, cache = _step(layer, QUERY[:, :3], cache, 0)
    second, cache = _step(layer, QUERY[:, 3:], cache, 3)
    np.testing.assert_allclose(ops.concatenate([first, second], axis=1), full, atol=1e-5)


def test_a_grown_cache_goes_on_where_it_was():
    layer = layers.TransformerAttention(num_heads=4)
    full = layer(QUERY, use_causal_mask=True)
    cache = layer.empty_cache(batch_size=2, length=3)
    first, cache = _step(layer, QUERY[:, :3], cache, 0)
    cache = cache.grow(6)  # one position more than the 5 decoded
    assert cache.key.shape == (2, 4, 6, 4) and cache.value.shape == (2, 4, 6, 4)
    second, cache = _step(layer, QUERY[:, 3:], cache, 3)
    np.testing.assert_allclose(ops.concatenate([first, second], axis=1), full, atol=1e-5)


def test_cached_attention_mask_narrows_what_each_query_sees():
    # Two new queries at positions 3 and 4, which the mask keeps from seeing position 1:
    # the same outputs as the full call with that mask and the causal one.
    layer = layers.TransformerAttention(num_heads=4)
    mask = np.ones((2, 5, 5), bool)
    mask[:, 3, 4] = mask[:, 3, 1] = mask[:, 4, 1] = False
    full = layer(QUERY, attention_mask=mask & np.tril(np.ones((5, 5), bool)))
    cache = layer.empty_cache(batch_size=2, length=5)
    _, cache = _step(layer, QUERY[:, :3], cache, 0)
    out, _ = _step(layer, QUERY[:, 3:], cache, 3, attention_mask=mask[:, 3:])
    np.testing.assert_allclose(out, full[:, 3:], atol=1e-5)
    unmasked, _ = _step(layer, QUERY[:, 3:], cache, 3)
    assert not np.allclose(out, unmasked, atol=1e-3)


def test_cross_attention_cache_equals_call():
    layer = layers.TransformerAttention(num_heads=4)
    full = layer(QUERY, MEMORY, padding_mask=PADDING)
    cache = layer.compute_cache(MEMORY)
    out, same_cache, _ = layer.forward(QUERY, cache=cache, padding_mask=PADDING)
    np.testing.assert_allclose(out, full, atol=1e-5)
    assert same_cache is cache


def test_incremental_decoding_compiles_in_a_while_loop_with_xla():
    layer = layers.TransformerAttention(num_heads=4)
    full = layer(QUERY, use_causal_mask=True)

    @tf.function(jit_compile=True)
    def decode(query):
        cache = layer.empty_cache(2, 5)
        outputs = tf.TensorArray(tf.float32, size=5)

        def body(t, cache, outputs):
            step = tf.expand_dims(tf.gather(query, t, axis=1), 1)  # (batch, 1, d_model)
            out, cache = _step(layer, step, cache, t)
            return t + 1, cache, outputs.write(t, out[:, 0])

        _, _, outputs = tf.while_loop(lambda t, *_: t < 5, body, (0, cache, outputs))
        return tf.transpose(outputs.stack(), [1, 0, 2])

    np.testing.assert_allclose(decode(QUERY), full, atol=1e-5)


class _UniformAttention(layers.TransformerAttention):
    """Swaps the attention for a plain average of the values."""

    def compute_attention(self, query, key, value, mask=None, training=None):
        k_len = ops.shape(key)[2]
        weights = ops.ones((ops.shape(query)[0], self.num_heads, ops.shape(query)[2], k_len))
        weights = weights / ops.cast(k_len, "float32")
        return ops.matmul(ops.cast(weights, value.dtype), value), weights


def test_attention_is_swapped_by_overriding_compute_attention():
    layer = _UniformAttention(num_heads=2)
    layer(QUERY, MEMORY)
    out, _, weights = layer.forward(QUERY, MEMORY, return_weights=True)
    np.testing.assert_allclose(weights, 1 / 7, atol=1e-7)
    # Every query gets the same output: the mean of the projected values, projected out.
    np.testing.assert_allclose(out[:, 0], out[:, 3], atol=1e-5)


def test_weights_are_those_of_the_op_on_the_projections():
    layer = layers.TransformerAttention(num_heads=2)
    layer(QUERY, MEMORY)
    weights = layer.forward(QUERY, MEMORY, padding_mask=PADDING, return_weights=True).weights
    q, k, v = layer.query_dense(QUERY), layer.key_dense(MEMORY), layer.value_dense(MEMORY)
    _, expected = kt_ops.scaled_dot_product_attention(q, k, v, kt_ops.combine_masks(PADDING))
    np.testing.assert_allclose(weights, expected, atol=1e-7)


def test_projections_are_keras_einsum_dense_layers():
    layer = layers.TransformerAttention(num_heads=2)
    layer(QUERY, MEMORY)
    projections = [layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense]
    assert all(type(p) is keras.layers.EinsumDense for p in projections)
    assert [p.name for p in projections] == ["query", "key", "value", "output"]


@pytest.mark.exact
def test_int8_quantization_reaches_the_projections():
    layer = layers.TransformerAttention(num_heads=4)
    expected = layer(QUERY, MEMORY, padding_mask=PADDING)
    for projection in (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense):
        projection.quantize("int8")
        assert projection.quantization_mode == "int8"
    quantized = layer(QUERY, MEMORY, padding_mask=PADDING)
    np.testing.assert_allclose(quantized, expected, atol=0.05)  # int8 weights' rounding
    assert not np.array_equal(quantized, expected)

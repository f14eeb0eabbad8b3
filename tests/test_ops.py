"""scaled_dot_product_attention against a NumPy reference, and the mask builders."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import ops as kt_ops


def reference_attention(q, k, v, mask=None):
    """softmax(QK^T / sqrt(d_k)) V in float64 NumPy; masked logits are -inf. Takes and returns
    `[batch, heads, len, depth]`; weights `[batch, heads, q_len, k_len]`."""
    logits = q.astype("float64") @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        logits = np.where(np.broadcast_to(mask, logits.shape), logits, -np.inf)
    logits -= logits.max(axis=-1, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ v, weights


def _qkv(batch=2, heads=3, q_len=4, k_len=6, depth=8, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(batch, heads, q_len, depth)).astype("float32"),
        rng.normal(size=(batch, heads, k_len, depth)).astype("float32"),
        rng.normal(size=(batch, heads, k_len, depth + 2)).astype("float32"),
    )


def test_without_mask_matches_reference():
    q, k, v = _qkv()
    output, weights = kt_ops.scaled_dot_product_attention(q, k, v)
    expected_output, expected_weights = reference_attention(q, k, v)
    np.testing.assert_allclose(output, expected_output, atol=1e-5)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-6)
    assert output.shape == (2, 3, 4, 10) and weights.shape == (2, 3, 4, 6)
    assert weights.dtype == tf.float32


@pytest.mark.parametrize(
    "mask_shape", [(2, 1, 1, 6), (2, 1, 4, 6), (1, 1, 4, 6), (2, 3, 4, 6), (6,)]
)
def test_with_broadcast_masks_matches_reference(mask_shape):
    q, k, v = _qkv(seed=1)
    rng = np.random.default_rng(2)
    mask = rng.random(mask_shape) < 0.7
    mask[..., 0] = True  # every row keeps one key; fully masked rows are tested below
    output, weights = kt_ops.scaled_dot_product_attention(q, k, v, mask=mask)
    expected_output, expected_weights = reference_attention(q, k, v, mask)
    np.testing.assert_allclose(output, expected_output, atol=1e-5)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-6)
    assert np.all(np.asarray(weights)[~np.broadcast_to(mask, weights.shape)] == 0.0)


def test_causal_mask_matches_reference_and_hides_the_future():
    q, k, v = _qkv(q_len=5, k_len=5)
    mask = kt_ops.causal_mask(5)
    np.testing.assert_array_equal(mask, np.tril(np.ones((5, 5), bool)))
    output, weights = kt_ops.scaled_dot_product_attention(q, k, v, mask=mask)
    expected_output, _ = reference_attention(q, k, v, np.tril(np.ones((5, 5), bool)))
    np.testing.assert_allclose(output, expected_output, atol=1e-5)
    assert np.all(np.triu(np.asarray(weights)[0, 0], k=1) == 0)


def test_causal_mask_with_offset_for_incremental_decoding():
    # Two new queries at positions 3 and 4 over a buffer of 6 keys.
    expected = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]], bool)
    np.testing.assert_array_equal(kt_ops.causal_mask(2, 6, offset=3), expected)


def test_fully_masked_row_gives_uniform_weights_not_nan():
    q, k, v = _qkv()
    mask = np.zeros((2, 1, 1, 6), bool)
    output, weights = kt_ops.scaled_dot_product_attention(q, k, v, mask=mask)
    assert np.isfinite(output).all()
    np.testing.assert_allclose(weights, np.full(weights.shape, 1 / 6), atol=1e-6)


def test_combine_masks_is_the_logical_and_of_its_parts():
    padding = np.array([[True, True, False], [True, False, False]])
    attention = np.random.default_rng(0).random((2, 3, 3)) < 0.5
    causal = np.asarray(kt_ops.causal_mask(3))
    combined = np.asarray(kt_ops.combine_masks(padding, attention, causal))
    expected = padding[:, None, None, :] & attention[:, None] & causal[None, None]
    np.testing.assert_array_equal(np.broadcast_to(combined, expected.shape), expected)
    assert kt_ops.combine_masks() is None
    assert kt_ops.combine_masks(padding=padding).shape == (2, 1, 1, 3)


def test_padding_mask_marks_id_zero():
    np.testing.assert_array_equal(
        kt_ops.padding_mask(np.array([[4, 0, 9, 0]])), [[True, False, True, False]]
    )


@pytest.mark.exact
def test_half_precision_inputs_give_float32_weights():
    q, k, v = (tf.cast(x, tf.float16) for x in _qkv())
    output, weights = kt_ops.scaled_dot_product_attention(q, k, v)
    assert output.dtype == tf.float16 and weights.dtype == tf.float32
    expected_output, _ = reference_attention(*(np.asarray(x, "float32") for x in (q, k, v)))
    np.testing.assert_allclose(  # float16's rounding (11 bits)
        np.asarray(output, "float32"), expected_output, atol=1e-2
    )


def test_dropout_applies_to_the_weights_only():
    q, k, v = _qkv()
    output, weights = kt_ops.scaled_dot_product_attention(q, k, v, dropout=lambda w: 2 * w)
    expected_output, expected_weights = reference_attention(q, k, v)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-6)  # before dropout
    np.testing.assert_allclose(output, 2 * expected_output, atol=1e-5)


def test_equals_keras_dot_product_attention():
    q, k, v = _qkv()
    v = v[..., :8]
    mask = np.random.default_rng(3).random((2, 3, 4, 6)) < 0.7
    mask[..., 0] = True
    output, _ = kt_ops.scaled_dot_product_attention(q, k, v, mask=mask)
    # Keras's op takes and returns [batch, len, heads, depth].
    q, k, v = (np.swapaxes(x, 1, 2) for x in (q, k, v))
    expected = keras.ops.dot_product_attention(q, k, v, mask=mask)
    np.testing.assert_allclose(output, np.swapaxes(expected, 1, 2), atol=1e-5)


def test_compiles_with_xla():
    q, k, v = _qkv()
    mask = kt_ops.causal_mask(4, 6, offset=2)
    compiled = tf.function(kt_ops.scaled_dot_product_attention, jit_compile=True)
    output, _ = compiled(q, k, v, mask)
    np.testing.assert_allclose(output, reference_attention(q, k, v, np.asarray(mask))[0], atol=1e-5)

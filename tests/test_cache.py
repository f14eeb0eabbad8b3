"""The decoding cache (keras_transformer/layers/cache.py): writing, growing and beam
reordering, on hand-made buffers and on a model's own `Decoder.init_cache`."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.decoding import AttentionCache, DecoderCache, DecoderLayerCache

BATCH, HEADS, KEY_DIM, VALUE_DIM = 3, 2, 4, 5


def _filled(length, offset=0.0):
    """A cache whose entries are all distinct: key[b, h, i, d] differs for every index."""
    key = np.arange(BATCH * length * HEADS * KEY_DIM, dtype="float32") + offset
    value = np.arange(BATCH * length * HEADS * VALUE_DIM, dtype="float32") - offset
    return AttentionCache(
        tf.constant(key.reshape(BATCH, HEADS, length, KEY_DIM)),
        tf.constant(value.reshape(BATCH, HEADS, length, VALUE_DIM)),
    )


def _decoder_cache(num_layers=2, length=4, src_len=6):
    return DecoderCache(
        tuple(
            DecoderLayerCache(_filled(length, 100.0 * i), _filled(src_len, -100.0 * i - 50))
            for i in range(num_layers)
        )
    )


def test_empty_cache_has_zero_buffers_of_the_asked_shape_and_dtype():
    cache = AttentionCache.empty(BATCH, 7, HEADS, KEY_DIM, VALUE_DIM, "bfloat16")
    assert cache.key.shape == (BATCH, HEADS, 7, KEY_DIM) and cache.key.dtype == tf.bfloat16
    assert cache.value.shape == (BATCH, HEADS, 7, VALUE_DIM)
    assert int(cache.length) == 7
    assert not np.any(cache.key.numpy()) and not np.any(cache.value.numpy())


def test_write_sets_the_new_positions_only_and_leaves_its_input_unchanged():
    cache = _filled(6)
    key = tf.fill([BATCH, HEADS, 2, KEY_DIM], -1.0)
    value = tf.fill([BATCH, HEADS, 2, VALUE_DIM], -2.0)
    written = cache.write(3, key, value)
    expected_key, expected_value = cache.key.numpy(), cache.value.numpy()
    expected_key[:, :, 3:5], expected_value[:, :, 3:5] = -1.0, -2.0
    np.testing.assert_array_equal(written.key, expected_key)
    np.testing.assert_array_equal(written.value, expected_value)
    np.testing.assert_array_equal(cache.key, _filled(6).key)  # a new cache, not an update


def test_write_casts_to_the_buffer_dtype():
    cache = AttentionCache.empty(BATCH, 4, HEADS, KEY_DIM, VALUE_DIM, "float16")
    written = cache.write(
        0, tf.ones([BATCH, HEADS, 1, KEY_DIM]), tf.ones([BATCH, HEADS, 1, VALUE_DIM])
    )
    assert written.key.dtype == tf.float16 and written.value.dtype == tf.float16


def test_grow_keeps_the_written_positions_and_pads_with_zeros():
    cache = _filled(4)
    grown = cache.grow(9)
    assert grown.key.shape == (BATCH, HEADS, 9, KEY_DIM)
    assert grown.value.shape == (BATCH, HEADS, 9, VALUE_DIM)
    np.testing.assert_array_equal(grown.key[:, :, :4], cache.key)
    np.testing.assert_array_equal(grown.value[:, :, :4], cache.value)
    assert not np.any(grown.key[:, :, 4:].numpy()) and not np.any(grown.value[:, :, 4:].numpy())
    np.testing.assert_array_equal(cache.grow(4).key, cache.key)  # to its own length: as is


def test_decoder_cache_grow_grows_the_self_attention_buffers_only():
    cache = _decoder_cache(length=4, src_len=6)
    grown = cache.grow(10)
    assert int(grown.length) == 10
    for before, after in zip(cache.layers, grown.layers, strict=True):
        assert after.self_attention.key.shape[2] == 10
        np.testing.assert_array_equal(after.self_attention.key[:, :, :4], before.self_attention.key)
        np.testing.assert_array_equal(
            after.self_attention.value[:, :, :4], before.self_attention.value
        )
        # The encoder-decoder buffers hold the source: never grown.
        np.testing.assert_array_equal(after.cross_attention.key, before.cross_attention.key)
        np.testing.assert_array_equal(after.cross_attention.value, before.cross_attention.value)


def test_grow_under_xla_with_a_tensor_length():
    cache = _decoder_cache(length=4)
    grow = tf.function(lambda cache, length: cache.grow(length), jit_compile=True)
    grown = grow(cache, tf.constant(7))
    eager = cache.grow(7)
    for got, want in zip(tf.nest.flatten(grown), tf.nest.flatten(eager), strict=True):
        np.testing.assert_array_equal(got, want)


def test_reorder_moves_the_self_attention_rows_only():
    cache = _decoder_cache()
    indices = tf.constant([2, 0, 0])  # row 0 continues row 2, rows 1 and 2 continue row 0
    reordered = cache.reorder(indices)
    for before, after in zip(cache.layers, reordered.layers, strict=True):
        for buffer in ("key", "value"):
            old = getattr(before.self_attention, buffer).numpy()
            np.testing.assert_array_equal(getattr(after.self_attention, buffer), old[[2, 0, 0]])
            # The encoder-decoder buffers are one source's for all its hypotheses: unmoved.
            np.testing.assert_array_equal(
                getattr(after.cross_attention, buffer), getattr(before.cross_attention, buffer)
            )
    # The identity leaves everything as it was.
    same = cache.reorder(tf.range(BATCH))
    for got, want in zip(tf.nest.flatten(same), tf.nest.flatten(cache), strict=True):
        np.testing.assert_array_equal(got, want)


def test_caches_are_nests_of_tensors_that_loops_carry():
    """A `tf.while_loop` takes a `DecoderCache` as loop state and hands back the same type."""
    cache = _decoder_cache()

    def body(i, cache):
        return i + 1, cache.reorder(tf.constant([1, 2, 0]))

    _, result = tf.while_loop(lambda i, cache: i < 3, body, (tf.constant(0), cache))
    assert isinstance(result, DecoderCache)
    assert isinstance(result.layers[0], DecoderLayerCache)
    for got, want in zip(tf.nest.flatten(result), tf.nest.flatten(cache), strict=True):
        np.testing.assert_array_equal(got, want)  # three rotations of three rows


@pytest.mark.parametrize("dtype", [None, "mixed_bfloat16"])
def test_decoder_init_cache_layout(dtype):
    """One `DecoderLayerCache` a layer: empty self-attention buffers of the asked length, the
    encoder output projected for encoder-decoder attention, `[batch, heads, len, depth]`,
    in the model's compute dtype."""
    keras.utils.set_random_seed(0)
    config = kt.TransformerConfig.preset("tiny", vocab_size=20, dtype=dtype)
    model = kt.build_transformer(config)
    source = np.array([[5, 6, 7, 0, 0], [8, 9, 10, 11, 12]])
    memory, _ = model.encode(source)
    cache = model.decoder.init_cache(memory, 4)
    depth = config.d_model // config.num_heads
    compute_dtype = tf.bfloat16 if dtype else tf.float32
    assert len(cache.layers) == config.num_decoder_layers and int(cache.length) == 4
    for layer_cache, layer in zip(cache.layers, model.decoder.decoder_layers, strict=True):
        self_attention, cross_attention = layer_cache
        assert self_attention.key.shape == (2, config.num_heads, 4, depth)
        assert self_attention.key.dtype == compute_dtype
        assert not np.any(tf.cast(self_attention.value, tf.float32).numpy())
        assert cross_attention.key.shape == (2, config.num_heads, 5, depth)
        assert cross_attention.value.dtype == compute_dtype
        expected = layer.cross_attention.compute_cache(memory)
        np.testing.assert_array_equal(cross_attention.key, expected.key)
        np.testing.assert_array_equal(cross_attention.value, expected.value)

"""DecoderLayer and Decoder: Keras's layer test, causality, padding, and cached decoding equal
to the full decoder."""

import numpy as np
import pytest
import tensorflow as tf
from keras import ops
from keras.src.testing import TestCase

from keras_transformer import layers

RNG = np.random.default_rng(0)
TARGET = RNG.normal(size=(2, 5, 16)).astype("float32")
MEMORY = RNG.normal(size=(2, 7, 16)).astype("float32")
MEMORY_MASK = np.array([[True] * 7, [True] * 4 + [False] * 3])
SHAPES = {"inputs_shape": (2, 5, 16), "encoder_output_shape": (2, 7, 16)}


class DecoderLayerTest(TestCase):
    def test_decoder_layer(self):
        for norm_first in (False, True):
            self.run_layer_test(
                layers.DecoderLayer,
                init_kwargs={"num_heads": 4, "d_ff": 32, "dropout": 0.1, "norm_first": norm_first},
                input_shape=SHAPES,
                expected_output_shape=(2, 5, 16),
                # two attentions 8 each, feed-forward 4, three layer norms 2 each
                expected_num_trainable_weights=26,
                expected_num_seed_generators=3,  # the three residual dropouts
                run_training_check=False,  # two inputs: Keras's harness trains one-input layers
            )

    def test_decoder(self):
        self.run_layer_test(
            layers.Decoder,
            init_kwargs={"num_layers": 2, "num_heads": 4, "d_ff": 32, "norm_first": True},
            input_shape=SHAPES,
            expected_output_shape=(2, 5, 16),
            expected_num_trainable_weights=2 * 26 + 2,
            run_training_check=False,
        )


class DecoderOnlyTest(TestCase):
    """Built without an encoder output: masked self-attention and feed-forward only (GPT)."""

    def test_decoder_layer_without_cross_attention(self):
        self.run_layer_test(
            layers.DecoderLayer,
            init_kwargs={"num_heads": 4, "d_ff": 32, "dropout": 0.1},
            input_shape=(2, 5, 16),
            expected_output_shape=(2, 5, 16),
            # self-attention 8, feed-forward 4, two layer norms 2 each
            expected_num_trainable_weights=16,
            expected_num_seed_generators=2,
        )

    def test_decoder_without_cross_attention(self):
        self.run_layer_test(
            layers.Decoder,
            init_kwargs={"num_layers": 2, "num_heads": 4, "d_ff": 32, "norm_first": True},
            input_shape=(2, 5, 16),
            expected_output_shape=(2, 5, 16),
            expected_num_trainable_weights=2 * 16 + 2,
        )


def _decoder(cls, norm_first=False, dtype=None):
    kwargs = {"num_layers": 2} if cls is layers.Decoder else {}
    return cls(num_heads=4, d_ff=32, norm_first=norm_first, dtype=dtype, **kwargs)


@pytest.mark.parametrize("cls", [layers.DecoderLayer, layers.Decoder])
def test_future_positions_do_not_leak(cls):
    decoder = _decoder(cls)
    out = decoder(TARGET, MEMORY)
    changed = TARGET.copy()
    changed[:, 3:] = RNG.normal(size=(2, 2, 16))
    out_changed = decoder(changed, MEMORY)
    np.testing.assert_allclose(out_changed[:, :3], out[:, :3], atol=1e-6)
    assert not np.allclose(out_changed[:, 3:], out[:, 3:])


@pytest.mark.parametrize("cls", [layers.DecoderLayer, layers.Decoder])
def test_source_padding_changes_nothing(cls):
    decoder = _decoder(cls)
    short = decoder(TARGET, MEMORY[:, :4])
    mask = np.array([[True] * 4 + [False] * 3] * 2)
    padded = decoder(TARGET, MEMORY, encoder_padding_mask=mask)
    np.testing.assert_allclose(padded, short, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("cls", [layers.DecoderLayer, layers.Decoder])
def test_cached_decoding_equals_the_full_decoder(cls, norm_first):
    decoder = _decoder(cls, norm_first)
    full = decoder(TARGET, MEMORY, encoder_padding_mask=MEMORY_MASK)
    cache = decoder.init_cache(MEMORY, 6)
    steps = []
    for t in range(TARGET.shape[1]):
        out, cache, _ = decoder.forward(
            TARGET[:, t : t + 1], cache=cache, cache_index=t, encoder_padding_mask=MEMORY_MASK
        )
        steps.append(out)
    np.testing.assert_allclose(ops.concatenate(steps, axis=1), full, atol=1e-5)


@pytest.mark.parametrize("cls", [layers.DecoderLayer, layers.Decoder])
def test_cached_decoding_goes_on_in_a_grown_cache(cls):
    decoder = _decoder(cls, norm_first=False)
    full = decoder(TARGET, MEMORY, encoder_padding_mask=MEMORY_MASK)
    cache = decoder.init_cache(MEMORY, 2)
    steps = []
    for t in range(TARGET.shape[1]):
        if t == 2:
            cache = cache.grow(TARGET.shape[1])
        out, cache, _ = decoder.forward(
            TARGET[:, t : t + 1], cache=cache, cache_index=t, encoder_padding_mask=MEMORY_MASK
        )
        steps.append(out)
    np.testing.assert_allclose(ops.concatenate(steps, axis=1), full, atol=1e-5)


@pytest.mark.exact
def test_cached_decoding_under_mixed_precision_and_xla():
    decoder = _decoder(layers.Decoder, dtype="mixed_bfloat16")
    full = decoder(TARGET, MEMORY, encoder_padding_mask=MEMORY_MASK)

    @tf.function(jit_compile=True)
    def decode():
        cache = decoder.init_cache(MEMORY, 5)
        outputs = []
        for t in range(5):
            out, cache, _ = decoder.forward(
                TARGET[:, t : t + 1],
                cache=cache,
                cache_index=tf.constant(t),
                encoder_padding_mask=MEMORY_MASK,
            )
            outputs.append(out)
        return tf.concat(outputs, axis=1)

    cached = decode()
    assert cached.dtype == tf.bfloat16
    for kind in ("key", "value"):
        buffers = decoder.init_cache(MEMORY, 5).layers[0].self_attention
        assert getattr(buffers, kind).dtype == tf.bfloat16
    # Two bfloat16 computations (cached under XLA, and full): bfloat16's rounding apart.
    np.testing.assert_allclose(
        np.asarray(cached, "float32"), np.asarray(full, "float32"), atol=0.1, rtol=0.05
    )


@pytest.mark.parametrize("cls", [layers.DecoderLayer, layers.Decoder])
def test_attention_weights_on_request(cls):
    decoder = _decoder(cls)
    target_mask = np.array([[True] * 5, [True] * 3 + [False] * 2])
    masks = dict(padding_mask=target_mask, encoder_padding_mask=MEMORY_MASK)
    expected = decoder(TARGET, MEMORY, **masks)
    outputs, cache, weights = decoder.forward(TARGET, MEMORY, return_weights=True, **masks)
    assert cache is None
    np.testing.assert_allclose(outputs, expected, atol=1e-6)
    for layer_weights in weights if cls is layers.Decoder else [weights]:
        self_weights = np.asarray(layer_weights["self_attention"])
        cross_weights = np.asarray(layer_weights["cross_attention"])
        assert self_weights.shape == (2, 4, 5, 5) and cross_weights.shape == (2, 4, 5, 7)
        assert np.all(np.triu(self_weights, k=1) == 0)  # causal
        assert np.all(self_weights[1, :, :, 3:] == 0)  # target padding
        assert np.all(cross_weights[1, :, :, 4:] == 0)  # source padding
        np.testing.assert_allclose(cross_weights.sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("cls", [layers.DecoderLayer, layers.Decoder])
def test_decoder_only_is_causal_and_has_no_cross_attention(cls):
    decoder = _decoder(cls)
    out = decoder(TARGET)
    sublayers = decoder.decoder_layers if cls is layers.Decoder else [decoder]
    assert all(layer.cross_attention is None for layer in sublayers)
    changed = TARGET.copy()
    changed[:, 3:] = RNG.normal(size=(2, 2, 16))
    np.testing.assert_allclose(decoder(changed)[:, :3], out[:, :3], atol=1e-6)
    weights = decoder.forward(TARGET, return_weights=True).weights
    for layer_weights in weights if cls is layers.Decoder else [weights]:
        assert layer_weights["cross_attention"] is None
        assert np.all(np.triu(np.asarray(layer_weights["self_attention"]), k=1) == 0)


def test_decoder_only_cached_decoding_in_a_while_loop_under_xla():
    """The decoder-only cache (no encoder-decoder part) goes through `tf.while_loop`."""
    decoder = _decoder(layers.Decoder, norm_first=True)
    full = decoder(TARGET)

    @tf.function(jit_compile=True)
    def decode():
        cache = decoder.init_cache(length=5, batch_size=2)
        outputs = tf.TensorArray(tf.float32, size=5)

        def body(t, outputs, cache):
            step = tf.gather(TARGET, [t], axis=1)
            out, cache, _ = decoder.forward(step, cache=cache, cache_index=t)
            return t + 1, outputs.write(t, out[:, 0]), cache

        _, outputs, _ = tf.while_loop(lambda t, *_: t < 5, body, (0, outputs, cache))
        return tf.transpose(outputs.stack(), [1, 0, 2])

    np.testing.assert_allclose(decode(), full, atol=1e-5)


def test_decoder_only_and_encoder_decoder_refuse_the_other_call():
    decoder_only = _decoder(layers.DecoderLayer)
    decoder_only(TARGET)
    with pytest.raises(ValueError, match="takes no encoder_output"):
        decoder_only(TARGET, MEMORY)
    with pytest.raises(ValueError, match="pass batch_size"):
        decoder_only.init_cache(MEMORY, 4)
    with pytest.raises(ValueError, match="needs batch_size"):
        decoder_only.init_cache(length=4)
    translation = _decoder(layers.DecoderLayer)
    translation(TARGET, MEMORY)
    with pytest.raises(ValueError, match="pass encoder_output"):
        translation(TARGET)
    with pytest.raises(ValueError, match="needs encoder_output"):
        translation.init_cache(length=4, batch_size=2)


@pytest.mark.parametrize("cls", [layers.DecoderLayer, layers.Decoder])
def test_a_cached_left_padded_row_gives_what_it_gives_alone(cls):
    # Decoder-only: row 1 is row 0's first 3 positions after 2 padding slots, which the
    # mask over the cache's slots hides (kt.decoding.generate's left padding).
    decoder = _decoder(cls)
    alone = decoder(TARGET[:1, :3])  # (1, 3, d): the full call, no padding
    padded = np.stack([TARGET[0], np.concatenate([np.zeros((2, 16)), TARGET[0, :3]])])
    padded = padded.astype("float32")  # (2, 5, d)
    real = np.array([[True] * 5, [False] * 2 + [True] * 3])
    cache = decoder.init_cache(length=6, batch_size=2)
    prefix, cache, _ = decoder.forward(
        padded[:, :4], padding_mask=np.pad(real[:, :4], [[0, 0], [0, 2]]), cache=cache,
        cache_index=0,
    )  # fmt: skip
    last, cache, _ = decoder.forward(
        padded[:, 4:], padding_mask=np.pad(real, [[0, 0], [0, 1]]), cache=cache, cache_index=4
    )
    np.testing.assert_allclose(ops.concatenate([prefix, last], 1)[1, 2:], alone[0], atol=1e-5)
    np.testing.assert_allclose(
        ops.concatenate([prefix, last], 1)[0], decoder(TARGET[:1])[0], atol=1e-5
    )

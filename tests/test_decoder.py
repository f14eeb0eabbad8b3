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

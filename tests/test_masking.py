"""Keras masks through every layer: a mask attached to the inputs (`keras.layers.Embedding(
mask_zero=True)`, `TransformerEmbedding(mask_zero=True)`) stands in for `padding_mask`,
passes to the outputs, and is never dropped with Keras's "does not support masking" warning;
an explicit `padding_mask` still wins."""

import warnings

import keras
import numpy as np
import pytest
from keras.src.backend import get_keras_mask as keras_mask  # Keras has no public reader

import keras_transformer as kt

D_MODEL, VOCAB = 8, 20
# Two sentences padded with 0: the second has 2 real tokens of 5.
IDS = np.array([[3, 4, 5, 6, 7], [8, 9, 0, 0, 0]], "int32")
MEMORY_IDS = np.array([[3, 4, 0], [5, 6, 7]], "int32")
REAL = IDS != 0


def embedded(ids, seed=0):
    """Keras's Embedding with mask_zero: the outputs carry the mask `ids != 0`."""
    keras.utils.set_random_seed(seed)
    layer = keras.layers.Embedding(VOCAB, D_MODEL, mask_zero=True)
    return layer(ids)


def no_mask_warnings(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    dropped = [str(w.message) for w in caught if "does not support masking" in str(w.message)]
    assert not dropped, dropped
    return result


def real_rows(x):
    """The outputs at real positions only (padded positions carry no meaning)."""
    return np.asarray(x)[REAL]


def make(name):
    common = dict(num_heads=2, d_ff=16, dropout=0.0)
    return {
        "encoder_layer": lambda: kt.layers.EncoderLayer(**common),
        "encoder": lambda: kt.layers.Encoder(2, **common),
        "decoder_layer": lambda: kt.layers.DecoderLayer(**common),
        "decoder": lambda: kt.layers.Decoder(2, **common),
        "self_attention": lambda: kt.layers.TransformerAttention(num_heads=2),
    }[name]()


@pytest.mark.parametrize(
    "name", ["encoder_layer", "encoder", "decoder_layer", "decoder", "self_attention"]
)
def test_a_keras_mask_is_the_padding_mask_of_self_attention(name):
    x = embedded(IDS)
    layer = make(name)
    implicit = no_mask_warnings(lambda: layer(x))
    explicit = layer(keras.ops.convert_to_tensor(np.asarray(x)), padding_mask=REAL)
    unmasked = layer(keras.ops.convert_to_tensor(np.asarray(x)))
    np.testing.assert_allclose(real_rows(implicit), real_rows(explicit), atol=1e-6)
    if not name.startswith("decoder"):  # causal: real tokens never see the later padding
        assert not np.allclose(real_rows(implicit), real_rows(unmasked), atol=1e-4)
    np.testing.assert_array_equal(keras_mask(implicit), REAL)


@pytest.mark.parametrize("name", ["decoder_layer", "decoder"])
def test_the_encoder_outputs_mask_is_the_cross_attention_padding(name):
    x, memory = embedded(IDS), embedded(MEMORY_IDS, seed=1)
    layer = make(name)
    implicit = no_mask_warnings(lambda: layer(x, memory))
    plain = [keras.ops.convert_to_tensor(np.asarray(t)) for t in (x, memory)]
    explicit = layer(*plain, padding_mask=REAL, encoder_padding_mask=MEMORY_IDS != 0)
    np.testing.assert_allclose(real_rows(implicit), real_rows(explicit), atol=1e-6)
    np.testing.assert_array_equal(keras_mask(implicit), REAL)


def test_cross_attention_takes_the_values_mask_and_keeps_the_querys():
    query, value = embedded(IDS), embedded(MEMORY_IDS, seed=1)
    layer = kt.layers.TransformerAttention(num_heads=2)
    implicit = no_mask_warnings(lambda: layer(query, value))
    plain = [keras.ops.convert_to_tensor(np.asarray(t)) for t in (query, value)]
    explicit = layer(*plain, padding_mask=MEMORY_IDS != 0)
    np.testing.assert_allclose(real_rows(implicit), real_rows(explicit), atol=1e-6)
    np.testing.assert_array_equal(keras_mask(implicit), REAL)


def test_an_explicit_padding_mask_wins_over_the_keras_mask():
    x = embedded(IDS)
    layer = make("encoder_layer")
    everything = np.ones_like(REAL)
    given = layer(x, padding_mask=everything)
    plain = layer(keras.ops.convert_to_tensor(np.asarray(x)), padding_mask=everything)
    np.testing.assert_allclose(np.asarray(given), np.asarray(plain), atol=1e-6)


@pytest.mark.parametrize(
    "name", ["encoder_layer", "encoder", "decoder_layer", "decoder", "self_attention"]
)
def test_a_mask_given_as_keras_mask_wins_over_the_inputs_own(name):
    """`layer(x, mask=m)`, as a subclassed layer of the user's passes its mask on: `m` is
    used even where `x` carries a Keras mask of its own (here: every token real). `m` leaves
    out a middle token too, which the decoders' causal queries after it would see."""
    x = embedded(np.where(REAL, IDS, 1))  # no padding id: a mask of all True
    given_mask = REAL & (np.arange(5) != 1)
    layer = make(name)
    given = no_mask_warnings(lambda: layer(x, mask=given_mask))
    expected = layer(keras.ops.convert_to_tensor(np.asarray(x)), padding_mask=given_mask)
    ignored = layer(keras.ops.convert_to_tensor(np.asarray(x)))
    kept = np.asarray(given)[given_mask]
    np.testing.assert_allclose(kept, np.asarray(expected)[given_mask], atol=1e-6)
    assert not np.allclose(kept, np.asarray(ignored)[given_mask], atol=1e-4)


def test_cross_attention_takes_both_the_keys_and_the_values_masks():
    """As keras.layers.MultiHeadAttention: a position is attended to only where neither the
    key's nor the value's mask leaves it out."""
    query, value = embedded(IDS), embedded(MEMORY_IDS, seed=1)
    key = keras.ops.convert_to_tensor(np.asarray(value))  # no mask of its own
    layer = kt.layers.TransformerAttention(num_heads=2)
    implicit = layer(query, value, key)
    explicit = layer(query, value, key, padding_mask=MEMORY_IDS != 0)
    np.testing.assert_allclose(real_rows(implicit), real_rows(explicit), atol=1e-6)


def test_an_attention_mask_without_a_batch_axis_is_the_same_for_every_sentence():
    x = keras.ops.convert_to_tensor(np.asarray(embedded(IDS)))
    layer = kt.layers.TransformerAttention(num_heads=2)
    pattern = np.tril(np.ones((5, 5), bool))
    shared = layer(x, attention_mask=pattern)
    batched = layer(x, attention_mask=np.broadcast_to(pattern, (2, 5, 5)))
    np.testing.assert_allclose(np.asarray(shared), np.asarray(batched), atol=1e-6)


def test_position_wise_layers_pass_the_mask_on():
    x = embedded(IDS)
    feed_forward = kt.layers.PositionwiseFeedForward(16)
    residual = kt.layers.AddAndNorm()
    out = no_mask_warnings(lambda: residual(x, feed_forward(x)))
    np.testing.assert_array_equal(keras_mask(out), REAL)


def test_transformer_embedding_with_mask_zero_masks_padding_and_not_logits():
    layer = kt.layers.TransformerEmbedding(VOCAB, D_MODEL, mask_zero=True)
    x = layer(IDS)
    np.testing.assert_array_equal(keras_mask(x), REAL)
    assert no_mask_warnings(lambda: keras_mask(layer(x, reverse=True))) is None
    plain = kt.layers.TransformerEmbedding(VOCAB, D_MODEL)
    assert keras_mask(plain(IDS)) is None  # Keras's default: no mask
    # Float ids, as `keras.Input((None,))` gives by default, are masked too (as by Keras's
    # Embedding); only the reverse projection's vectors get no mask.
    np.testing.assert_array_equal(keras_mask(layer(IDS.astype("float32"))), REAL)
    assert kt.layers.TransformerEmbedding.from_config(layer.get_config()).mask_zero


def test_a_functional_classifier_pools_over_real_tokens_only(tmp_path):
    """The user's first model: Embedding(mask_zero) -> EncoderLayer -> average pooling, no
    padding_mask anywhere; the padded sentence's result ignores its padding, and the model
    saves and loads as .keras with the same outputs."""
    keras.utils.set_random_seed(3)
    ids = keras.Input(shape=(None,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, D_MODEL, mask_zero=True)(ids)
    x = kt.layers.EncoderLayer(num_heads=2, d_ff=16, dropout=0.0)(x)
    pooled = keras.layers.GlobalAveragePooling1D()(x)
    model = no_mask_warnings(lambda: keras.Model(ids, pooled))
    padded = np.asarray(model(IDS[1:]))
    alone = np.asarray(model(IDS[1:, :2]))  # the same sentence without padding
    np.testing.assert_allclose(padded, alone, atol=1e-5)
    model.save(tmp_path / "classifier.keras")
    loaded = no_mask_warnings(lambda: keras.saving.load_model(tmp_path / "classifier.keras"))
    np.testing.assert_array_equal(np.asarray(loaded(IDS)), np.asarray(model(IDS)))

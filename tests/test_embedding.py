"""Positional encodings, TransformerEmbedding and the tied output projection."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.testing import TestCase

from keras_transformer import layers

IDS = np.array([[5, 7, 9, 0], [3, 0, 0, 0]], "int32")


def paper_encodings(length, d_model, start=0):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""
    pos = np.arange(start, start + length)[:, None]
    i = np.arange(d_model // 2)[None, :]
    angles = pos / 10000 ** (2 * i / d_model)
    pe = np.zeros((length, d_model))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angles), np.cos(angles)
    return pe


class EmbeddingLayerTest(TestCase):
    def test_sinusoidal_position_encoding(self):
        self.run_layer_test(
            layers.SinusoidalPositionEncoding,
            init_kwargs={"max_wavelength": 10000.0},
            input_shape=(2, 7, 16),
            expected_output_shape=(2, 7, 16),
            expected_num_trainable_weights=0,
            run_training_check=False,  # no weights: nothing to train
        )

    def test_transformer_embedding(self):
        for positional, weights in (("sinusoidal", 1), ("learned", 2)):
            self.run_layer_test(
                layers.TransformerEmbedding,
                init_kwargs={
                    "vocab_size": 30,
                    "d_model": 8,
                    "max_length": 12,
                    "positional": positional,
                    "dropout": 0.1,
                },
                input_data=np.random.default_rng(0).integers(0, 30, (2, 6)).astype("int32"),
                expected_output_shape=(2, 6, 8),
                expected_num_trainable_weights=weights,
                expected_num_seed_generators=1,
            )


def test_sinusoidal_values_follow_the_paper():
    x = np.zeros((1, 50, 32), "float32")
    np.testing.assert_allclose(
        layers.SinusoidalPositionEncoding()(x)[0], paper_encodings(50, 32), atol=1e-5
    )


def test_concatenated_sinusoids_are_marians_layout():
    """All sines, then all cosines, at the paper's frequencies: transformers'
    MarianSinusoidalPositionalEmbedding, and the paper's columns reordered."""
    length, d = 40, 16
    angles = np.arange(length)[:, None] / np.power(10000, 2 * (np.arange(d) // 2) / d)[None]
    marian = np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])], axis=1)
    layer = layers.SinusoidalPositionEncoding(layout="concatenated")
    encodings = layer(np.zeros((1, length, d), "float32"))[0]
    np.testing.assert_allclose(encodings, marian, atol=1e-5)
    paper = paper_encodings(length, d)
    np.testing.assert_allclose(
        encodings, np.concatenate([paper[:, 0::2], paper[:, 1::2]], 1), atol=1e-5
    )
    with pytest.raises(ValueError, match="layout='sines' must be one of"):
        layers.SinusoidalPositionEncoding(layout="sines")


def test_the_output_bias_is_added_to_the_logits():
    layer = layers.TransformerEmbedding(vocab_size=20, d_model=8, output_bias=True)
    layer(IDS)
    names = sorted(w.path.split("/")[-1] for w in layer.trainable_weights)
    assert names == ["embeddings", "logits_bias"]
    bias = np.arange(20, dtype="float32")
    layer.logits_bias.assign(bias)
    hidden = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    table = layer.token_embedding.embeddings.numpy()
    np.testing.assert_allclose(layer(hidden, reverse=True), hidden @ table.T + bias, atol=1e-5)
    assert layers.TransformerEmbedding(vocab_size=20, d_model=8).logits_bias is None


def test_start_index_gives_the_later_positions():
    layer = layers.SinusoidalPositionEncoding()
    full = layer(np.zeros((2, 10, 16), "float32"))
    step = layer(np.zeros((2, 1, 16), "float32"), start_index=tf.constant(7))
    np.testing.assert_allclose(step[:, 0], full[:, 7], atol=1e-6)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_a_start_index_per_row_gives_each_row_its_positions(positional):
    # Left-padded prompts (kt.decoding.generate): row r's first token at position starts[r].
    layer = layers.TransformerEmbedding(20, 8, max_length=6, positional=positional)
    ids = np.array([[5, 7, 9], [0, 3, 4], [0, 0, 6]], "int32")
    starts = np.array([0, -1, 4], "int32")
    rows = layer(ids, start_index=starts)
    for row, start in enumerate(starts):
        for i in range(3):
            # Before a row's first token: position 0; past a learned table's end: its last.
            position = min(max(int(start) + i, 0), 5 if positional == "learned" else 99)
            alone = layer(ids[row : row + 1, i : i + 1], start_index=position)
            np.testing.assert_allclose(rows[row, i], alone[0, 0], atol=1e-6)


@pytest.mark.exact
def test_half_precision_encodings_are_accurate_at_long_positions():
    encodings = layers.SinusoidalPositionEncoding(dtype="mixed_float16")(
        np.zeros((1, 1000, 64), "float32")
    )
    assert encodings.dtype == tf.float16
    # Angles in float32, then one rounding to float16: error at most half a float16 ulp of 1.
    np.testing.assert_allclose(
        np.asarray(encodings, "float32")[0], paper_encodings(1000, 64), atol=5e-4
    )


def test_embedding_is_scaled_token_vector_plus_position():
    layer = layers.TransformerEmbedding(vocab_size=20, d_model=8)
    out = layer(IDS)
    table = layer.token_embedding.embeddings.numpy()
    expected = table[IDS] * np.sqrt(8) + paper_encodings(4, 8)[None]
    np.testing.assert_allclose(out, expected, atol=1e-5)


@pytest.mark.exact
def test_reverse_is_the_tied_projection_in_float32():
    layer = layers.TransformerEmbedding(vocab_size=20, d_model=8, dtype="mixed_bfloat16")
    layer(IDS)
    hidden = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    logits = layer(hidden, reverse=True)
    assert logits.dtype == tf.float32 and logits.shape == (2, 3, 20)
    assert len(layer.trainable_weights) == 1  # one matrix: embedding and projection
    table = layer.token_embedding.embeddings.numpy()
    # bfloat16 products (8 bits of mantissa) against float32 ones.
    np.testing.assert_allclose(logits, hidden @ table.T, atol=0.1, rtol=0.02)


@pytest.mark.parametrize("tie_weights", [True, False])
def test_reverse_projects_with_the_keras_reversible_embedding(tie_weights):
    layer = layers.TransformerEmbedding(vocab_size=20, d_model=8, tie_weights=tie_weights)
    layer(IDS)
    assert isinstance(layer.token_embedding, keras.layers.ReversibleEmbedding)
    hidden = np.random.default_rng(0).normal(size=(6, 8)).astype("float32")
    table = layer.token_embedding
    kernel = table.embeddings.numpy().T if tie_weights else table.reverse_embeddings.numpy()
    np.testing.assert_allclose(layer(hidden, reverse=True), hidden @ kernel, atol=1e-5)


@pytest.mark.exact
def test_int8_quantization_reaches_the_tied_table():
    layer = layers.TransformerEmbedding(vocab_size=20, d_model=8)
    layer(IDS)
    hidden = np.random.default_rng(0).normal(size=(6, 8)).astype("float32")
    expected = layer(hidden, reverse=True)
    layer.token_embedding.quantize("int8")
    assert layer.token_embedding.quantization_mode == "int8"
    logits = layer(hidden, reverse=True)
    assert logits.dtype == tf.float32
    np.testing.assert_allclose(logits, expected, atol=0.05)  # int8 table's rounding


def test_untied_projection_has_its_own_matrix():
    layer = layers.TransformerEmbedding(vocab_size=20, d_model=8, tie_weights=False)
    layer(IDS)
    assert len(layer.trainable_weights) == 2


def test_learned_positions_refuse_sequences_longer_than_the_table():
    layer = layers.TransformerEmbedding(
        vocab_size=20, d_model=8, max_length=3, positional="learned"
    )
    with pytest.raises(ValueError, match="sequence length 4 exceeds max_length=3"):
        layer(IDS)


def test_unknown_positional_kind_is_refused():
    with pytest.raises(ValueError, match="positional='rotary'"):
        layers.TransformerEmbedding(vocab_size=20, d_model=8, positional="rotary")


def test_dropout_only_in_training():
    layer = layers.TransformerEmbedding(vocab_size=20, d_model=8, dropout=0.5)
    np.testing.assert_array_equal(layer(IDS), layer(IDS, training=False))
    assert not np.allclose(layer(IDS, training=True), layer(IDS, training=False))


def test_shared_instance_in_a_model_keeps_one_matrix_after_reload(tmp_path):
    embed = layers.TransformerEmbedding(vocab_size=20, d_model=8)
    ids = keras.Input((None,), dtype="int32")
    model = keras.Model(ids, embed(embed(ids), reverse=True))
    model.save(tmp_path / "m.keras")
    restored = keras.saving.load_model(tmp_path / "m.keras")
    assert len(restored.trainable_weights) == 1
    np.testing.assert_allclose(restored(IDS), model(IDS), atol=0)


@pytest.mark.parametrize("tie_weights", [True, False])
def test_reverse_trains_the_table_under_xla_as_eagerly(tie_weights):
    layer = layers.TransformerEmbedding(vocab_size=20, d_model=8, tie_weights=tie_weights)
    layer(IDS)
    hidden = tf.constant(np.random.default_rng(2).normal(size=(2, 3, 8)), tf.float32)

    def grads():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(layer(hidden, reverse=True)))
        return tape.gradient(loss, layer.trainable_weights)

    eager, compiled = grads(), tf.function(grads, jit_compile=True)()
    assert [g is None for g in compiled] == [g is None for g in eager]
    assert sum(g is not None for g in eager) == 1  # the table, or the separate kernel
    for value, reference in zip(compiled, eager, strict=True):
        if reference is not None:
            np.testing.assert_allclose(value, reference, rtol=1e-5, atol=1e-5)


def test_fairseq_frequencies_are_m2m100s_sinusoid():
    """`frequencies="fairseq"`: the i-th of d/2 frequencies is 10000^(-i / (d/2 - 1)), as
    transformers' M2M100SinusoidalPositionalEmbedding (fairseq's) computes them, laid out
    sines then cosines; the paper's layouts and frequencies are unchanged by default."""
    length, d = 30, 16
    half = d // 2
    frequencies = np.exp(np.arange(half) * -(np.log(10000) / (half - 1)))
    angles = np.arange(length)[:, None] * frequencies[None]
    fairseq = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
    layer = layers.SinusoidalPositionEncoding(layout="concatenated", frequencies="fairseq")
    np.testing.assert_allclose(layer(np.zeros((1, length, d), "float32"))[0], fairseq, atol=1e-5)
    assert layers.SinusoidalPositionEncoding().get_config()["frequencies"] == "paper"
    with pytest.raises(ValueError, match="frequencies='t2t' must be one of"):
        layers.SinusoidalPositionEncoding(frequencies="t2t")


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_a_position_offset_starts_the_positions_later(positional):
    """`position_offset=2` (M2M100's: its padding id + 1): token t is at position t + 2, in
    full and step by step; a learned table has max_length + 2 rows."""
    plain = layers.TransformerEmbedding(20, 8, max_length=12, positional=positional)
    offset = layers.TransformerEmbedding(
        20, 8, max_length=10, positional=positional, position_offset=2
    )
    offset = layers.TransformerEmbedding.from_config(offset.get_config())  # round trip
    plain.build()
    offset.build()
    if positional == "learned":
        assert offset.position_embedding.input_dim == 12
        offset.position_embedding.embeddings.assign(plain.position_embedding.embeddings)
    x = np.zeros((1, 10, 8), "float32")
    full = np.reshape(offset.positions(x), (10, 8))  # ([1,] len, d_model)
    np.testing.assert_allclose(full, np.reshape(plain.positions(np.zeros((1, 12, 8))), (12, 8))[2:])
    step = offset.positions(x[:, :1], start_index=tf.constant(7))
    np.testing.assert_allclose(np.reshape(step, (8,)), full[7], atol=1e-6)
    assert offset.get_config()["position_offset"] == 2


@pytest.mark.parametrize("tie_weights", [True, False])
def test_the_tables_are_saved_a_block_of_rows_at_a_time_and_load_exactly(
    tmp_path, monkeypatch, tie_weights
):
    """The token table (and an untied reverse table) reach weight files through
    `_RowBlocks`, which NumPy takes without a copy; a table whose rows are not a multiple
    of the block size is written whole, and loads back equal."""
    from keras_transformer import _workarounds

    monkeypatch.setattr(_workarounds._RowBlocks, "ROWS", 7)  # 20 rows: blocks of 7, 7, 6
    layer = layers.TransformerEmbedding(vocab_size=20, d_model=8, tie_weights=tie_weights)
    layer(IDS)
    rng = np.random.default_rng(1)
    for weight in layer.weights:
        weight.assign(rng.normal(size=weight.shape))
    blocks = _workarounds._RowBlocks(layer.token_embedding.embeddings)
    array = np.array(blocks)
    np.testing.assert_array_equal(array, layer.token_embedding.embeddings)
    assert np.asarray(blocks).dtype == "float32" and np.array(blocks, "float64").dtype == "float64"
    model = keras.Sequential([keras.Input((None,), dtype="int32"), layer])
    model.save_weights(tmp_path / "m.weights.h5")
    again = layers.TransformerEmbedding(vocab_size=20, d_model=8, tie_weights=tie_weights)
    keras.Sequential([keras.Input((None,), dtype="int32"), again]).load_weights(
        tmp_path / "m.weights.h5"
    )
    for saved, loaded in zip(layer.weights, again.weights, strict=True):
        np.testing.assert_array_equal(saved, loaded)

"""SentencePiece vocabularies: special ids, exact round trips in and out of graphs, byte
fallback, saving and loading."""

import io
import re

import keras
import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from keras_transformer import text
from tests import bible


def test_special_ids_are_fixed():
    tokenizer = bible.vocabularies().source
    pieces = [tokenizer.id_to_token(i) for i in range(4)]
    assert pieces == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tokenizer.vocabulary_size() == 1000  # the (soft) size asked for, reached


def test_corpus_text_round_trips_exactly_in_graph():
    tokenizer = bible.vocabularies().target
    sentences = list(bible.pairs("dev").targets[:200])  # unseen text: accents, ¿¡, casing

    @tf.function
    def round_trip(batch):
        return tokenizer.detokenize(tokenizer.tokenize(batch))

    back = [s.decode("utf-8") for s in round_trip(tf.constant(sentences)).numpy()]
    assert back == sentences


def test_unseen_characters_round_trip_through_byte_fallback():
    tokenizer = bible.vocabularies().source
    sentence = "Ünïcödé ☃ 漢字 — «quotes» 🙂 tab-free"
    ids = tf.function(tokenizer.tokenize)(tf.constant([sentence]))  # the in-graph op
    assert text.UNK_ID not in ids.flat_values.numpy()
    assert text.detokenize(tokenizer, ids.to_tensor()) == [sentence]


def test_whitespace_runs_collapse():
    tokenizer = bible.vocabularies().source
    ids = tokenizer.tokenize(["  two   spaces  here "])
    assert text.detokenize(tokenizer, ids) == ["two spaces here"]


def test_detokenize_stops_at_padding_and_specials():
    tokenizer = bible.vocabularies().target
    ids = tokenizer.tokenize("Y dijo Dios.")
    decoded = np.concatenate([[text.BOS_ID], ids, [text.EOS_ID, 0, 0]])[None]
    assert text.detokenize(tokenizer, decoded) == ["Y dijo Dios."]


def test_training_is_deterministic_for_a_seed():
    sample = bible.pairs("train", 500)
    first = text.train_sentencepiece(sample.sources, 400, seed=3)
    second = text.train_sentencepiece(sample.sources, 400, seed=3)
    assert first == second


def test_bpe_model_type():
    sample = bible.pairs("train", 500)
    tokenizer = text.make_tokenizer(text.train_sentencepiece(sample.sources, 400, model_type="bpe"))
    assert text.detokenize(tokenizer, tokenizer.tokenize(["God said."])) == ["God said."]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(vocab_size=100), "vocab_size=100 is too small"),
        (dict(vocab_size=400, model_type="word"), "model_type='word'"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        text.train_sentencepiece(["a b c"] * 10, **kwargs)


def test_models_with_other_special_ids_are_refused():
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(bible.pairs("train", 300).sources),
        model_writer=model,
        vocab_size=300,
        minloglevel=2,
    )  # sentencepiece's defaults: unk 0, bos 1, eos 2, no pad
    with pytest.raises(ValueError, match="must have ids pad 0, unk 1, bos 2, eos 3"):
        text.make_tokenizer(model.getvalue())


@pytest.mark.parametrize("shared", [True, False])
def test_vocabularies_save_and_load(shared, tmp_path):
    vocabularies = bible.vocabularies(shared=shared, size=500)
    vocabularies.save(tmp_path / "vocab")
    names = sorted(p.name for p in (tmp_path / "vocab").iterdir())
    models = ["shared.model"] if shared else ["source.model", "target.model"]
    assert names == sorted(["manifest.json", *models])
    loaded = text.Vocabularies.load(tmp_path / "vocab")
    assert loaded.shared == shared
    assert loaded.target.proto == vocabularies.target.proto
    assert loaded.source.proto == vocabularies.source.proto


def test_a_replaced_or_missing_vocabulary_file_is_refused_by_name(tmp_path):
    bible.vocabularies(shared=False, size=500).save(tmp_path / "vocab")
    target = tmp_path / "vocab" / "target.model"
    original = target.read_bytes()
    target.write_bytes((tmp_path / "vocab" / "source.model").read_bytes())  # same size
    with pytest.raises(ValueError, match=re.escape(f"{target} is not the vocabulary")):
        text.Vocabularies.load(tmp_path / "vocab")
    target.unlink()
    with pytest.raises(FileNotFoundError, match=re.escape(f"{target}: missing")):
        text.Vocabularies.load(tmp_path / "vocab")
    target.write_bytes(original)
    assert text.Vocabularies.load(tmp_path / "vocab").target.proto == original
    manifest = tmp_path / "vocab" / "manifest.json"
    manifest.write_text(manifest.read_text()[:-1])  # cut short: its closing brace lost
    with pytest.raises(ValueError, match=re.escape(f"{manifest}: not valid JSON (Expecting")):
        text.Vocabularies.load(tmp_path / "vocab")


def test_separate_vocabularies_differ_per_language():
    vocabularies = bible.vocabularies(shared=False, size=500)
    assert vocabularies.source.proto != vocabularies.target.proto


def test_loading_a_missing_vocabulary(tmp_path):
    with pytest.raises(FileNotFoundError, match="no vocabulary"):
        text.Vocabularies.load(tmp_path)


def _piece_tokenizer():
    """An imported OPUS-MT model's kind of tokenizer, numbering the pieces by a list."""
    from keras_transformer.tokenizers.pieces import PieceVocabularyTokenizer

    tokenizer = bible.vocabularies().source
    return PieceVocabularyTokenizer(tokenizer.proto, tokenizer.get_vocabulary())


@pytest.mark.parametrize("reseed", [keras.utils.set_random_seed, tf.random.set_seed])
@pytest.mark.parametrize("kind", ["sentencepiece", "piece_vocabulary"])
def test_a_tokenizer_survives_reseeding(kind, reseed):
    """Reseeding clears TensorFlow's kernel cache, which held tensorflow-text's SentencePiece
    model (tensorflow/text#570): a tokenizer made before failed in tf.data and tf.function
    with "Resource ... SentencepieceOp ... does not exist"."""
    tokenizer = bible.vocabularies().source if kind == "sentencepiece" else _piece_tokenizer()
    sentences = tf.constant(["In the beginning.", "God said."])
    expected = tf.function(tokenizer.tokenize)(sentences).to_list()  # the in-graph op
    reseed(1)
    graph = tf.function(tokenizer.tokenize)(sentences)
    pipeline = tf.data.Dataset.from_tensors(sentences).map(tokenizer.tokenize)
    assert graph.to_list() == next(iter(pipeline)).to_list() == expected
    round_trip = tf.function(tokenizer.detokenize)(graph.to_tensor())
    assert [s.decode() for s in round_trip.numpy()] == ["In the beginning.", "God said."]

"""Small slices of the bundled English-Spanish corpus and a vocabulary learned on them, shared
by the text, data and trainer tests (cached per test process)."""

import functools
from pathlib import Path

from keras_transformer import corpus, text

DATA = Path(__file__).resolve().parent.parent / "data" / "bible-en-es"


@functools.cache
def pairs(split: str = "train", limit: int | None = None) -> corpus.ParallelCorpus:
    bible = corpus.read_tsv(DATA / f"{split}.tsv.xz", "en", "es")
    return bible.take(limit) if limit else bible


@functools.cache
def _protos(shared: bool, size: int) -> tuple[bytes, bytes]:
    sample = pairs("train", 3000)
    vocabularies = text.Vocabularies.train(sample.sources, sample.targets, size, shared=shared)
    return vocabularies.source.proto, vocabularies.target.proto


def vocabularies(shared: bool = True, size: int = 1000) -> text.Vocabularies:
    """A vocabulary learned on the first 3000 training pairs (about a second, once).

    The tokenizers are made anew on each call. (They no longer need to be: reseeding
    TensorFlow between tests destroyed the in-graph SentencePiece models of tokenizers made
    before, until `keras_transformer._workarounds.keep_sentencepiece_model`.)"""
    source, target = _protos(shared, size)
    if shared:
        tokenizer = text.make_tokenizer(source)
        return text.Vocabularies(tokenizer, tokenizer)
    return text.Vocabularies(text.make_tokenizer(source), text.make_tokenizer(target))


def tiny_model(seed: int = 3, max_length: int = 24):
    """An untrained `tiny` Transformer on `vocabularies()`, one layer a side, seeded (the
    same weights on every CPU): `(model, vocabularies)`, for the tests of exports and
    serving that need a model, not a translation."""
    import keras

    import keras_transformer as kt

    keras.utils.set_random_seed(seed)
    vocab = vocabularies()
    config = kt.TransformerConfig.preset(
        "tiny",
        vocab_size=vocab.target.vocabulary_size(),
        max_length=max_length,
        num_encoder_layers=1,
        num_decoder_layers=1,
    )
    return kt.build_transformer(config), vocab

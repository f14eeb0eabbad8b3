"""The keras-hub task on JAX: `TransformerSeq2SeqLM` builds, `fit` on text pairs lowers the
loss (its preprocessing in `tf.data`, the training step on JAX); on a model that translates
(tests/fixtures/briefly_trained/, loaded on JAX), `generate` gives the texts of the ids that
`translate_ids` decodes, those ids are the settings' search replayed in NumPy (but at a
choice within `ties.SCORE_TOLERANCE`), and a preset saved on JAX loads back and decodes
alike."""

import csv
import io
import lzma
from pathlib import Path

import jax
import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests import ties

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "bible-en-es"
BRIEFLY_TRAINED = ROOT / "tests" / "fixtures" / "briefly_trained"


def bible_pairs(count: int, split: str = "train"):
    """The first `count` English-Spanish pairs of `split`, read without `kt.corpus` (which
    needs Keras's TensorFlow backend)."""
    with lzma.open(DATA / f"{split}.tsv.xz", "rt", encoding="utf-8") as file:
        rows = csv.DictReader(io.StringIO(file.read()), delimiter="\t")
        pairs = [(row["en"], row["es"]) for _, row in zip(range(count), rows, strict=False)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def next_logits_in_one_shape(task, source_ids, rows: int = 8):
    """`ties.teacher_forced(task, source_ids)`'s `next_logits`, the model compiled once
    (`jax.jit`) for one shape: the prefixes right-padded to the model's `max_length` (the
    causal mask keeps the padding out of the positions before it) and taken `rows` at a
    time. Eagerly, JAX compiled each operation for each prefix length, minutes a sentence."""
    forward = jax.jit(lambda source, target: task({"source_ids": source, "target_ids": target}))
    source = np.repeat(np.asarray(source_ids, "int32")[None], rows, 0)
    width = task.config.max_length

    def call(prefixes: list[list[int]]) -> np.ndarray:
        found = []
        for start in range(0, len(prefixes), rows):
            chunk = prefixes[start : start + rows]
            target = np.zeros((rows, width), "int32")
            for row, prefix in enumerate(chunk):
                target[row, : len(prefix)] = prefix
            logits = np.asarray(forward(source, target))
            found.extend(logits[row, len(prefix) - 1] for row, prefix in enumerate(chunk))
        return np.stack(found)

    return call


@pytest.mark.exact
def test_the_task_builds_and_fits_on_jax():
    assert keras.config.backend() == "jax"
    from keras_transformer.models import (
        TransformerBackbone,
        TransformerSeq2SeqLM,
        TransformerSeq2SeqLMPreprocessor,
        TransformerTokenizer,
    )

    sources, targets = bible_pairs(256)
    vocabularies = kt.text.Vocabularies.train(sources, targets, 500)
    keras.utils.set_random_seed(0)
    config = kt.TransformerConfig.preset(
        "tiny",
        vocab_size=vocabularies.target.vocabulary_size(),
        max_length=64,
        num_encoder_layers=1,
        num_decoder_layers=1,
    )
    preprocessor = TransformerSeq2SeqLMPreprocessor(TransformerTokenizer(vocabularies))
    task = TransformerSeq2SeqLM(TransformerBackbone(config), preprocessor)
    task.compile(optimizer=keras.optimizers.Adam(1e-3))

    before = task.evaluate(sources, targets, batch_size=64, verbose=0, return_dict=True)
    task.fit(sources, targets, batch_size=32, epochs=2, verbose=0)
    after = task.evaluate(sources, targets, batch_size=64, verbose=0, return_dict=True)
    assert after["loss"] < before["loss"] - 0.5, (before, after)


@pytest.mark.exact
def test_generate_decodes_the_settings_search_on_jax(tmp_path):
    """The stored briefly trained model, whose translations differ from verse to verse:
    `generate` (batches of similar length, text in and out) against `translate_ids` (the
    whole batch, ids), and those ids against `ties.replay_beam`, the settings' beam search
    written plainly in NumPy over the model's teacher-forced logits."""
    assert keras.config.backend() == "jax"
    from keras_transformer.models import TransformerSeq2SeqLM

    settings = kt.decoding.DecodingSettings(beam_size=2, max_extra_length=10)
    task = TransformerSeq2SeqLM.from_preset(BRIEFLY_TRAINED, decoding=settings)
    sentences, _ = bible_pairs(6, "test")
    sentences = [*sentences, ""]  # nothing to translate: ""
    texts = task.generate(sentences, batch_size=3)
    source_ids = task.preprocessor.source_ids(sentences).numpy()
    ids, _ = kt.decoding.translate_ids(task, source_ids, **settings.search_arguments())
    ids = np.asarray(ids)
    target = task.preprocessor.tokenizer.vocabularies.target
    expected = kt.text.detokenize(target, ids)
    # The model translates: texts that are not empty and not alike, which a bug that swaps,
    # drops or cuts outputs changes.
    assert texts[-1] == ""  # generate's rule; the search itself decodes from EOS alone
    assert all(expected[:-1]) and len(set(expected[:-1])) == len(sentences) - 1, expected
    max_length = task.backbone.config.max_length

    # `generate` decodes in batches of similar length, another computation than the whole
    # batch's: a text may differ only where the replay of the settings' search meets a
    # choice within ties.SCORE_TOLERANCE; all but one alike (all when written).
    parted = ties.rows_parted_at_ties(
        task,
        source_ids[:-1],
        [ties.tokenized_back(target, text) for text in texts[:-1]],
        ids[:-1],
        settings,
    )
    assert len(parted) <= 1, (parted, texts, expected)

    # `translate_ids`'s best hypothesis is the replay's, but where the replay meets a choice
    # within ties.SCORE_TOLERANCE (a float32 sum and a float64 one may order it either way);
    # all but one alike (all when written).
    unlike = []
    for row, source in enumerate(source_ids[:-1]):
        search = ties.search_settings(settings, source, max_length)
        replay = ties.replay_beam(next_logits_in_one_shape(task, source), **search)
        best = [*replay.finished[0][1], ties.EOS_ID]
        if ties.output_ids(ids[row]) != [best]:
            assert replay.smallest_margin < ties.SCORE_TOLERANCE, (row, ids[row], best)
            unlike.append(row)
    assert len(unlike) <= 1, unlike

    task.save_to_preset(tmp_path / "preset")
    loaded = TransformerSeq2SeqLM.from_preset(tmp_path / "preset")
    assert loaded.decoding == settings and loaded.generate(sentences, batch_size=3) == texts

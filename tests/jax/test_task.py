"""The keras-hub task on JAX: `TransformerSeq2SeqLM` builds, `fit` on text pairs lowers the
loss (its preprocessing in `tf.data`, the training step on JAX), `generate` translates as
the searches decode the same ids (but at a choice within `ties.SCORE_TOLERANCE`), and a
preset saved on JAX loads back and decodes alike."""

import csv
import io
import lzma
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests import ties

DATA = Path(__file__).resolve().parents[2] / "data" / "bible-en-es" / "train.tsv.xz"
SENTENCES = ["In the beginning God created the heaven and the earth.", "", "Jesus wept."]


def bible_pairs(count: int):
    """The first `count` English-Spanish training pairs, read without `kt.corpus` (which
    needs Keras's TensorFlow backend)."""
    with lzma.open(DATA, "rt", encoding="utf-8") as file:
        rows = csv.DictReader(io.StringIO(file.read()), delimiter="\t")
        pairs = [(row["en"], row["es"]) for _, row in zip(range(count), rows, strict=False)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


@pytest.mark.exact
def test_the_task_builds_fits_and_generates_on_jax(tmp_path):
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
    settings = kt.decoding.DecodingSettings(beam_size=2, max_extra_length=5)
    task = TransformerSeq2SeqLM(TransformerBackbone(config), preprocessor, decoding=settings)
    task.compile(optimizer=keras.optimizers.Adam(1e-3))

    before = task.evaluate(sources, targets, batch_size=64, verbose=0, return_dict=True)
    task.fit(sources, targets, batch_size=32, epochs=2, verbose=0)
    after = task.evaluate(sources, targets, batch_size=64, verbose=0, return_dict=True)
    assert after["loss"] < before["loss"] - 0.5, (before, after)

    texts = task.generate(SENTENCES)
    source_ids = preprocessor.source_ids(SENTENCES).numpy()
    ids, _ = kt.decoding.translate_ids(task, source_ids, **settings.search_arguments())
    expected = kt.text.detokenize(vocabularies.target, np.asarray(ids))
    assert len(texts) == 3 and texts[1] == ""  # nothing to translate
    # `generate` decodes in batches of similar length, another computation than the whole
    # batch's: a text may differ only where the replay (the settings' search) meets a choice
    # within ties.SCORE_TOLERANCE; at most one of the two apart (neither when written).
    alike = 0
    for row in (0, 2):
        if texts[row] == expected[row]:
            alike += 1
            continue
        text_ids = np.asarray(vocabularies.target.tokenize(texts[row])).tolist()
        replay = {
            name: getattr(settings, name)
            for name in ("beam_size", "length_penalty", "finish_rule", "stopping", "ranking")
        }
        limit = ties.length_limit(source_ids[row], settings.max_extra_length, config.max_length)
        assert ties.ours_part_at_a_tie(
            ties.teacher_forced(task, source_ids[row]),
            text_ids,
            ids[row],
            {**replay, "limit": limit, "n_best": 1},
        ), (texts[row], expected[row])
    assert alike >= 1, (texts, expected)

    task.save_to_preset(tmp_path / "preset")
    loaded = TransformerSeq2SeqLM.from_preset(tmp_path / "preset")
    assert loaded.decoding == settings and loaded.generate(SENTENCES) == texts

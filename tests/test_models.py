"""The keras-hub task family (`kt.models`): the preprocessor makes the pipeline's ids,
`generate` translates as `Translator` does, presets and `.keras` files round-trip with their
vocabulary and decoding settings, keras-hub's own loader finds the task, `fit` learns from
text pairs, `compile(sampler=...)` takes keras-hub's samplers, `from_preset` reads Marian
checkpoints and trainers' model directories and refuses what it cannot load, and the export
takes the task."""

import inspect
import json
from pathlib import Path

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf
import yaml

import keras_transformer as kt
from keras_transformer.models import (
    TransformerBackbone,
    TransformerSeq2SeqLM,
    TransformerSeq2SeqLMPreprocessor,
    TransformerTokenizer,
)
from tests import bible, ties

MARIAN = Path(__file__).parent / "fixtures" / "marian" / "shared"
SENTENCES = [
    "In the beginning God created the heaven and the earth.",
    "Amen.",
    "",
    "And God said, Let there be light: and there was light.",
    "   ",
    "Jesus wept.",
]
PRESET_FILES = [
    "assets",
    "config.json",
    "metadata.json",
    "model.weights.h5",
    "preprocessor.json",
    "task.json",
    "tokenizer.json",
]


def random_model(vocabularies, **overrides):
    """A tiny model with weights moved off the initializer's zeros and ones: its outputs are
    not translations, but every comparison below is of one computation with itself, except
    those marked `exact`: an eager search against a traced one and the SavedModel's against
    generate's, whose last bits may differ: texts (tokenized back) alike but where the two
    part at a choice within SCORE_TOLERANCE (`parted`), most rows alike (all when written);
    scores of the rows alike to 1e-6 relative."""
    keras.utils.set_random_seed(3)
    config = kt.TransformerConfig.preset(
        "tiny",
        vocab_size=vocabularies.target.vocabulary_size(),
        max_length=48,
        num_encoder_layers=1,
        num_decoder_layers=1,
        **overrides,
    )
    model = kt.build_transformer(config)
    rng = np.random.default_rng(0)
    for weight in model.weights:
        weight.assign(weight + rng.normal(0, 0.05, weight.shape))
    return model


def parted(model, source_ids, texts, other_texts, settings) -> list[int]:
    """The rows where two computations of one search (`settings`) of `source_ids` give
    other translations (texts, or n-bests of texts), each at a tie
    (`ties.rows_parted_at_ties`, the texts tokenized back)."""
    target = bible.vocabularies().target
    ids, other_ids = ([ties.tokenized_back(target, t) for t in x] for x in (texts, other_texts))
    return ties.rows_parted_at_ties(model, source_ids, ids, other_ids, settings)


@pytest.fixture(scope="module")
def vocabularies():
    return bible.vocabularies()


@pytest.fixture(scope="module")
def model(vocabularies):
    return random_model(vocabularies)


@pytest.fixture(scope="module")
def task(model, vocabularies):
    settings = kt.decoding.DecodingSettings(beam_size=3, length_penalty=1.0, max_extra_length=7)
    return TransformerSeq2SeqLM.from_transformer(model, vocabularies, decoding=settings)


@pytest.fixture(scope="module")
def task_texts(task):
    """`task.generate(SENTENCES)`, once a module (its search is deterministic)."""
    return task.generate(SENTENCES)


def test_the_preprocessor_makes_the_pipelines_ids(vocabularies):
    preprocessor = TransformerSeq2SeqLMPreprocessor(
        TransformerTokenizer(vocabularies), encoder_sequence_length=6, decoder_sequence_length=5
    )
    sources = ["In the beginning God created the heaven", "Amen."]
    targets = ["En el principio creó Dios los cielos", "Amén."]
    x, y = preprocessor(sources, targets)
    tokens = [list(vocabularies.source.tokenize(s)) for s in sources]
    labels = [list(vocabularies.target.tokenize(t)) for t in targets]

    def padded(rows):
        width = max(len(row) for row in rows)
        return [row + [0] * (width - len(row)) for row in rows]

    # Sources cut to 6 with EOS, targets to 5 with BOS (or EOS): as kt.data makes them.
    assert x["source_ids"].numpy().tolist() == padded([t[:5] + [3] for t in tokens])
    assert x["target_ids"].numpy().tolist() == padded([[2] + t[:4] for t in labels])
    assert y.numpy().tolist() == padded([t[:4] + [3] for t in labels])
    assert x["source_ids"].dtype == y.dtype == tf.int32
    # keras-hub's dict form gives the same; ids made elsewhere pass through.
    x2, y2 = preprocessor({"encoder_text": sources, "decoder_text": targets})
    assert np.array_equal(x2["source_ids"], x["source_ids"]) and np.array_equal(y2, y)
    assert preprocessor(x, y)[0] is x
    # Inside tf.data (the tensorflow-text op) as eagerly (keras-hub's Python path).
    dataset = tf.data.Dataset.from_tensor_slices((sources, targets)).batch(2)
    (x3, y3) = next(iter(dataset.map(preprocessor)))
    assert np.array_equal(x3["source_ids"], x["source_ids"]) and np.array_equal(y3, y)
    with pytest.raises(ValueError, match="training needs targets"):
        preprocessor(sources)
    with pytest.raises(ValueError, match="lacks \\['decoder_text'\\]"):
        preprocessor({"encoder_text": sources})


def test_generate_translates_as_the_translator(task, task_texts, model, vocabularies):
    translator = kt.evaluation.Translator(model, vocabularies, decoding=task.decoding)
    expected = translator.translate(SENTENCES)
    assert task_texts == expected  # task.generate(SENTENCES)
    assert task.generate(SENTENCES[0]) == expected[0]  # a str in, a str out
    assert task.generate(tf.data.Dataset.from_tensor_slices(SENTENCES).batch(4)) == expected
    assert task.generate({"encoder_text": SENTENCES}) == expected
    assert expected[2] == expected[4] == ""  # nothing to translate
    # The translator of the task itself takes its vocabularies and settings.
    assert kt.evaluation.Translator(task).translate(SENTENCES) == expected


def test_the_translator_honors_what_generate_honors(model, vocabularies):
    """`Translator` and `generate` go through one search (`kt.decoding.decode`) and one
    preprocessor: n-best lists, and a task's keras-hub sampler, reach both."""
    settings = kt.decoding.DecodingSettings(beam_size=3, n_best=2, max_extra_length=6)
    task = TransformerSeq2SeqLM.from_transformer(model, vocabularies, decoding=settings)
    n_best = task.generate(SENTENCES)
    assert all(isinstance(row, list) and len(row) == 2 for row in n_best)
    assert kt.evaluation.Translator(task).translate(SENTENCES) == n_best
    assert (
        kt.evaluation.Translator(model, vocabularies, decoding=settings).translate(SENTENCES)
        == n_best
    )
    task.compile(sampler=keras_hub.samplers.TopKSampler(k=1, seed=1))  # draws the argmax
    drawn = task.generate(SENTENCES)
    translator = kt.evaluation.Translator(task)
    assert translator.sampling == task.sampling and translator.translate(SENTENCES) == drawn
    greedy = kt.evaluation.Translator(model, vocabularies, beam_size=1, max_extra_length=6)
    assert greedy.translate(SENTENCES) == drawn  # top-1 sampling is greedy search


@pytest.mark.exact
def test_generate_returns_the_n_best_with_their_scores(model, vocabularies):
    """`generate(..., n_best=2, return_scores=True)` answers as the SavedModel's n_best
    signature does: the search's hypotheses and scores, best first; a blank input gives ""
    with score 0; the per-call `n_best` is checked against the beam and a sampler."""
    settings = kt.decoding.DecodingSettings(beam_size=3, max_extra_length=6)
    task = TransformerSeq2SeqLM.from_transformer(model, vocabularies, decoding=settings)
    answer = task.generate(SENTENCES + ["  "], n_best=2, return_scores=True)
    assert sorted(answer) == ["scores", "translations"]
    source_ids = task.preprocessor.source_ids(SENTENCES)
    two = settings.replace(n_best=2)
    ids, scores = kt.decoding.decode(task, source_ids, two)
    texts = task.preprocessor.generate_postprocess({"target_ids": ids, "source_ids": source_ids})
    tied = parted(model, source_ids, answer["translations"][:-1], texts, two)
    assert len(tied) <= 1 and answer["translations"][-1] == ["", ""], tied
    blank = np.count_nonzero(source_ids.numpy(), axis=1) <= 1  # SENTENCES has blank ones
    assert blank.any() and not blank.all()
    expected = np.where(blank[:, None], 0.0, scores.numpy())
    alike = [row for row in range(len(SENTENCES)) if row not in tied]
    np.testing.assert_allclose(np.array(answer["scores"][:-1])[alike], expected[alike], rtol=1e-6)
    assert answer["scores"][-1] == [0.0, 0.0]
    assert all(first >= second for first, second in answer["scores"])
    without = task.generate(SENTENCES, n_best=2)  # the same lists without scores
    assert len(parted(model, source_ids, without, texts, two)) <= 1
    one = task.generate(SENTENCES[0], return_scores=True)
    assert one == {"translation": task.generate(SENTENCES[0]), "score": one["score"]}
    first = [one["translation"]], [answer["translations"][0][0]]  # the best search, the 2-best's
    assert isinstance(one["score"], float)
    if not parted(model, source_ids[:1], *first, (settings, two)):
        assert one["score"] == pytest.approx(answer["scores"][0][0], abs=1e-5)
    ids_only, id_scores = TransformerSeq2SeqLM(task.backbone, decoding=settings).generate(
        source_ids.numpy(), return_scores=True
    )
    assert ids_only.shape[0] == len(SENTENCES) and id_scores.shape == (len(SENTENCES),)
    with pytest.raises(ValueError, match="n_best=4 must be between 1 and the beam size 3"):
        task.generate(SENTENCES, n_best=4)
    with pytest.raises(ValueError, match="return_scores='yes' must be True or False"):
        task.generate(SENTENCES, return_scores="yes")
    task.compile(sampler="top_k")
    with pytest.raises(ValueError, match="n_best=2: this task samples"):
        task.generate(SENTENCES, n_best=2)


@pytest.mark.exact
def test_generate_with_greedy_and_n_best_settings(model, vocabularies):
    greedy = kt.decoding.DecodingSettings.preset("greedy")
    task = TransformerSeq2SeqLM.from_transformer(model, vocabularies, decoding=greedy)
    translator = kt.evaluation.Translator(model, vocabularies, beam_size=1)
    source_ids = task.preprocessor.source_ids(SENTENCES)
    generated, translated = task.generate(SENTENCES), translator.translate(SENTENCES)
    tied = parted(model, source_ids, generated, translated, greedy)  # generate's graph, eager
    n_best = kt.decoding.DecodingSettings(beam_size=3, n_best=3)
    task.compile(sampler=n_best)
    results = task.generate(SENTENCES[:2])
    assert [len(r) for r in results] == [3, 3]
    # The n best of the n-best search, and its best is the search's own best.
    ids, _ = kt.decoding.beam_search(task, source_ids[:2], beam_size=3, num_hypotheses=3)
    expected = [kt.text.detokenize(vocabularies.target, row) for row in ids.numpy()]
    tied += parted(model, source_ids[:2], results, expected, n_best)
    assert len(tied) <= 1, tied  # of 8 (none when written)


def test_new_settings_take_effect_at_the_next_generate(model, vocabularies):
    """Setting `task.decoding` after a `generate` (whose search is made once per settings)
    decodes with the new settings, as a fresh task with them does."""
    task = TransformerSeq2SeqLM.from_transformer(model, vocabularies)
    assert task.generate(SENTENCES) == kt.evaluation.Translator(task).translate(SENTENCES)
    task.decoding = kt.decoding.DecodingSettings(beam_size=1, max_extra_length=3)
    fresh = TransformerSeq2SeqLM.from_transformer(model, vocabularies, decoding=task.decoding)
    assert task.generate(SENTENCES) == fresh.generate(SENTENCES)


@pytest.mark.exact
def test_a_target_prefix_starts_every_translation(task, vocabularies):
    """`target_prefix` (text, through the target tokenizer) is forced first, from the
    settings or per call, and the same ids come from the search given its ids (eagerly:
    alike but at a tie, `parted`, at most one of the six rows; none when written)."""
    prefix = "Y dijo"
    prefix_ids = np.asarray(vocabularies.target.tokenize(prefix), "int32")
    source_ids = task.preprocessor.source_ids(SENTENCES[:2])
    forced = kt.text.detokenize(
        vocabularies.target,
        kt.decoding.translate_ids(
            task, source_ids, **task.decoding.search_arguments(), target_prefix=prefix_ids
        )[0].numpy(),
    )
    assert all(text.startswith(prefix) for text in forced)
    prefixed = TransformerSeq2SeqLM(
        task.backbone, task.preprocessor, decoding=task.decoding.replace(target_prefix=prefix)
    )
    tied = []
    for texts in (
        task.generate(SENTENCES[:2], target_prefix=prefix),
        prefixed.generate(SENTENCES[:2]),
        kt.evaluation.Translator(prefixed).translate(SENTENCES[:2]),
    ):
        assert all(text.startswith(prefix) for text in texts), texts
        tied += ties.rows_parted_at_ties(
            task,
            source_ids,
            [ties.tokenized_back(vocabularies.target, text) for text in texts],
            [ties.tokenized_back(vocabularies.target, text) for text in forced],
            task.decoding,
            prefix=prefix_ids,
        )
    assert len(tied) <= 1, tied


def test_generate_refuses_what_it_cannot_do(task):
    with pytest.raises(ValueError, match="stop at EOS \\(id 3\\) only"):
        task.generate("Amen.", stop_token_ids=[5])
    with pytest.raises(ValueError, match="max_length=0 must be None or an integer >= 1"):
        task.generate("Amen.", max_length=0)
    with pytest.raises(ValueError, match="generate continues no target prompt"):
        task.generate({"encoder_text": ["Amen."], "decoder_text": ["Amén"]})


@pytest.mark.parametrize(
    "inputs, message",
    [
        (None, "inputs=None: expected a str, a list of str or a dataset of str, got NoneType"),
        (123, "inputs=123: expected text \\(str\\), got int"),
        (["a", None], "inputs\\[1\\]=None: expected text \\(str\\), got NoneType"),
        ([b"\xff"], "inputs\\[0\\]: bytes that are not UTF-8"),
    ],
)
def test_generate_refuses_what_is_not_text_naming_it(task, inputs, message):
    with pytest.raises(ValueError, match=message):
        task.generate(inputs)


def test_fit_refuses_unpaired_or_empty_text_naming_the_arguments(task):
    with pytest.raises(ValueError, match="^x has 3 sentences and y 2: give one target a source$"):
        task.fit(["a b", "c d", "e"], ["x", "y"])
    with pytest.raises(ValueError, match="^x and y are empty: nothing to train on$"):
        task.fit([], [])
    with pytest.raises(ValueError, match="x\\['encoder_text'\\] has 1 sentences and"):
        task.fit({"encoder_text": ["a"], "decoder_text": ["b", "c"]})
    with pytest.raises(ValueError, match="^x\\[1\\]=None: expected text"):
        task.fit(["a", None], ["x", "y"])
    with pytest.raises(ValueError, match="^x\\[0\\]: bytes that are not UTF-8"):
        task.fit([b"\xff\xfe"], [b"x"])
    with pytest.raises(ValueError, match="^x=None: fit takes text pairs"):
        task.fit(None, None)
    # Refused before Keras traces the preprocessor, which would wrap its own refusal in
    # "in user code:" and the traced function's traceback.
    for call in (task.fit, task.evaluate):
        with pytest.raises(ValueError, match="^y=None: training needs targets: give fit"):
            call(["a b"], None)
    with pytest.raises(ValueError, match="^x has 3 sentences and y 2"):
        task.evaluate(["a b", "c d", "e"], ["x", "y"])
    with pytest.raises(ValueError, match="a dict takes keras-hub's 'encoder_text'"):
        task.generate({"a": 1})


def test_a_target_prefix_shaped_like_an_unknown_language_code_is_refused(task, tmp_path):
    """The demo's vocabulary has no language codes: a code would be forced as text
    ("spaLatn ..."). Other text still is a forced start (the test above)."""
    for prefix in ("spa_Latn", "xxx_Zzzz", "Y __es__"):
        with pytest.raises(ValueError, match="looks like a language code, and this model's"):
            task.generate("Amen.", target_prefix=prefix)
    with pytest.raises(ValueError, match="goes at the start of the source text"):
        task.generate("Amen.", target_prefix=">>spa<<")
    prefixed = task.decoding.replace(target_prefix="spa_Latn")
    for name in ("savedmodel", "ctranslate2"):
        with pytest.raises(ValueError, match="'spa_Latn' looks like a language code"):
            kt.export.export(task, tmp_path / name, format=name, decoding=prefixed)
        assert not (tmp_path / name).exists()
    with pytest.raises(ValueError, match="looks like a language code"):
        kt.evaluation.Translator(task, decoding=prefixed)


def test_max_length_caps_the_output(task):
    ids = task.generate(["And God said, Let there be light: and there was light."], max_length=4)
    source_ids = task.preprocessor.source_ids(["And God said, Let there be light."])
    capped, _ = kt.decoding.translate_ids(task, source_ids, max_length=4)
    assert capped.shape[1] == 4 and isinstance(ids[0], str)


def test_save_to_preset_and_load_with_keras_hubs_loader(task, task_texts, tmp_path):
    task.save_to_preset(tmp_path / "preset")
    assert sorted(p.name for p in (tmp_path / "preset").iterdir()) == PRESET_FILES
    assets = sorted(p.name for p in (tmp_path / "preset" / "assets" / "tokenizer").iterdir())
    assert assets == ["manifest.json", "shared.model"]
    task_json = json.loads((tmp_path / "preset" / "task.json").read_text())
    assert task_json["config"]["decoding"] == task.decoding.to_dict()

    loaded = keras_hub.models.Seq2SeqLM.from_preset(str(tmp_path / "preset"))
    assert type(loaded) is TransformerSeq2SeqLM
    assert loaded.decoding == task.decoding
    assert type(keras_hub.models.Backbone.from_preset(str(tmp_path / "preset"))) is (
        TransformerBackbone
    )
    ours = TransformerSeq2SeqLM.from_preset(tmp_path / "preset")
    source_ids = task.preprocessor.source_ids(SENTENCES)
    expected = kt.decoding.translate_ids(task, source_ids, **task.decoding.search_arguments())
    for other in (loaded, ours):
        ids = kt.decoding.translate_ids(other, source_ids, **other.decoding.search_arguments())
        np.testing.assert_array_equal(ids[0], expected[0])
        assert other.generate(SENTENCES) == task_texts


def test_a_keras_file_carries_the_vocabulary(task, task_texts, tmp_path):
    task.save(tmp_path / "task.keras")
    loaded = keras.saving.load_model(tmp_path / "task.keras")
    assert type(loaded) is TransformerSeq2SeqLM and loaded.decoding == task.decoding
    assert loaded.generate(SENTENCES) == task_texts


@pytest.mark.exact
def test_fit_on_text_pairs_lowers_the_loss(vocabularies):
    model = random_model(vocabularies)
    task = TransformerSeq2SeqLM.from_transformer(model, vocabularies)
    assert isinstance(task.loss, kt.losses.LabelSmoothedCrossEntropy)  # the paper's recipe
    schedule = task.optimizer.get_config()["learning_rate"]
    assert schedule["class_name"] == "WarmupSchedule", schedule
    task.compile(optimizer=keras.optimizers.Adam(1e-3))
    pairs = bible.pairs("train", 256)
    sources, targets = list(pairs.sources), list(pairs.targets)
    before = task.evaluate(sources, targets, batch_size=64, verbose=0, return_dict=True)
    history = task.fit(sources, targets, batch_size=32, epochs=3, verbose=0)
    after = task.evaluate(sources, targets, batch_size=64, verbose=0, return_dict=True)
    assert after["loss"] < before["loss"] - 1.0, (before, after, history.history)  # a margin
    # A dataset of (source, target) pairs trains the same way.
    pairs_dataset = tf.data.Dataset.from_tensor_slices((sources, targets)).batch(32)
    assert task.fit(pairs_dataset, epochs=1, verbose=0).history["loss"][0] > 0


def test_compile_takes_keras_hubs_samplers(model, vocabularies):
    task = TransformerSeq2SeqLM.from_transformer(model, vocabularies)
    task.compile(sampler="greedy")
    assert task.decoding.beam_size == 1 and task.sampling is None
    task.compile(sampler="beam")  # by name: the default beam, not greedy's 1 plus one
    assert task.decoding.beam_size == kt.decoding.DecodingSettings().beam_size == 4
    task.compile(sampler=kt.decoding.DecodingSettings(beam_size=6))
    task.compile(sampler="beam")  # the settings' own beam size
    assert task.decoding.beam_size == 6
    task.compile(sampler=keras_hub.samplers.BeamSampler(num_beams=2))
    assert task.decoding.beam_size == 2
    task.compile(sampler=keras_hub.samplers.BeamSampler(num_beams=3, return_all_beams=True))
    assert (task.decoding.beam_size, task.decoding.n_best) == (3, 3)
    task.compile(sampler="beam")  # by name: the best translation of that beam
    assert (task.decoding.beam_size, task.decoding.n_best) == (3, 1)
    task.compile(sampler=keras_hub.samplers.BeamSampler(num_beams=3, return_all_beams=True))
    task.compile(sampler="top_k")
    assert task.sampling == {"temperature": 1.0, "top_k": 5, "seed": None}
    task.compile(sampler=keras_hub.samplers.TopPSampler(p=0.9, seed=4))
    assert task.sampling["top_p"] == 0.9 and task.sampling["seed"] == 4
    drawn = task.generate(SENTENCES[:2])
    assert all(isinstance(text, str) for text in drawn)
    with pytest.raises(ValueError, match="'contrastive' is not one this model's searches run"):
        task.compile(sampler="contrastive")
    with pytest.raises(ValueError, match="does not change with the temperature"):
        task.compile(sampler=keras_hub.samplers.GreedySampler(temperature=2.0))
    with pytest.raises(ValueError, match="n_best=5 must be between 1 and the beam size 4"):
        task.compile(sampler=kt.decoding.DecodingSettings(n_best=5))


def test_from_preset_reads_a_marian_checkpoint_as_load_marian_does():
    task = TransformerSeq2SeqLM.from_preset(MARIAN)
    model, vocabularies = kt.pretrained.load_marian(MARIAN)
    generation = json.loads((MARIAN / "generation_config.json").read_text())
    assert task.decoding.beam_size == generation.get("num_beams", 4)
    assert task.decoding.length_penalty == generation.get("length_penalty", 1.0)
    translator = kt.evaluation.Translator(model, vocabularies, decoding=task.decoding)
    sentences = ["I love you.", "The house is small.", ""]
    assert task.generate(sentences) == translator.translate(sentences)


def test_from_preset_reads_a_model_directory_written_before_presets(model, vocabularies, tmp_path):
    directory = tmp_path / "run"
    directory.mkdir()
    model.save(directory / "model.keras")
    vocabularies.save(directory / "vocab")
    section = {"beam_size": 2, "length_penalty": 1.0, "stopping": "exact"}
    (directory / "experiment.yaml").write_text(yaml.safe_dump({"decoding": section}))
    task = TransformerSeq2SeqLM.from_preset(directory)
    assert task.decoding == kt.decoding.DecodingSettings(**section)
    translator = kt.evaluation.Translator(model, vocabularies, decoding=task.decoding)
    assert task.generate(SENTENCES) == translator.translate(SENTENCES)
    # Another .keras file of the directory, and settings over the directory's.
    model.save(directory / "model.averaged.keras")
    other = TransformerSeq2SeqLM.from_preset(
        directory, model_file="model.averaged.keras", decoding={"beam_size": 1}
    )
    assert other.decoding == task.decoding.replace(beam_size=1)


def test_a_keyword_from_preset_does_not_take_is_refused_by_name(task, tmp_path):
    """Keras's functional models drop an unknown keyword without a word: `model_fil=` loaded
    model.keras, and so did keras-hub's loader given `model_file=`, which it cannot read (it
    loads a preset's own weights). Each is refused by name, before anything is read."""
    task.save_to_preset(tmp_path / "preset")
    preset = str(tmp_path / "preset")
    with pytest.raises(ValueError, match=r"no keyword argument 'model_fil' \(did you mean 'mo"):
        TransformerSeq2SeqLM.from_preset(preset, model_fil="model.averaged.keras")
    with pytest.raises(ValueError) as refused:
        TransformerSeq2SeqLM.from_preset(preset, foo=3)
    assert str(refused.value) == (
        "TransformerSeq2SeqLM.from_preset takes no keyword argument 'foo'; it takes "
        "load_weights, decoding, model_file, dtype, preprocessor, sampling, compile, name, "
        "trainable"
    )
    with pytest.raises(ValueError, match=r"'load_weigths' \(did you mean 'load_weights'\?\)"):
        TransformerSeq2SeqLM.from_preset(preset, load_weigths=False)
    with pytest.raises(ValueError, match="no keyword argument 'foo'"):  # before a download
        TransformerSeq2SeqLM.from_preset("hf://Helsinki-NLP/opus-mt-en-es", foo=3)
    with pytest.raises(ValueError, match="keras-hub's loader .* reads no other model file; lo"):
        keras_hub.models.Seq2SeqLM.from_preset(preset, model_file="model.averaged.keras")
    with pytest.raises(ValueError) as refused:  # the call's name, not the constructor's
        keras_hub.models.Seq2SeqLM.from_preset(preset, foo=3)
    assert str(refused.value) == (
        "from_preset takes no keyword argument 'foo'; it takes load_weights, decoding, dtype, "
        "preprocessor, sampling, compile, name, trainable"
    )
    with pytest.raises(ValueError, match="takes no keyword argument 'nam' \\(did you mean 'na"):
        TransformerSeq2SeqLM(task.backbone, nam="mine")
    # What keras-hub's loader takes still reaches the task.
    loaded = TransformerSeq2SeqLM.from_preset(preset, name="mine", decoding={"beam_size": 1})
    assert loaded.name == "mine" and loaded.decoding.beam_size == 1
    loaded = keras_hub.models.Seq2SeqLM.from_preset(preset, name="hub", decoding={"beam_size": 3})
    assert loaded.name == "hub" and loaded.decoding.beam_size == 3


def test_a_keyword_the_backbones_from_preset_does_not_take_is_refused_by_name(task, tmp_path):
    """As the task's (above): keras-hub's loader merged an unknown keyword into the backbone's
    config, and Keras's functional model dropped it without a word."""
    task.backbone.save_to_preset(tmp_path / "preset")
    preset = str(tmp_path / "preset")
    with pytest.raises(ValueError) as refused:
        TransformerBackbone.from_preset(preset, unknown_keyword=3)
    assert str(refused.value) == (
        "TransformerBackbone.from_preset takes no keyword argument 'unknown_keyword'; it takes "
        "load_weights, dtype, name, trainable"
    )
    with pytest.raises(ValueError, match=r"'load_weigths' \(did you mean 'load_weights'\?\)"):
        TransformerBackbone.from_preset(preset, load_weigths=False)
    with pytest.raises(ValueError, match="no keyword argument 'foo'"):  # before a download
        TransformerBackbone.from_preset("hf://Helsinki-NLP/opus-mt-en-es", foo=3)
    with pytest.raises(ValueError) as refused:  # the call's name, not the constructor's
        keras_hub.models.Backbone.from_preset(preset, nam="hub")
    assert str(refused.value) == (
        "from_preset takes no keyword argument 'nam' (did you mean 'name'?); it takes "
        "load_weights, dtype, name, trainable"
    )
    with pytest.raises(ValueError, match=r"no keyword argument 'layer_of' \(did you mean 'la"):
        TransformerBackbone(task.backbone.config, layer_of=None)
    # What keras-hub's loader takes still reaches the backbone.
    loaded = TransformerBackbone.from_preset(preset, name="mine", trainable=False)
    assert (loaded.name, loaded.trainable) == ("mine", False)
    assert keras_hub.models.Backbone.from_preset(preset, name="hub").name == "hub"


def test_from_preset_refuses_what_it_cannot_load_by_name(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such preset or model directory"):
        TransformerSeq2SeqLM.from_preset(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        TransformerSeq2SeqLM.from_preset(tmp_path / "file")
    with pytest.raises(ValueError, match="is neither a keras-hub preset"):
        TransformerSeq2SeqLM.from_preset(tmp_path)
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match="config.json: model_type='bert' is not one this"):
        TransformerSeq2SeqLM.from_preset(tmp_path / "bert")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{")
    with pytest.raises(ValueError, match="bad/config.json: not valid JSON"):
        TransformerSeq2SeqLM.from_preset(tmp_path / "bad")
    gpt2 = keras_hub.models.GPT2Backbone(
        vocabulary_size=10,
        num_layers=1,
        num_heads=1,
        hidden_dim=4,
        intermediate_dim=8,
        max_sequence_length=8,
    )
    gpt2.save_to_preset(str(tmp_path / "gpt2"))
    with pytest.raises(ValueError, match="a preset of keras_hub>GPT2Backbone, not of Transf"):
        TransformerSeq2SeqLM.from_preset(tmp_path / "gpt2")
    with pytest.raises(ValueError, match="unknown decoding setting\\(s\\) \\['beams'\\]"):
        TransformerSeq2SeqLM.from_preset(MARIAN, decoding={"beams": 3})


@pytest.mark.exact
def test_the_exports_take_the_task_and_its_preset(task, task_texts, tmp_path):
    version = kt.export.export(task, tmp_path / "saved")
    served = tf.saved_model.load(str(version)).signatures["serving_default"]
    texts = [t.decode() for t in served(text=tf.constant(SENTENCES))["translation"].numpy()]
    source_ids = task.preprocessor.source_ids(SENTENCES)
    assert len(parted(task, source_ids, texts, task_texts, task.decoding)) <= 1  # of 6
    manifest = json.loads((version / "assets.extra" / "manifest.json").read_text())
    settings = task.decoding.to_dict()
    del settings["n_best"]
    assert {k: manifest["decoding"][k] for k in settings} == settings

    task.save_to_preset(tmp_path / "preset")
    again = kt.export.export(tmp_path / "preset", tmp_path / "saved")  # the preset's settings
    manifest = json.loads((again / "assets.extra" / "manifest.json").read_text())
    assert again.name == "2"
    assert {k: manifest["decoding"][k] for k in settings} == settings


def test_the_ranking_round_trips_and_an_old_preset_ranks_as_gnmt(task, tmp_path):
    """`decoding.ranking` goes through to_dict/from_dict and a preset; a preset written
    before it (no "ranking" in task.json's decoding) loads with "gnmt", as it decoded."""
    settings = task.decoding.replace(ranking="length")
    assert kt.decoding.DecodingSettings.from_dict(settings.to_dict()) == settings
    assert settings.search_arguments()["ranking"] == "length"
    task.decoding, kept = settings, task.decoding
    try:
        task.save_to_preset(str(tmp_path / "preset"))
    finally:
        task.decoding = kept
    assert TransformerSeq2SeqLM.from_preset(tmp_path / "preset").decoding.ranking == "length"
    task_json = tmp_path / "preset" / "task.json"
    config = json.loads(task_json.read_text())
    del config["config"]["decoding"]["ranking"]
    task_json.write_text(json.dumps(config))
    old = TransformerSeq2SeqLM.from_preset(tmp_path / "preset").decoding
    assert old.ranking == "gnmt" and old == settings.replace(ranking="gnmt")


def test_decoding_settings_are_checked_by_name():
    settings = kt.decoding.DecodingSettings
    assert settings() == settings.preset("paper")
    assert settings.preset("tensor2tensor").stopping == "exact"
    assert settings().replace(beam_size=None, length_penalty=1.0).length_penalty == 1.0
    for values, message in [
        ({"beam_size": 0}, "beam_size=0 must be an integer >= 1"),
        ({"beam_size": True}, "beam_size=True must be an integer >= 1"),
        ({"length_penalty": -1}, "length_penalty=-1 must be a number >= 0"),
        ({"length_penalty": float("nan")}, "length_penalty=nan must be finite"),
        ({"stopping": "late"}, "stopping='late' must be one of"),
        ({"finish_rule": "x"}, "finish_rule='x' must be one of"),
        ({"ranking": "wu"}, "ranking='wu' must be one of \\('gnmt', 'length'\\)"),
        ({"max_extra_length": -1}, "max_extra_length=-1 must be an integer >= 0"),
        ({"n_best": 5}, "n_best=5 must be between 1 and the beam size 4"),
        ({"beam": 5}, "unknown decoding setting\\(s\\) \\['beam'\\]"),
    ]:
        with pytest.raises(ValueError, match=f"^my.yaml: {message}"):
            settings.from_dict(values, "my.yaml")
    with pytest.raises(ValueError, match="decoding preset 'fast' is unknown"):
        settings.preset("fast")
    # The searches and the translator default to these settings.
    for search in (kt.decoding.beam_search, kt.decoding.translate_ids, kt.evaluation.Translator):
        parameters = inspect.signature(search).parameters
        for name in ("beam_size", "length_penalty", "stopping", "finish_rule", "ranking"):
            if name in parameters and search is not kt.evaluation.Translator:
                assert parameters[name].default == getattr(settings(), name), (search, name)
    assert kt.evaluation.Translator.__init__.__kwdefaults__["decoding"] is None


def test_the_ctranslate2_export_takes_the_task(task, tmp_path):
    pytest.importorskip("ctranslate2")  # installed by `make test` (requirements.txt)
    directory = kt.export.export(task, tmp_path / "ct2", format="ctranslate2")
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["decoding"]["beam_size"] == task.decoding.beam_size
    assert manifest["decoding"]["length_penalty"] == task.decoding.length_penalty
    assert manifest["decoding"]["max_extra_length"] == task.decoding.max_extra_length
    assert manifest["model_config"] == task.config.to_dict()


def test_the_task_quantizes_to_int8(model, vocabularies):
    task = TransformerSeq2SeqLM.from_transformer(model, vocabularies)
    before = task.generate(SENTENCES)
    task.quantize("int8")
    kernel = task.backbone.encoder.encoder_layers[0].self_attention.query_dense._kernel
    assert kernel.dtype == "int8"
    after = task.generate(SENTENCES)
    assert all(isinstance(text, str) for text in after)
    assert len(after) == len(before)


def test_a_task_can_share_the_models_weights_instead_of_copying_them(vocabularies):
    """`from_transformer` copies the weights; with `share_weights=True` the backbone holds
    the model's own variables (no second copy: what the import program and `from_preset`
    of a checkpoint use), and both translate alike."""
    model = random_model(vocabularies)
    copied = TransformerSeq2SeqLM.from_transformer(model, vocabularies)
    shared = TransformerSeq2SeqLM.from_transformer(model, vocabularies, share_weights=True)
    assert all(a is b for a, b in zip(shared.backbone.weights, model.weights, strict=True))
    assert not any(a is b for a, b in zip(copied.backbone.weights, model.weights, strict=True))
    assert shared.generate(SENTENCES) == copied.generate(SENTENCES)
    table = model.target_embedding.token_embedding.embeddings
    table.assign(table * 0.5)  # changes the shared task only
    assert np.array_equal(shared.backbone.target_embedding.token_embedding.embeddings, table)
    assert not np.array_equal(copied.backbone.target_embedding.token_embedding.embeddings, table)
    # A backbone sharing layers of a model of another config is refused.
    other = kt.TransformerConfig.from_dict({**model.config.to_dict(), "dropout": 0.3})
    with pytest.raises(ValueError, match="built from another config"):
        TransformerBackbone(other, layers_of=model)


@pytest.mark.parametrize("change", ["int8", "lora"])
def test_a_quantized_or_lora_model_is_refused_by_name(vocabularies, change):
    model = random_model(vocabularies)
    if change == "int8":
        model.quantize("int8")
    else:
        model.target_embedding.token_embedding.enable_lora(2)
    for share in (False, True):
        with pytest.raises(ValueError, match="is quantized or has LoRA adapters"):
            TransformerSeq2SeqLM.from_transformer(model, vocabularies, share_weights=share)

"""One spine (issue 58): the same sentences through every door give the same translations.

The doors (DOORS): `TransformerSeq2SeqLM.generate` (on text, and without a preprocessor on
source ids), `kt.evaluation.Translator` (`translate`, and `translate_ids` for the ids and
scores), the SavedModel's `serving_default`, `serving_xla`, `translate_ids`, `n_best` and
`serving_prefix` signatures, and the same SavedModel through `kt.serving.open`
(`SavedModelTranslator`), the hypotheses `trainers.evaluate` scores, the translation
`trainers.visualize` draws the attention of (greedy rows: it searches one sentence at a
time, eagerly), a CTranslate2 directory through `trainers.translate` (a process of its own
on a directory this one wrote) and through its client in this process, and the float32
LiteRT file through `kt.serving.open` (`LiteRTTranslator`; LITERT_ROWS). The settings
(SETTINGS): greedy search; beam 4 with alpha 0.6 and early stopping; exact stopping; an
n-best of 2 (with CTranslate2's own beam search, so that it is held to it too); a target
prefix, and both languages' prefixes, on the NLLB-200 fixture.

Each door serves the settings it can answer: the doors that answer one translation a
sentence, those without an n-best (an n-best changes when beam search may stop); the
`n_best` signature, those with one; `serving_prefix`, those with a target prefix, which it
takes with each sentence. For each setting, every door that serves it gives the texts of the
first door in DOORS that shows texts, the ids of the first that shows ids (target ids,
forced prefix included, EOS and padding left out) and the scores of the first that shows
scores, within SCORE_TOLERANCE. CTranslate2 is held to this where it runs our search: greedy
search, and its own beam search (`ranking="length"` with the fairseq finish rule and
k_finished stopping, `kt.export.ctranslate2`); elsewhere it ranks its own hypotheses anew
(tests/test_ctranslate2.py). Its logits differ from ours in their last bits and its softmax
leaves out a sliver of mass (SLIVER), so it may part from ours at a near tie: tests/ties.py's
rule (`parts_at_a_tie`), which tests/test_ctranslate2.py's comparisons use too. The LiteRT
file runs our search in LiteRT's kernels: its texts are held to ours but where the search,
replayed with the settings' rules, meets a choice within the two engines' last bits
(`litert_ties`, tests/test_litert.py's rule); most rows alike. Our own
doors (one engine, in graphs of their own, on a model trained in the run) are held to each
other's texts and ids but where the search meets a choice within SCORE_TOLERANCE, where
their last bits may order it either way (`ours_part_at_a_tie`: tests/ties.py's rule for two
computations of our own search); most rows alike (all when written).

A new door is one line of DOORS (a function from the spine and a row to an `Answer`, and
the settings it serves), a new setting one line of SETTINGS.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.decoding import DecodingSettings
from keras_transformer.decoding.settings import prefix_ids, with_source_prefix
from keras_transformer.evaluation import Translator
from keras_transformer.models import TransformerSeq2SeqLM
from keras_transformer.text import BOS_ID, EOS_ID
from tests import bible, programs, ties
from tests.cli import run_main

pytestmark = [pytest.mark.slow, pytest.mark.exact]

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
NLLB = FIXTURES / "m2m100" / "nllb-tiny"
DEMO = ROOT / "trainers" / "configs" / "demo.yaml"

# Our doors run one search in one engine, TensorFlow's, but in graphs of their own (XLA's
# fused one among them) over batches padded alike or not: float32 sums of a few dozen
# log-probabilities that differ in their last bits, as tests/test_export.py allows.
SCORE_TOLERANCE = 1e-4
# CTranslate2's softmax leaves out what its search never generates (padding, the start
# token, EOS as the first token), to which our model gives a sliver of mass: its summed
# log-probabilities are higher than ours by that mass a token, never lower (about 1e-3 a
# token at most on this model; tests/test_ctranslate2.py). Its command line writes four
# decimals.
SLIVER = 2e-3
ROUNDING = 1e-4


class Case(NamedTuple):
    """A row of SETTINGS: which model ("bible": the tiny model trained briefly on the
    bundled corpus; "nllb": the NLLB-200 fixture), which sentences (SENTENCES), which
    settings."""

    model: str
    sentences: str
    settings: DecodingSettings


def verses(count: int = 16) -> list[str]:
    return list(bible.pairs("test", count).sources)


def english(count: int = 12) -> list[str]:
    items = json.loads((FIXTURES / "m2m100" / "reference.json").read_text())["greedy"]["items"]
    return [item["text"] for item in items[:count]]


SENTENCES: dict[str, Callable[[], list[str]]] = {
    "verses": verses,
    # NLLB reads a source language's code first: written into the text, or put there by
    # `DecodingSettings.source_prefix` (the "source language" row).
    "english with its code": lambda: [f"eng_Latn {text}" for text in english()],
    "english": english,
}

SETTINGS: dict[str, Case] = {
    "greedy": Case("bible", "verses", DecodingSettings(beam_size=1)),
    "beam 4, alpha 0.6, early stopping": Case(
        "bible", "verses", DecodingSettings(beam_size=4, length_penalty=0.6, stopping="early")
    ),
    # At alpha 0.6 this model's exact and early stopping find the same best hypotheses on
    # these verses; at 1.0 exact stopping goes on to longer ones on some.
    "exact stopping": Case(
        "bible", "verses", DecodingSettings(length_penalty=1.0, stopping="exact")
    ),
    # CTranslate2's own beam search (its ranking, finish and stopping rules): its n-best too.
    "beam 4, n_best 2, CTranslate2's ranking": Case(
        "bible",
        "verses",
        DecodingSettings(ranking="length", finish_rule="fairseq", stopping="k_finished", n_best=2),
    ),
    "target prefix": Case(
        "nllb", "english with its code", DecodingSettings(target_prefix="spa_Latn")
    ),
    # Greedy, so that CTranslate2 joins: both languages as settings, the text without a code.
    "source language": Case(
        "nllb",
        "english",
        DecodingSettings(beam_size=1, source_prefix="eng_Latn", target_prefix="spa_Latn"),
    ),
}


class Answer(NamedTuple):
    """What a door gives for the sentences, each as a list of hypotheses, best first (one
    without n-best); None where the door does not show it."""

    texts: list[list[str]] | None
    ids: list[list[list[int]]] | None  # target ids, forced prefix included, no EOS
    scores: list[np.ndarray] | np.ndarray | None  # [sentences][hypotheses]


class Door(NamedTuple):
    """`run(spine, case) -> Answer`; `serves(settings)`: whether the door runs these
    settings; `engine`: "ours" (TensorFlow's), or another engine ("ctranslate2", "litert"),
    held to ours as the module doc says."""

    run: Callable
    serves: Callable[[DecodingSettings], bool]
    engine: str = "ours"


class Spine:
    """The models, their exports and their directories, each made once for the module, and
    each door's answer for each setting."""

    def __init__(self, briefly_trained, root: Path):
        self.root = root
        self.bible = briefly_trained
        self.made: dict[tuple, object] = {}  # (what, of what) -> it

    def once(self, key: tuple, make: Callable):
        if key not in self.made:
            self.made[key] = make()
        return self.made[key]

    def task(self, model: str) -> TransformerSeq2SeqLM:
        if model == "bible":
            make = functools.partial(TransformerSeq2SeqLM.from_transformer, *self.bible)
        else:
            make = functools.partial(TransformerSeq2SeqLM.from_preset, NLLB)
        return self.once(("task", model), make)

    def sentences(self, case: Case) -> list[str]:
        return SENTENCES[case.sentences]()

    def source_ids(self, case: Case) -> np.ndarray:
        """The sentences' source ids `[batch, len]`, as the task's preprocessor makes them
        from the sentences with the settings' source prefix (`with_source_prefix`)."""
        prefix = case.settings.source_prefix
        sentences = [with_source_prefix(s, prefix) for s in self.sentences(case)]
        return (
            self.task(case.model).preprocessor.generate_preprocess(sentences)["source_ids"].numpy()
        )

    def folder(self, kind: str, case: Case) -> Path:
        setting = next(name for name, row in SETTINGS.items() if row == case)
        return self.root / kind / re.sub(r"\W+", "-", setting)

    def saved_model_translator(self, case: Case):
        """The SavedModel of the case's model, its settings baked in, opened by
        `kt.serving.open` (a `SavedModelTranslator`, which loads it)."""

        def make():
            task = self.task(case.model)
            directory = self.folder("saved_models", case)
            kt.export.export(task, directory, decoding=case.settings)
            translator = kt.serving.open(directory)
            assert isinstance(translator, kt.serving.SavedModelTranslator), translator
            return translator

        return self.once(("saved model", case), make)

    def saved_model(self, case: Case):
        """The SavedModel of the case's model, loaded: the translator's, one load for both
        kinds of door."""
        return self.saved_model_translator(case).loaded

    def litert(self, case: Case) -> Path:
        """The LiteRT directory of the case's model (float32), its settings in the file."""
        pytest.importorskip("ai_edge_litert", reason="LiteRT's interpreter (requirements.txt)")
        return self.once(
            ("litert", case),
            lambda: kt.export.export(
                self.task(case.model),
                self.folder("litert", case),
                format="litert",
                decoding=case.settings,
            ),
        )

    def ctranslate2(self, case: Case) -> Path:
        """The CTranslate2 directory of the case's model, its settings in the manifest."""
        pytest.importorskip("ctranslate2")  # installed by `make test` (requirements.txt)
        return self.once(
            ("ctranslate2", case),
            lambda: kt.export.export(
                self.task(case.model),
                self.folder("ctranslate2", case),
                format="ctranslate2",
                decoding=case.settings,
            ),
        )

    def model_directory(self, model: str) -> Path:
        """A model directory of `trainers.evaluate`, its decoding settings the defaults."""
        return self.once(("model directory", model), lambda: self._model_directory(model))

    def _model_directory(self, model: str) -> Path:
        directory = self.root / "model_directories" / model
        if model == "nllb":
            run_main("trainers.import_pretrained", NLLB, "--model-dir", directory)
            return directory
        from trainers.experiment import load_experiment
        from trainers.run_dir import RunDirectory

        trained, vocabularies = self.bible
        size = vocabularies.target.vocabulary_size()
        layers = ["model.num_encoder_layers=1", "model.num_decoder_layers=1"]
        experiment = load_experiment(DEMO, [*layers, "model.max_length=96"])
        experiment = dataclasses.replace(
            experiment.with_vocab_sizes(size, size), decoding=DecodingSettings()
        )
        directory.mkdir(parents=True)
        run = RunDirectory(directory)
        run.save_experiment(experiment)
        run.save_vocabularies(vocabularies)
        run.save_trained(trained, vocabularies)
        return directory

    def answer(self, setting: str, door: str) -> Answer:
        return self.once(
            ("answer", setting, door), lambda: DOORS[door].run(self, SETTINGS[setting])
        )


# === The doors ===


def hypotheses(values, n: int) -> list[list]:
    """A door's answers for n hypotheses a sentence as lists, best first."""
    values = [v.tolist() if isinstance(v, np.ndarray) else v for v in values]
    return [list(v) for v in values] if n > 1 else [[v] for v in values]


def id_rows(ids) -> list[list[list[int]]]:
    """Ids `[batch, len]` or `[batch, n, len]` (EOS-terminated, 0-padded) as lists, best
    first, each up to its EOS."""
    ids = np.asarray(ids)
    ids = ids if ids.ndim == 3 else ids[:, None, :]
    return [[list(row[: list(row).index(EOS_ID)]) for row in rows.tolist()] for rows in ids]


def score_rows(scores) -> np.ndarray:
    scores = np.asarray(scores, "float32")
    return scores if scores.ndim == 2 else scores[:, None]


def generate(spine: Spine, case: Case) -> Answer:
    """`generate` on text, its target prefix given to the call; its ids from the same
    backbone as a task without a preprocessor, on the preprocessor's source ids (a target
    prefix is text, which it cannot tokenize)."""
    task, settings = spine.task(case.model), case.settings
    task.compile(sampler=dataclasses.replace(settings, target_prefix=None))
    sentences = spine.sentences(case)
    answer = task.generate(sentences, target_prefix=settings.target_prefix, return_scores=True)
    texts = answer.get("translation", answer.get("translations"))
    scores = score_rows(answer.get("score", answer.get("scores")))
    ids = None
    if settings.target_prefix is None:
        # The source ids carry the source prefix already (`Spine.source_ids`).
        on_ids = dataclasses.replace(settings, source_prefix=None)
        on_ids = TransformerSeq2SeqLM(task.backbone, decoding=on_ids, compile=False)
        ids = id_rows(on_ids.generate(spine.source_ids(case)))
    return Answer(hypotheses(texts, settings.n_best), ids, scores)


def translator(spine: Spine, case: Case) -> Answer:
    """`Translator.translate` (text), and its `translate_ids` (ids and scores)."""
    translator = Translator(spine.task(case.model), decoding=case.settings)
    texts = translator.translate(spine.sentences(case))
    ids, scores = translator.translate_ids(spine.source_ids(case))
    return Answer(hypotheses(texts, case.settings.n_best), id_rows(ids), score_rows(scores))


def text_signature(name: str) -> Callable:
    """A SavedModel signature of the case's export that takes text, and with each sentence
    the settings its other inputs name (`serving_prefix`: `target_prefix`)."""

    def door(spine: Spine, case: Case) -> Answer:
        sentences = spine.sentences(case)
        signature = spine.saved_model(case).signatures[name]
        inputs = {"text": tf.constant(sentences)}
        for setting in signature.structured_input_signature[1]:
            if setting != "text":
                inputs[setting] = tf.constant([getattr(case.settings, setting)] * len(sentences))
        served = signature(**inputs)
        texts = served.get("translation", served.get("translations")).numpy()
        texts = [t.decode() for t in texts.reshape(-1)]
        scores = score_rows(served.get("score", served.get("scores")).numpy())
        n = scores.shape[1]
        texts = [texts[i : i + n] for i in range(0, len(texts), n)]
        return Answer(texts, None, scores)

    return door


def translate_ids(spine: Spine, case: Case) -> Answer:
    """The SavedModel's `translate_ids` on the preprocessor's source ids."""
    served = spine.saved_model(case).signatures["translate_ids"](
        source_ids=tf.constant(spine.source_ids(case))
    )
    return Answer(None, id_rows(served["ids"].numpy()), score_rows(served["score"].numpy()))


# `trainers.evaluate`'s flags for the settings; the others are the model directory's.
EVALUATE_FLAGS = {
    "beam_size": "--beam-size",
    "length_penalty": "--length-penalty",
    "ranking": "--ranking",
    "finish_rule": "--finish-rule",
    "stopping": "--stopping",
    "target_prefix": "--target-prefix",
    "source_prefix": "--source-prefix",
}


def evaluate(spine: Spine, case: Case) -> Answer:
    """The hypotheses `trainers.evaluate` scores (its --output file), with the settings as
    its flags over the model directory's."""
    from trainers.run_dir import RunDirectory

    directory = spine.model_directory(case.model)
    stored = RunDirectory(directory).load_experiment().decoding
    flags = []
    for field in dataclasses.fields(DecodingSettings):
        value = getattr(case.settings, field.name)
        if value == getattr(stored, field.name):
            continue
        if field.name not in EVALUATE_FLAGS or value is None:
            raise AssertionError(
                f"trainers.evaluate has no flag for {field.name}={value!r} (the directory's: "
                f"{getattr(stored, field.name)!r}): add it to EVALUATE_FLAGS"
            )
        flags += [EVALUATE_FLAGS[field.name], value]
    source = spine.folder("evaluate", case).with_suffix(".txt")
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text("".join(f"{s}\n" for s in spine.sentences(case)))
    output = source.with_suffix(".hyp")
    run_main(
        "trainers.evaluate",
        *["--model-dir", directory, "--source", source, "--reference", source],
        *["--output", output, *flags],
    )
    return Answer(hypotheses(output.read_text().splitlines(), 1), None, None)


def ctranslate2_command_line(spine: Spine, case: Case) -> Answer:
    """`python -m trainers.translate --model DIR` (--n-best K, else --with-scores), a process
    of its own on the CTranslate2 directory this process wrote."""
    directory = spine.ctranslate2(case)
    n = case.settings.n_best
    result = programs.program(
        "trainers.translate", "--model", directory,
        *(["--n-best", n] if n > 1 else ["--with-scores"]),
        input="".join(f"{s}\n" for s in spine.sentences(case)), timeout=300,
    )  # fmt: skip
    lines = result.stdout.splitlines()
    if n == 1:
        rows = [line.split("\t", 1) for line in lines]
        texts, scores = [[text] for _, text in rows], [[float(score)] for score, _ in rows]
    else:
        texts, scores = [[] for _ in spine.sentences(case)], [[] for _ in spine.sentences(case)]
        for line in lines:
            index, text, score = line.split(" ||| ")
            texts[int(index)].append(text)
            scores[int(index)].append(float(score))
    return Answer(texts, None, [np.array(row, "float32") for row in scores])


def ctranslate2_client(spine: Spine, case: Case) -> Answer:
    """`kt.serving.CTranslate2Translator` in this process: CTranslate2's tokens, as
    our ids."""
    from keras_transformer.serving import CTranslate2Translator

    translator = CTranslate2Translator(spine.ctranslate2(case))
    found = translator.translate(spine.sentences(case), n_best=case.settings.n_best)
    return Answer(
        [[h.text for h in hs] for hs in found],
        [[h.ids for h in hs] for hs in found],
        [np.array([h.score for h in hs], "float32") for hs in found],
    )


def saved_model_translator(spine: Spine, case: Case) -> Answer:
    """`kt.serving.open` on the SavedModel (`SavedModelTranslator`): its signatures through
    the library's runtime, the settings' prefixes and n-best given to `translate` (a
    source prefix put in front here, a target prefix to `serving_prefix`)."""
    settings = case.settings
    found = spine.saved_model_translator(case).translate(
        spine.sentences(case),
        n_best=settings.n_best,
        source_prefix=settings.source_prefix,
        target_prefix=settings.target_prefix,
    )
    return Answer(
        [[h.text for h in hs] for hs in found],
        None,
        [np.array([h.score for h in hs], "float32") for hs in found],
    )


def litert_file(spine: Spine, case: Case) -> Answer:
    """`kt.serving.open` on the LiteRT file (`LiteRTTranslator`, LiteRT's interpreter with
    tensorflow-text's ops), the settings in the file: its texts (it gives no scores)."""
    translator = kt.serving.open(spine.litert(case))
    assert isinstance(translator, kt.serving.LiteRTTranslator), translator
    found = translator.translate(spine.sentences(case))
    return Answer([[h.text for h in hs] for hs in found], None, None)


def visualize(spine: Spine, case: Case) -> Answer:
    """`trainers.visualize`'s translation (`cross_attention`: the task's settings' search of
    one sentence, whose translation it feeds back for the attention it draws), sentence by
    sentence: its target pieces as ids, forced prefix included, EOS left out."""
    from trainers.visualize import cross_attention

    shared = spine.task(case.model)
    task = TransformerSeq2SeqLM(
        shared.backbone, shared.preprocessor, decoding=case.settings, compile=False
    )
    target = task.preprocessor.tokenizer.target
    rows = []
    for sentence in spine.sentences(case):
        source, pieces, weights = cross_attention(task, sentence, layer=-1)
        assert np.shape(weights)[1:] == (len(pieces), len(source)), np.shape(weights)
        ids = [int(target.token_to_id(piece)) for piece in pieces]
        rows.append([ids[: ids.index(EOS_ID)] if EOS_ID in ids else ids])
    return Answer(None, rows, None)


def every(settings: DecodingSettings) -> bool:
    return True


def one_best(settings: DecodingSettings) -> bool:
    return settings.n_best == 1


def n_best(settings: DecodingSettings) -> bool:
    return settings.n_best > 1


def prefixed(settings: DecodingSettings) -> bool:
    return settings.target_prefix is not None and settings.n_best == 1


def both_languages(settings: DecodingSettings) -> bool:
    return None not in (settings.source_prefix, settings.target_prefix) and settings.n_best == 1


def greedy(settings: DecodingSettings) -> bool:
    return settings.beam_size == 1 and settings.n_best == 1


# The rows a LiteRT file serves: a conversion each (the slowest export), so greedy search,
# beam search and NLLB-200's two languages; exact stopping and the target prefix row (beam
# search with a language code, the languages row's signature) are left to tests/test_litert.py.
LITERT_ROWS = ("greedy", "beam 4, alpha 0.6, early stopping", "source language")


def litert_rows(settings: DecodingSettings) -> bool:
    return any(SETTINGS[name].settings == settings for name in LITERT_ROWS)


def ctranslate2_search(settings: DecodingSettings) -> bool:
    """Greedy search, or CTranslate2's own beam search (`kt.export.ctranslate2`)."""
    native = (settings.ranking, settings.finish_rule, settings.stopping) == (
        "length",
        "fairseq",
        "k_finished",
    )
    return settings.beam_size == 1 or (native and settings.length_penalty > 0)


DOORS: dict[str, Door] = {
    "generate": Door(generate, every),
    "Translator": Door(translator, every),
    "serving_default": Door(text_signature("serving_default"), one_best),
    "serving_xla": Door(text_signature("serving_xla"), one_best),
    "translate_ids": Door(translate_ids, one_best),
    "n_best signature": Door(text_signature("n_best"), n_best),
    "serving_prefix": Door(text_signature("serving_prefix"), prefixed),
    "serving_languages": Door(text_signature("serving_languages"), both_languages),
    "trainers.evaluate": Door(evaluate, one_best),
    "SavedModelTranslator": Door(saved_model_translator, every),
    "trainers.visualize": Door(visualize, greedy),
    "CTranslate2, trainers.translate": Door(
        ctranslate2_command_line, ctranslate2_search, "ctranslate2"
    ),
    "CTranslate2, its client": Door(ctranslate2_client, ctranslate2_search, "ctranslate2"),
    "LiteRT file": Door(litert_file, litert_rows, "litert"),
}


# === The comparison ===


def reference(spine: Spine, setting: str, aspect: str) -> tuple[str, list | np.ndarray] | None:
    """The first door of ours (in DOORS' order) that serves the setting and shows `aspect`
    ("texts", "ids" or "scores"): `(its name, its values)`, or None."""
    settings = SETTINGS[setting].settings
    for name, door in DOORS.items():
        if door.engine != "ours" or not door.serves(settings):
            continue
        values = getattr(spine.answer(setting, name), aspect)
        if values is not None:
            return name, values
    return None


def parts_at_a_tie(spine: Spine, case: Case, row: int, ours, theirs) -> bool:
    """Whether CTranslate2's hypotheses `theirs` of sentence `row` may part from `ours` (ids,
    best first): in greedy search, where the model's logits of the two tokens that the
    first pair to differ takes are within ties.TIE; in beam search, where each is its own
    softmax's search but at a choice within ties.LAST_BITS or the length limit (tests/
    ties.py, which says why)."""
    source = spine.source_ids(case)[row : row + 1]
    source = source[:, : np.count_nonzero(source)]
    task = spine.task(case.model)

    def next_logits(prefixes):
        target = np.array(prefixes, "int32")
        return np.asarray(
            task({"source_ids": np.repeat(source, len(target), 0), "target_ids": target})
        )[:, -1]

    settings = case.settings
    if settings.beam_size > 1:
        limit = source.shape[1] + settings.max_extra_length
        return (
            ties.beam_parts_at_a_tie(
                next_logits,
                ours,
                theirs,
                beam_size=settings.beam_size,
                length_penalty=settings.length_penalty,
                limit=min(limit, task.backbone.config.max_length),
                n_best=settings.n_best,
            )
            is not None
        )
    for mine, other in zip(ours, theirs, strict=False):
        if mine == other:
            continue
        step = next(
            (t for t, (a, b) in enumerate(zip(mine, other, strict=False)) if a != b),
            min(len(mine), len(other)),
        )
        logits = next_logits([[BOS_ID, *mine[:step]]])[0]
        return ties.tokens_part_at_a_tie(logits, (mine + [EOS_ID])[step], (other + [EOS_ID])[step])
    return False


def ours_part_at_a_tie(spine: Spine, case: Case, row: int, ours, theirs) -> bool:
    """Whether two of our doors' hypotheses of sentence `row` (target ids as `Answer` holds
    them, forced prefix included, no EOS; best first) may differ: `ties.ours_part_at_a_tie`,
    greedy search parting at two tokens whose logits are within SCORE_TOLERANCE, or beam
    search, replayed with the settings (its rules, n-best, length limit and forced target
    prefix), meeting a choice within it."""
    settings, task = case.settings, spine.task(case.model)
    source = spine.source_ids(case)[row]  # the source prefix included
    source = source[: np.count_nonzero(source)]
    search = None
    if settings.beam_size > 1:
        prefix = prefix_ids(settings, task.preprocessor.tokenizer.target)
        search = {
            "beam_size": settings.beam_size,
            "length_penalty": settings.length_penalty,
            "limit": ties.length_limit(
                source, settings.max_extra_length, task.backbone.config.max_length
            ),
            "n_best": settings.n_best,
            "finish_rule": settings.finish_rule,
            "stopping": settings.stopping,
            "ranking": settings.ranking,
            "prefix": [] if prefix is None else np.asarray(prefix[0]).tolist(),
        }

    def rows(hypotheses) -> list[list[int]]:  # each ended by EOS, padded to one width
        rows = [[*h, EOS_ID] for h in hypotheses]
        width = max(map(len, rows))
        return [row + [0] * (width - len(row)) for row in rows]

    next_logits = ties.teacher_forced(task, source)
    return ties.ours_part_at_a_tie(next_logits, rows(ours), rows(theirs), search)


def our_ties(spine: Spine, setting: str, door: str, answer: Answer) -> set[int]:
    """The sentences where our door's texts or ids part from the first door's of ours that
    shows them (`reference`), each at a tie (`ours_part_at_a_tie`, texts tokenized back;
    an AssertionError naming the first that does not)."""
    case = SETTINGS[setting]
    sentences = spine.sentences(case)
    tied = set()
    for aspect in ("texts", "ids"):
        given, found = getattr(answer, aspect), reference(spine, setting, aspect)
        if given is None or found is None or found[0] == door:
            continue
        name, expected = found
        assert len(given) == len(expected) == len(sentences), (door, setting, aspect)
        for row, (a, b) in enumerate(zip(given, expected, strict=True)):
            if a == b:
                continue
            ids = (
                (a, b)
                if aspect == "ids"
                else ([target_ids(spine, case, text) for text in h] for h in (a, b))
            )
            assert ours_part_at_a_tie(spine, case, row, *ids), difference(
                setting, door, name, f"{aspect}, not at a tie", row, sentences[row], a, b
            )
            tied.add(row)
    return tied


def target_ids(spine: Spine, case: Case, text: str) -> list[int]:
    """A translation's target ids, as the target tokenizer cuts it (its prefix first)."""
    prefix = case.settings.target_prefix
    text = text if prefix is None else f"{prefix} {text}"
    tokenizer = spine.task(case.model).preprocessor.tokenizer.target
    ids = tokenizer.tokenize([text])  # a list (keras-hub's), or a ragged tensor (NLLB's)
    return list(ids.to_list()[0] if hasattr(ids, "to_list") else ids[0])


def ctranslate2_ties(spine: Spine, setting: str, door: str, answer: Answer) -> set[int]:
    """The sentences where CTranslate2's door parts from ours, each at a tie
    (`parts_at_a_tie`; an AssertionError naming the first that does not)."""
    case = SETTINGS[setting]
    sentences = spine.sentences(case)
    name, ours = reference(spine, setting, "ids")
    tied = set()
    for row in range(len(sentences)):
        differs = False
        for aspect in ("texts", "ids"):
            given, found = getattr(answer, aspect), reference(spine, setting, aspect)
            differs |= given is not None and found is not None and given[row] != found[1][row]
        if not differs:
            continue
        theirs = (
            answer.ids[row]
            if answer.ids is not None
            else [target_ids(spine, case, text) for text in answer.texts[row]]
        )
        assert parts_at_a_tie(spine, case, row, ours[row], theirs), difference(
            setting, door, name, "not at a tie", row, sentences[row], theirs, ours[row]
        )
        tied.add(row)
    return tied


def litert_ties(spine: Spine, setting: str, door: str, answer: Answer) -> set[int]:
    """The sentences where the LiteRT file's texts part from the first door's of ours that
    shows texts, each at a tie (an AssertionError naming the first that does not): one search
    in two engines whose logits differ in their last bits, tests/test_litert.py's rule
    (`ties.search_parts_at_a_tie`, as `ties.translations_part_at_a_tie` applies it): greedy,
    where the texts, tokenized back, first part, the model's logits of the two tokens within
    ties.TIE; beam, where the search replayed with the settings' rules meets a choice within
    ties.LAST_BITS."""
    case = SETTINGS[setting]
    settings, task = case.settings, spine.task(case.model)
    sentences = spine.sentences(case)
    name, expected = reference(spine, setting, "texts")
    assert len(answer.texts) == len(expected) == len(sentences), (door, setting)
    prefix = prefix_ids(settings, task.preprocessor.tokenizer.target)
    prefix = [] if prefix is None else np.asarray(prefix[0]).tolist()
    tied = set()
    for row, (theirs, ours) in enumerate(zip(answer.texts, expected, strict=True)):
        if theirs == ours:
            continue
        source = spine.source_ids(case)[row]  # the source prefix included
        source = source[: np.count_nonzero(source)]
        limit = ties.length_limit(
            source, settings.max_extra_length, task.backbone.config.max_length
        )
        parts = ties.search_parts_at_a_tie(
            ties.teacher_forced(task, source),
            target_ids(spine, case, ours[0]),
            target_ids(spine, case, theirs[0]),
            tolerance=ties.TIE if settings.beam_size == 1 else ties.LAST_BITS,
            beam_size=settings.beam_size,
            length_penalty=settings.length_penalty,
            limit=limit,
            finish_rule=settings.finish_rule,
            stopping=settings.stopping,
            ranking=settings.ranking,
            prefix=prefix,
        )
        assert parts, difference(
            setting, door, name, "texts, not at a tie", row, sentences[row], theirs, ours
        )
        tied.add(row)
    return tied


def score_bounds(settings: DecodingSettings, door: str, ids: list[list[int]]) -> tuple:
    """How far a door's scores of a sentence may lie from ours (its hypotheses' `ids`):
    `(low, high)`, arrays `[hypotheses]`."""
    if DOORS[door].engine != "ctranslate2":  # LiteRT's file gives no scores
        return -SCORE_TOLERANCE, SCORE_TOLERANCE
    length = np.array([len(hypothesis) + 1 for hypothesis in ids], "float32")  # EOS counted
    if settings.beam_size == 1:
        penalty = 1.0  # greedy search's scores: the summed log-probabilities
    else:  # CTranslate2's own ranking ("length")
        penalty = length**settings.length_penalty
    return -ROUNDING, SLIVER * length / penalty + ROUNDING


def difference(setting: str, door: str, name: str, aspect: str, row: int, sentence, a, b) -> str:
    return (
        f"{door} and {name} differ for the setting {setting!r} ({aspect}), first at sentence "
        f"{row} ({sentence!r}):\n  {door}: {a!r}\n  {name}: {b!r}"
    )


def assert_same(spine: Spine, setting: str, door: str) -> None:
    """The door's answer for the setting against the first door's of ours that shows each
    part of it (`reference`), but where it parts at a tie: CTranslate2's (`parts_at_a_tie`),
    LiteRT's (`litert_ties`, most rows alike) or ours (`ours_part_at_a_tie`, most rows
    alike)."""
    case = SETTINGS[setting]
    answer = spine.answer(setting, door)
    sentences = spine.sentences(case)
    if DOORS[door].engine == "ctranslate2":
        tied = ctranslate2_ties(spine, setting, door, answer)
    else:
        ties_of = litert_ties if DOORS[door].engine == "litert" else our_ties
        tied = ties_of(spine, setting, door, answer)
        assert len(sentences) - len(tied) > len(sentences) // 2, (setting, door, sorted(tied))
    for aspect in ("texts", "ids", "scores"):
        given, found = getattr(answer, aspect), reference(spine, setting, aspect)
        if given is None or found is None or found[0] == door:
            continue
        name, expected = found
        assert len(given) == len(expected) == len(sentences), (door, setting, aspect)
        for row, (a, b) in enumerate(zip(given, expected, strict=True)):
            if row in tied:
                continue
            if aspect != "scores":
                assert a == b, difference(setting, door, name, aspect, row, sentences[row], a, b)
                continue
            _, ids = reference(spine, setting, "ids")
            low, high = score_bounds(case.settings, door, ids[row])
            gap = np.asarray(a) - np.asarray(b)
            assert len(a) == len(b) and np.all((low <= gap) & (gap <= high)), difference(
                setting, door, name, f"scores, {low} to {high} apart", row, sentences[row], a, b
            )


PAIRS = [
    pytest.param(setting, door, id=f"{setting} | {door}")
    for setting, case in SETTINGS.items()
    for door, spec in DOORS.items()
    if spec.serves(case.settings)
]


@pytest.fixture(scope="module")
def spine(briefly_trained, tmp_path_factory):
    return Spine(briefly_trained, tmp_path_factory.mktemp("every-door"))


@pytest.mark.parametrize("setting, door", PAIRS)
def test_every_door_gives_the_same_translations(spine, setting, door):
    """The door's translations (text, ids, scores: those it shows) are those of the first
    door of ours that shows them, for the setting (the module doc)."""
    assert_same(spine, setting, door)


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_the_sentences_tell_the_settings_apart(spine, setting):
    """The comparisons can fail: the model translates the sentences into varied, non-empty
    text, and beam search finds other translations than greedy search for some of them, so
    that a door that ran another search would part from the others."""
    case = SETTINGS[setting]
    texts = [hypotheses[0] for hypotheses in spine.answer(setting, "generate").texts]
    assert all(texts) and len(set(texts)) > len(texts) // 2, texts
    if case.settings.beam_size > 1:
        greedy = dataclasses.replace(case.settings, beam_size=1, n_best=1)
        task = spine.task(case.model)
        task.compile(sampler=greedy)
        assert task.generate(spine.sentences(case)) != texts
    if case.settings.n_best > 1:
        best = spine.answer(setting, "generate").texts
        assert all(len(set(h)) == case.settings.n_best for h in best), best


def test_evaluate_scores_the_best_translation_where_the_settings_keep_an_n_best(spine, tmp_path):
    """A model directory whose settings keep an n-best (the count the SavedModel's `n_best`
    signature returns) is scored on its best translations, those of the same settings
    without it (`serving_default`'s); it failed with sacrebleu's TypeError on the lists.
    Its lines are generate's but where the best's search meets a tie (the module doc)."""
    import shutil

    from trainers.run_dir import RunDirectory

    directory = tmp_path / "n-best"
    shutil.copytree(spine.model_directory("bible"), directory)
    run = RunDirectory(directory)
    experiment = run.load_experiment()
    run.save_experiment(dataclasses.replace(experiment, decoding=DecodingSettings(n_best=2)))
    setting = "beam 4, alpha 0.6, early stopping"
    assert SETTINGS[setting].settings == DecodingSettings(n_best=2).replace(n_best=1)
    case = SETTINGS[setting]
    source = tmp_path / "source.txt"
    source.write_text("".join(f"{s}\n" for s in spine.sentences(case)))
    arguments = ["--source", source, "--reference", source, "--output", tmp_path / "out.hyp"]
    run_main("trainers.evaluate", "--model-dir", directory, *arguments)
    best = [hypotheses[0] for hypotheses in spine.answer(setting, "generate").texts]
    evaluated = (tmp_path / "out.hyp").read_text().splitlines()
    assert len(evaluated) == len(best)
    # Another graph than generate's (the model loaded from its directory, its own batches):
    # lines alike but where the best's search meets a tie (`ours_part_at_a_tie`, texts
    # tokenized back); most lines alike (all when written).
    tied = [row for row, (a, b) in enumerate(zip(evaluated, best, strict=True)) if a != b]
    for row in tied:
        ids = ([target_ids(spine, case, text)] for text in (evaluated[row], best[row]))
        sentence, mine, other = spine.sentences(case)[row], evaluated[row], best[row]
        assert ours_part_at_a_tie(spine, case, row, *ids), difference(
            setting, "evaluate", "generate", "not at a tie", row, sentence, mine, other
        )
    assert len(best) - len(tied) > len(best) // 2, tied

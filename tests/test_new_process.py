"""Every program and every kind of model directory, as users run them: each step in a process
of its own, on a directory that another process wrote. A class that only some other module's
import registers, or state that only the writing process holds, fails here.

The chain: `trainers.train` writes a run; `average_checkpoints`, `evaluate`, `export` (a
SavedModel and a CTranslate2 directory), `translate` (through both), `saved_model_cli` and
`visualize` read it; a preset is saved from it; `import_pretrained` writes an OPUS-MT and an
NLLB-200 model directory. Then a process with nothing but `import keras_transformer` (and
keras-hub) loads all four kinds through `TransformerSeq2SeqLM.from_preset` and keras-hub's
own `Seq2SeqLM.from_preset`, and the programs run on the imports too."""

import json
import shutil
from pathlib import Path

import pytest

from tests import ties
from tests.programs import ROOT, program, snippet

pytestmark = pytest.mark.slow

FIXTURES = ROOT / "tests" / "fixtures"
SENTENCES = ["In the beginning God created the heaven and the earth.", "Jesus wept."]
NLLB_SENTENCES = [f"eng_Latn {text}" for text in SENTENCES]


@pytest.fixture(scope="module")
def directories(tmp_path_factory, slice_run):
    """The four kinds of model directory, each written by a process of its own: the run a
    `trainers.train` process wrote (conftest's `slice_run`: 20 updates on the training
    slice, a copy), a preset saved from it, an OPUS-MT and an NLLB-200 import."""
    tmp = tmp_path_factory.mktemp("new-process")
    shutil.copytree(slice_run, tmp / "run")
    snippet(
        "import sys, keras_transformer as kt\n"
        "task = kt.models.TransformerSeq2SeqLM.from_preset(sys.argv[1])\n"
        "task.save_to_preset(sys.argv[2])",
        tmp / "run",
        tmp / "preset",
    )
    program(
        "trainers.import_pretrained", FIXTURES / "marian" / "shared", "--model-dir", tmp / "marian"
    )
    nllb = FIXTURES / "m2m100" / "nllb-tiny"
    program(
        "trainers.import_pretrained",
        nllb,
        "--model-dir",
        tmp / "nllb",
        "--target-language",
        "spa_Latn",
    )
    return {name: tmp / name for name in ("run", "preset", "marian", "nllb")}


LOAD_EVERY_KIND = """
import json, sys
import keras_hub
import keras_transformer

answers = {}
for kind, directory, sentences in json.loads(sys.argv[1]):
    ours = keras_transformer.models.TransformerSeq2SeqLM.from_preset(directory)
    theirs = keras_hub.models.Seq2SeqLM.from_preset(directory)
    assert type(theirs) is type(ours), type(theirs)
    answers[kind] = [ours.generate(sentences), theirs.generate(sentences)]
print(json.dumps(answers))
"""


def test_a_new_process_loads_every_kind_of_directory_with_the_package_alone(directories):
    """`import keras_transformer` (not `keras_transformer.models`) is all keras-hub's loader
    needs, for a run directory, a preset, an OPUS-MT import and an NLLB-200 import."""
    kinds = [
        [kind, str(path), NLLB_SENTENCES if kind == "nllb" else SENTENCES]
        for kind, path in directories.items()
    ]
    answers = json.loads(snippet(LOAD_EVERY_KIND, json.dumps(kinds)).stdout.splitlines()[-1])
    assert set(answers) == set(directories)
    for kind, (ours, theirs) in answers.items():
        assert len(ours) == 2 and all(isinstance(text, str) for text in ours), kind
        assert ours == theirs, kind
    assert all(text.split()[0] != "spa_Latn" for text in answers["nllb"][0])


@pytest.mark.exact
def test_the_programs_run_on_a_run_directory_another_process_wrote(directories, tmp_path):
    run_dir = directories["run"]
    program("trainers.average_checkpoints", "--model-dir", run_dir, "--last", "2")
    assert (run_dir / "model.averaged.keras").exists()
    source = tmp_path / "source.txt"
    source.write_text("\n".join(SENTENCES) + "\n")
    scored = tmp_path / "scored.txt"
    # Greedy search, which CTranslate2 runs as ours (an untrained model's beams are near
    # ties): the SavedModel's lines are evaluate's (one engine, another graph: but where a
    # line first parts at two tokens whose logits are within SCORE_TOLERANCE, one line at
    # most; none when written); CTranslate2's are too, but where a line first parts at a tie
    # of the model's logits (greedy's tie rule, tests/ties.py: within TIE).
    common = ["--model-dir", run_dir, "--model", "model.averaged.keras", "--beam-size", "1"]
    program(
        "trainers.evaluate", *common, "--source", source, "--reference", source, "--output", scored
    )
    program("trainers.export", *common, "--out", tmp_path / "sm")
    program("trainers.export", *common, "--format", "ctranslate2", "--out", tmp_path / "ct2")
    expected = scored.read_text().splitlines()
    served = program(
        "trainers.translate", "--model", tmp_path / "sm", input=source.read_text()
    ).stdout
    assert len(served.splitlines()) == len(SENTENCES)
    parted = [
        (sentence, ours, theirs)
        for sentence, theirs, ours in zip(SENTENCES, served.splitlines(), expected, strict=True)
        if theirs != ours
    ]
    for sentence, ours, theirs in parted:
        assert parts_at_a_tie(run_dir, sentence, ours, theirs, tie=ties.SCORE_TOLERANCE), parted
    assert len(parted) <= 1, parted
    served = program(
        "trainers.translate", "--model", tmp_path / "ct2", input=source.read_text()
    ).stdout
    assert len(served.splitlines()) == len(SENTENCES)
    for sentence, theirs, ours in zip(SENTENCES, served.splitlines(), expected, strict=True):
        assert theirs == ours or parts_at_a_tie(run_dir, sentence, ours, theirs), (ours, theirs)
    version = next(p for p in (tmp_path / "sm").iterdir() if p.name.isdigit())
    shown = program(
        "trainers.saved_model_cli",
        "run",
        "--dir",
        version,
        "--tag_set",
        "serve",
        "--signature_def",
        "serving_default",
        "--input_exprs",
        f"text={json.dumps(SENTENCES[:1])}",
    )
    assert "Result for output key translation:" in shown.stdout
    png = tmp_path / "attention.png"
    program("trainers.visualize", "--model-dir", run_dir, "--text", SENTENCES[1], "--out", png)
    assert png.read_bytes().startswith(b"\x89PNG")


def parts_at_a_tie(
    run_dir: Path, sentence: str, ours: str, theirs: str, tie: float = ties.TIE
) -> bool:
    """Greedy's tie rule (tests/ties.py) for two translations of `sentence` by the run's
    averaged model: the texts back to ids with the run's target vocabulary, the model teacher
    forced for its logits where they first part, within `tie` (TIE between two engines,
    SCORE_TOLERANCE within ours)."""
    import keras
    import numpy as np

    from trainers.run_dir import RunDirectory

    model = keras.saving.load_model(run_dir / "model.averaged.keras")
    vocabularies = RunDirectory(run_dir).load_vocabularies()
    source = np.asarray(vocabularies.source.tokenize(sentence)).tolist()
    source_ids = np.array([source[: model.config.max_length - 1] + [ties.EOS_ID]])

    def next_logits(prefixes):
        inputs = {
            "source_ids": np.repeat(source_ids, len(prefixes), 0),
            "target_ids": np.array(prefixes),
        }
        return np.asarray(model(inputs))[:, -1]

    mine, other = (
        np.asarray(vocabularies.target.tokenize(text)).tolist() for text in (ours, theirs)
    )
    return ties.greedy_parts_at_a_tie(next_logits, mine, other, tie=tie)


@pytest.mark.exact
def test_the_programs_run_on_an_nllb_import_another_process_wrote(directories, tmp_path):
    """NLLB-200's tokenizer (a class of its own, with its language codes) loads in the
    processes of evaluate, export and translate (Marian's loads in the test above). The
    SavedModel's lines are evaluate's (one engine, another graph), but where the search,
    replayed with the directory's settings, meets a choice within SCORE_TOLERANCE
    (`ties.translations_part_at_a_tie`); one of the two at most (none when written)."""
    model_dir = directories["nllb"]
    lines = NLLB_SENTENCES
    source = tmp_path / "source.txt"
    source.write_text("\n".join(lines) + "\n")
    scored = tmp_path / "scored.txt"
    arguments = ["--source", source, "--reference", source, "--output", scored]
    program("trainers.evaluate", "--model-dir", model_dir, *arguments)
    program("trainers.export", "--model-dir", model_dir, "--out", tmp_path / "sm")
    served = program(
        "trainers.translate", "--model", tmp_path / "sm", input=source.read_text()
    ).stdout
    served, evaluated = served.splitlines(), scored.read_text().splitlines()
    assert len(served) == len(evaluated) == len(lines)
    parted = [(a, b) for a, b in zip(evaluated, served, strict=True) if a != b]
    if parted:
        import keras

        import keras_transformer as kt
        from trainers.run_dir import RunDirectory

        run = RunDirectory(model_dir)
        model, vocabularies = keras.saving.load_model(run.model()), run.load_vocabularies()
        settings = kt.models.TransformerSeq2SeqLM.from_preset(model_dir).decoding
        for sentence, mine, other in zip(lines, evaluated, served, strict=True):
            assert mine == other or ties.translations_part_at_a_tie(
                model,
                vocabularies,
                settings,
                sentence,
                mine,
                other,
                tolerance=ties.SCORE_TOLERANCE,
            ), (sentence, mine, other)
    assert len(parted) <= 1, parted


REGISTERED = """
import json, sys
import importlib, keras
import keras_transformer
names = sys.argv[1:]
for name in names:
    importlib.import_module(name)  # nothing, where only `import keras_transformer` ran
ours = [name for name in keras.saving.get_custom_objects() if name.startswith("keras_transformer>")]
print(json.dumps(sorted(ours)))
"""


def test_the_package_alone_registers_every_class_any_module_registers():
    """A saved file (a `.keras` file, a preset's config.json, a vocabulary's pieces.json) can
    name any class that any module of the library registers: the package import registers
    them all, in a process that imported nothing else of ours."""
    from tests.doctests import module_names

    every = [name for name in module_names() if not name.endswith("__main__")]
    alone = json.loads(snippet(REGISTERED).stdout.splitlines()[-1])
    everything = json.loads(snippet(REGISTERED, *every).stdout.splitlines()[-1])
    assert "keras_transformer>NllbTokenizer" in everything
    assert "keras_transformer>TransformerSeq2SeqLM" in everything
    assert alone == everything, sorted(set(everything) - set(alone))


def test_the_vocabulary_of_an_nllb_import_loads_in_a_new_process(directories):
    """The failure users hit first (`unknown tokenizer 'keras_transformer>NllbTokenizer'`):
    `kt.text.Vocabularies.load` of the import's tokenizer assets, in a process that imported
    nothing but the package."""
    code = (
        "import sys, keras_transformer as kt\n"
        "vocabularies = kt.text.Vocabularies.load(sys.argv[1])\n"
        "print(type(vocabularies.source).__name__)"
    )
    assets = Path(directories["nllb"]) / "assets" / "tokenizer"
    assert snippet(code, assets).stdout.splitlines()[-1] == "NllbTokenizer"

"""The command-line programs, run as users run them (separate processes): train on a slice of
the bundled corpus, resume, average, evaluate, export and translate; MirroredStrategy on two
logical CPUs; MultiWorkerMirroredStrategy with two workers on 127.0.0.1; bad input."""

import functools
import json
import re
import socket
import subprocess
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from tests import programs
from tests.cli import run_main

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "bible-en-es"

pytestmark = pytest.mark.slow


MAX_LENGTH = 48
SHORT_PAIRS, OVER_LONG_PAIRS = 596, 4


@functools.cache
def slice_pairs() -> tuple[tuple[str, str], ...]:
    """The training slice: SHORT_PAIRS verses that fit in MAX_LENGTH tokens and
    OVER_LONG_PAIRS passages that do not, whatever vocabulary is learned on them.

    A verse fits when neither side is longer than MAX_LENGTH - 2 characters: every character
    of the training text is a piece of the vocabulary (character coverage 1.0), so a sentence
    of n characters is at most n + 1 pieces (with the word-boundary mark), plus EOS. A passage
    (four verses joined) has at least MAX_LENGTH words a side, and a piece never spans two
    words.
    """
    from tests import bible

    corpus = bible.pairs("train")
    train = list(zip(corpus.sources, corpus.targets, strict=True))
    limit = MAX_LENGTH - 2
    short = [p for p in train if len(p[0]) <= limit and len(p[1]) <= limit][:SHORT_PAIRS]
    passages = [
        tuple(" ".join(side) for side in zip(*train[i : i + 4], strict=True))
        for i in range(0, 4 * OVER_LONG_PAIRS, 4)
    ]
    assert len(short) == SHORT_PAIRS
    assert all(len(side.split()) >= MAX_LENGTH for pair in passages for side in pair)
    pairs = list(short)
    for index, passage in enumerate(passages):  # spread through the file
        pairs.insert(150 * index + 75, passage)
    return tuple(pairs)


DEV_PAIRS = 24


def tsv(path: Path, pairs) -> Path:
    lines = "".join(f"{source}\t{target}\n" for source, target in pairs)
    path.write_text("en\tes\n" + lines, encoding="utf-8")
    return path


def max_side(pair) -> int:
    return max(len(side) for side in pair)


def slice_config(tmp_path, dev: bool = True, **training) -> Path:
    """A tiny experiment on the training slice; quick, and still learning. The dev split is
    the DEV_PAIRS shortest dev verses (validation under XLA compiles each of its shapes);
    `dev=False`: no dev split (no validation, no dev BLEU), for tests that look at training
    alone."""
    from tests import bible

    train = tsv(tmp_path / "train.tsv", slice_pairs())
    dev_file = None
    if dev:
        dev_pairs = bible.pairs("dev")
        pairs = sorted(zip(dev_pairs.sources, dev_pairs.targets, strict=True), key=max_side)
        dev_file = tsv(tmp_path / "dev.tsv", pairs[:DEV_PAIRS])
    steps = {"steps": 40, "steps_per_epoch": 20, **training}
    text = f"""
model: {{preset: tiny, max_length: {MAX_LENGTH}, num_encoder_layers: 1, num_decoder_layers: 1}}
data:
  format: tsv
  train: {train}
  dev: {dev_file or "null"}
  test: {DATA / "test.tsv.xz"}
  source_language: en
  target_language: es
  vocab_size: 500
  tokens_per_batch: 512
training:
  warmup_steps: 20
  bleu_max_sentences: 10
  keep_checkpoints: 2
{chr(10).join(f"  {key}: {value}" for key, value in steps.items())}
"""
    path = tmp_path / "slice.yaml"
    path.write_text(text)
    return path


# The uninterrupted run that resumed runs must equal (conftest's `uninterrupted`).
RESUME_REFERENCE = dict(
    dev=False,
    steps=40,
    steps_per_epoch=20,
    deterministic="true",
    jit_compile="false",  # XLA would compile every length bucket again in each process
)


def train_cli(config, model_dir, *args, check=True):
    """`trainers.train`; without a config (None), the model directory's own experiment."""
    configs = () if config is None else ("--config", config)
    return programs.program(
        "trainers.train", *configs, "--model-dir", model_dir, *args, check=check
    )


def start_training(config, model_dir, *args, env=None) -> subprocess.Popen:
    """`trainers.train` in a process of its own, quiet, with its output piped (`env`: the
    variables it gets over the test environment)."""
    command = ["-m", "trainers.train", "--config", config, "--model-dir", model_dir]
    return programs.start(*command, "--verbose", "0", *args, env=env)


def git_commit() -> str:
    return programs.run(["git", "-C", ROOT, "rev-parse", "HEAD"]).stdout.strip()


def summary_line(output: str) -> dict:
    line = next(line for line in output.splitlines() if line.startswith("summary: "))
    return json.loads(line.removeprefix("summary: "))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A model directory trained on the slice with the default strategy, updates of two
    batches and dev BLEU every 16 updates, whose experiment records a length penalty for
    evaluate and export. Without XLA, which would compile each of the six length buckets, a
    minute of this run's 100 s (training under XLA, the default: tests/test_wmt14_recipe.py)."""
    tmp = tmp_path_factory.mktemp("run")
    config = slice_config(
        tmp, jit_compile="false", gradient_accumulation_steps=2, bleu_every_steps=16
    )
    result = train_cli(
        config, tmp / "model", "--verbose", "2", "--set", "decoding.length_penalty=0.8"
    )
    return tmp / "model", config, result


@pytest.mark.exact
def test_training_writes_the_run_and_its_summary(trained):
    model_dir, _, result = trained
    summary = json.loads((model_dir / "train_summary.json").read_text())
    assert summary["strategy"] == "default" and summary["replicas"] == 1
    assert summary["jit_compile"] is False and summary["steps"] == 40
    assert summary["final_loss"] < summary["initial_loss"]  # no margin
    assert summary["tokens_per_second"] > 0 and summary["train_seconds"] > 0
    data = summary["data"]
    assert (data["kept"], data["too_long"]) == (SHORT_PAIRS, OVER_LONG_PAIRS)
    assert data["pairs"] == SHORT_PAIRS + OVER_LONG_PAIRS == len(slice_pairs())
    assert summary["dev"]["sentences"] == 10 and "nrefs:1" in summary["dev"]["bleu_signature"]
    assert sorted(p.name for p in (model_dir / "checkpoints").iterdir()) == [
        "ckpt-00000020.weights.h5",
        "ckpt-00000040.weights.h5",
    ]
    for name in ("experiment.yaml", "vocab/shared.model", "model.keras", "logs"):
        assert (model_dir / name).exists(), name
    assert summary["code"]["git"]["commit"] == git_commit()
    assert summary["code"]["packages"]["tensorflow"] == metadata.version("tensorflow")
    assert (
        f"over-long pairs (> {MAX_LENGTH} tokens) skipped: {OVER_LONG_PAIRS} of {data['pairs']}; "
        f"kept {data['target_tokens']} target tokens"
    ) in result.stdout


def test_the_same_command_again_does_not_retrain(trained):
    model_dir, config, _ = trained
    before = (model_dir / "model.keras").stat().st_mtime_ns
    # In this process: the run is found finished before anything process-wide is set.
    result = run_main("trainers.train", "--config", config, "--model-dir", model_dir)
    assert "already holds this run, trained for 40 steps" in result.stdout
    assert (model_dir / "model.keras").stat().st_mtime_ns == before


def test_another_experiment_in_the_same_directory_is_refused(trained):
    model_dir, config, _ = trained
    result = run_main(  # in this process: refused before anything process-wide is set
        "trainers.train", "--config", config, "--model-dir", model_dir, "--set",
        "model.d_ff=256", check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "belongs to another experiment (model.d_ff: 512 there, 256 here)" in result.stderr


def test_averaging_the_last_checkpoints(trained):
    import keras

    import keras_transformer  # noqa: F401

    model_dir, _, _ = trained
    run_main("trainers.average_checkpoints", "--model-dir", model_dir, "--last", "2")
    averaged = keras.saving.load_model(model_dir / "model.averaged.keras")
    checkpoints = []
    for name in ("ckpt-00000020.weights.h5", "ckpt-00000040.weights.h5"):
        averaged.load_weights(model_dir / "checkpoints" / name)
        checkpoints.append([w.numpy() for w in averaged.weights])
    averaged = keras.saving.load_model(model_dir / "model.averaged.keras")
    for weight, first, second in zip(averaged.weights, *checkpoints, strict=True):
        np.testing.assert_allclose(weight.numpy(), (first + second) / 2, rtol=1e-6, atol=1e-7)
    result = run_main(
        "trainers.average_checkpoints", "--model-dir", model_dir, "--last", "3", "--overwrite",
        check=False,
    )  # fmt: skip
    assert result.returncode == 2 and "has 2 checkpoints; --last 3 needs that many" in result.stderr
    # The average saved is kept, unless --overwrite asks for it to be replaced.
    saved = model_dir / "model.averaged.keras"
    before = saved.stat().st_ino
    again = ("trainers.average_checkpoints", "--model-dir", model_dir, "--last", "2")
    result = run_main(*again, check=False)
    assert result.returncode == 2 and f"{saved} exists (a model saved before)" in result.stderr
    assert saved.stat().st_ino == before
    run_main(*again, "--overwrite")
    assert saved.stat().st_ino != before  # renamed over it, complete
    assert len(keras.saving.load_model(saved).weights) == len(averaged.weights)


def test_evaluate_scores_the_test_split_with_sacrebleu(trained):
    import sacrebleu

    from tests import bible

    model_dir, _, _ = trained
    result = run_main(
        "trainers.evaluate",
        "--model-dir",
        model_dir,
        "--split",
        "test",
        "--limit",
        "12",
        "--beam-size",
        "2",
    )
    scores = json.loads(result.stdout[result.stdout.index("{") :])
    assert scores["sentences"] == 12 and scores["beam_size"] == 2  # the flag
    assert scores["length_penalty"] == 0.8 and scores["stopping"] == "early"  # the directory's
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    hypotheses = (model_dir / "eval" / "model" / "test.hyp").read_text(encoding="utf-8")
    hypotheses = hypotheses.split("\n")
    assert len(hypotheses) == 13 and hypotheses[-1] == ""  # one a line
    # The scores are sacrebleu's, of the written hypotheses against the untouched references.
    references = list(bible.pairs("test").targets[:12])
    bleu = sacrebleu.corpus_bleu(hypotheses[:-1], [references]).score
    chrf = sacrebleu.corpus_chrf(hypotheses[:-1], [references]).score
    assert (scores["bleu"], scores["chrf"]) == (round(bleu, 2), round(chrf, 2))
    assert json.loads((model_dir / "eval" / "model" / "test.json").read_text()) == scores
    assert scores["code"]["git"]["commit"] == git_commit()
    assert scores["code"]["packages"]["sacrebleu"] == sacrebleu.__version__


def test_evaluate_own_files(trained, tmp_path):
    model_dir, _, _ = trained
    (tmp_path / "src.txt").write_text("God said.\nAmen.\n")
    (tmp_path / "ref.txt").write_text("Dijo Dios.\nAmén.\n")
    result = run_main(
        "trainers.evaluate",
        "--model-dir",
        model_dir,
        "--source",
        tmp_path / "src.txt",
        "--reference",
        tmp_path / "ref.txt",
        "--output",
        tmp_path / "out.hyp",
        "--stopping",
        "early",
    )
    summary = json.loads(result.stdout)  # the scores alone: the progress bar is on stderr
    assert summary["sentences"] == 2 and summary["stopping"] == "early"
    assert len((tmp_path / "out.hyp").read_text().splitlines()) == 2
    own = ("--source", tmp_path / "src.txt", "--reference", tmp_path / "ref.txt")
    quantized = run_main(
        "trainers.evaluate", "--model-dir", model_dir, *own, "--output", tmp_path / "int8.hyp",
        "--quantize", "int8", "--finish-rule", "fairseq",
    )  # fmt: skip
    summary = json.loads(quantized.stdout)  # the flags, over the directory's settings
    assert (summary["quantize"], summary["finish_rule"]) == ("int8", "fairseq")
    # A source file named as a split: its results do not take the split's files.
    (tmp_path / "test").write_text("God said.\n")
    (tmp_path / "test.ref").write_text("Dijo Dios.\n")
    sources = ("--source", tmp_path / "test", "--reference", tmp_path / "test.ref")
    run_main("trainers.evaluate", "--model-dir", model_dir, *sources)
    own = model_dir / "eval" / "model"  # model.keras's results
    assert json.loads((own / "source-test.json").read_text())["sentences"] == 1
    split = own / "test.json"
    assert not split.exists() or json.loads(split.read_text())["data"] == "test"


def test_each_model_file_keeps_its_own_evaluation(trained):
    """The README's `evaluate --split test` (model.keras) after `make demo`'s `--model
    model.averaged.keras`, each in a process of its own: each model file's hypotheses and
    scores stay, in its own folder of eval/, and an export's manifest takes its own model's.
    The same model file scored again replaces its own; an --output whose scores are another
    model's is refused and kept."""
    from trainers.run_dir import RunDirectory

    model_dir, _, _ = trained
    if not (model_dir / "model.averaged.keras").exists():  # test_averaging... makes it
        run_main("trainers.average_checkpoints", "--model-dir", model_dir, "--last", "2")
    split = ("trainers.evaluate", "--model-dir", model_dir, "--split", "test")
    programs.program(*split, "--model", "model.averaged.keras", "--limit", "4")
    averaged = model_dir / "eval" / "model.averaged"
    kept = {path.name: path.read_bytes() for path in averaged.iterdir()}
    assert sorted(kept) == ["test.hyp", "test.json"]
    programs.program(*split, "--limit", "4")  # the README's command: model.keras
    assert {path.name: path.read_bytes() for path in averaged.iterdir()} == kept
    own = json.loads((model_dir / "eval" / "model" / "test.json").read_text())
    assert (own["model"], own["sentences"]) == ("model.keras", 4)
    metrics = RunDirectory(model_dir).metrics("model.averaged.keras")  # the export's manifest
    assert metrics["eval/model.averaged/test.json"]["model"] == "model.averaged.keras"
    assert {record.get("model") for record in metrics.values()} == {"model.averaged.keras", None}
    run_main(*split, "--limit", "2")  # the same model file again: its own, replaced
    assert json.loads((model_dir / "eval" / "model" / "test.json").read_text())["sentences"] == 2
    result = run_main(*split, "--limit", "2", "--output", averaged / "test.hyp", check=False)
    assert result.returncode == 2, result.stderr
    assert "test.json holds the scores of model.averaged.keras in" in result.stderr
    assert {path.name: path.read_bytes() for path in averaged.iterdir()} == kept


def test_the_ranking_flags_reach_evaluate_and_both_exports(trained, tmp_path):
    """`--ranking length` over the directory's "gnmt": in evaluate's scores, in the SavedModel's
    manifest (with `--stopping k_finished`), and in the CTranslate2 directory's, which
    `trainers.translate` then runs in a process of its own with CTranslate2's own ranking."""
    model_dir, _, _ = trained
    result = run_main(
        "trainers.evaluate", "--model-dir", model_dir, "--split", "test", "--limit", "4",
        "--beam-size", "2", "--ranking", "length", "--output", tmp_path / "eval.hyp",
    )  # fmt: skip
    scores = json.loads(result.stdout[result.stdout.index("{") :])
    assert (scores["ranking"], scores["length_penalty"]) == ("length", 0.8)
    run_main(
        "trainers.export", "--model-dir", model_dir, "--out", tmp_path / "saved",
        "--beam-size", "2", "--ranking", "length", "--stopping", "k_finished",
    )  # fmt: skip
    manifest = json.loads((tmp_path / "saved" / "1" / "assets.extra" / "manifest.json").read_text())
    assert (manifest["decoding"]["ranking"], manifest["decoding"]["stopping"]) == (
        "length",
        "k_finished",
    )
    pytest.importorskip("ctranslate2")  # installed by `make test` (requirements.txt)
    run_main(
        "trainers.export", "--model-dir", model_dir, "--out", tmp_path / "ct2",
        "--format", "ctranslate2", "--beam-size", "2", "--ranking", "length",
    )  # fmt: skip
    decoding = json.loads((tmp_path / "ct2" / "manifest.json").read_text())["decoding"]
    assert decoding["ranking"] == "length"
    assert decoding["ctranslate2_options"]["length_penalty"] == 0.8  # the directory's alpha
    translated = programs.program(
        "trainers.translate", "--model", tmp_path / "ct2", input="God is love.\n", timeout=300
    )
    assert len(translated.stdout.splitlines()) == 1, translated


@pytest.mark.parametrize(
    "program, args, message",
    [
        ("evaluate", ["--split", "test", "--beam-size", "0"], "--beam-size: 0 must be >= 1"),
        ("evaluate", ["--split", "test", "--limit", "0"], "--limit: 0 must be >= 1"),
        ("evaluate", ["--split", "test", "--output", "x.json"], "the scores go to NAME.json"),
        ("export", ["--out", "x", "--length-penalty", "-1"], "--length-penalty: -1 must be >="),
        ("export", ["--out", "x", "--ranking", "wu"], "--ranking: invalid choice: 'wu'"),
        ("export", ["--out", str(ROOT / "README.md" / "x")], "README.md is a file, not a folder"),
        (
            "evaluate",
            ["--split", "test", "--output", str(ROOT / "README.md" / "x")],
            "README.md is a file, not a folder",
        ),
        ("visualize", ["--text", "x", "--out", "x.txt"], "the heat map is a PNG file"),
        ("average_checkpoints", ["--output", "model.keras"], "other than model.keras"),
        (
            "average_checkpoints",
            ["--output", "model.pretrained.keras", "--overwrite"],
            "and model.pretrained.keras, an imported one",
        ),
    ],
)
def test_bad_flags_are_refused_before_any_work(trained, program, args, message):
    model_dir, _, _ = trained
    saved = (model_dir / "model.keras").read_bytes()
    result = run_main(f"trainers.{program}", "--model-dir", model_dir, *args, check=False)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert (model_dir / "model.keras").read_bytes() == saved


def test_translate_refuses_an_output_it_cannot_write_in_one_line(tmp_path):
    """Before the model loads: a file in the way of --output's folders, or a folder named
    as --output, is one line naming the user's path (not a traceback, nor the temporary
    file written beside it)."""
    file = tmp_path / "README.md"
    file.write_text("mine")
    model = ("--model", tmp_path / "no-model")
    under = run_main("trainers.translate", *model, "--output", file / "x", check=False)
    assert under.returncode == 2
    assert under.stderr == (
        f"python -m trainers.translate: error: --output {file / 'x'}: {file} is a file, not a "
        "folder\n"
    )
    folder = run_main("trainers.translate", *model, "--output", tmp_path, check=False)
    assert folder.returncode == 2
    assert folder.stderr == (
        f"python -m trainers.translate: error: --output {tmp_path}: is a folder; name a file\n"
    )
    assert file.read_text() == "mine" and sorted(tmp_path.iterdir()) == [file]


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """The trained directory exported as a SavedModel (`trainers.export`): its folder."""
    model_dir, _, _ = trained
    out = tmp_path_factory.mktemp("export") / "saved_models" / "slice"
    run_main("trainers.export", "--model-dir", model_dir, "--out", out, "--stopping", "early")
    return out


def test_export_then_translate_through_the_saved_model(trained, exported, tmp_path):
    model_dir, _, _ = trained
    out = exported
    manifest = json.loads((out / "1" / "assets.extra" / "manifest.json").read_text())
    assert manifest["decoding"]["stopping"] == "early"
    assert manifest["decoding"]["length_penalty"] == 0.8  # the directory's decoding section
    assert manifest["decoding"]["beam_size"] == 4
    assert manifest["experiment"]["model"]["preset"] == "tiny"
    assert manifest["metrics"]["train_summary.json"]["steps"] == 40
    assert (out / "keras" / "model.keras").exists() and (out / "keras" / "vocab").is_dir()
    lines = [
        "In the beginning, God created the heavens and the earth.",
        "",
        "Amen.",
        "x" * 5000,
        "A fourth line.",
    ]
    (tmp_path / "input.txt").write_text("\n".join(lines) + "\n")
    result = run_main(
        "trainers.translate",
        "--saved-model",
        out,
        "--input",
        tmp_path / "input.txt",
        "--batch-size",
        "2",
        "--with-scores",
    )
    translations = result.stdout.splitlines()
    assert len(translations) == len(lines)
    assert all(np.isfinite(float(line.split("\t")[0])) for line in translations)
    assert translations[1] == "0.0000\t"  # nothing to translate: empty, with score 0
    # An --output file is replaced only once every line is translated; never the --input.
    saved = tmp_path / "saved.txt"
    saved.write_text("an earlier output\n")
    inputs = ("--saved-model", out, "--input", tmp_path / "input.txt")
    failed = run_main(
        "trainers.translate", *inputs, "--output", saved, "--n-best", "9", check=False
    )
    assert failed.returncode == 2 and "keeps 4 hypotheses" in failed.stderr
    assert saved.read_text() == "an earlier output\n"
    assert sorted(p.name for p in tmp_path.glob("*saved.txt")) == ["saved.txt"]  # no partial
    same = run_main("trainers.translate", *inputs, "--output", tmp_path / "input.txt", check=False)
    assert same.returncode == 2 and "is the --input file" in same.stderr
    assert (tmp_path / "input.txt").read_text() == "\n".join(lines) + "\n"
    run_main("trainers.translate", *inputs, "--output", saved)
    assert saved.read_text().splitlines() == [line.split("\t")[1] for line in translations]
    # Missing folders are made, as trainers.evaluate makes them.
    nested = tmp_path / "new" / "folder" / "out.txt"
    run_main("trainers.translate", *inputs, "--output", nested)
    assert nested.read_text() == saved.read_text()
    # An existing version is not overwritten unless asked, and says so.
    again = run_main("trainers.export", "--model-dir", model_dir, "--out", out, "--version", "1",
                     check=False)  # fmt: skip
    assert again.returncode == 2 and again.stderr == (
        f"python -m trainers.export: error: --out {out}: {out / '1'} exists (an earlier export): "
        "--overwrite replaces it once the new export is complete, or give another --out\n"
    )


LIMITED_FILE_SIZE = """
import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))  # a disk that fills at 64 KiB
sys.argv = ["trainers.export", *sys.argv[1:]]
runpy.run_module("trainers.export", run_name="__main__", alter_sys=True)
"""


def test_an_export_the_disk_refuses_is_one_line_and_keeps_the_earlier(trained, exported, tmp_path):
    """A write refused after --out's checks passed (a file-size limit stands for a full
    disk: Python ignores SIGXFSZ, so a write fails) is one line, `PROG: error: --out OUT:
    cannot write the export: REASON`, exit status 2, no traceback; the earlier export
    stays byte for byte and nothing is left beside it."""
    import shutil

    model_dir, _, _ = trained
    out = tmp_path / "slice"
    shutil.copytree(exported, out)
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    result = programs.snippet(
        LIMITED_FILE_SIZE, "--model-dir", model_dir, "--out", out, "--version", "1",
        "--overwrite", check=False, timeout=600,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    last = result.stderr.splitlines()[-1]
    assert f"error: --out {out}: cannot write the export: " in last, result.stderr[-3000:]
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before
    assert sorted(tmp_path.iterdir()) == [out]


@pytest.mark.exact
def test_evaluate_scores_what_the_exported_saved_model_serves(trained, exported, tmp_path):
    """The same model directory, the same settings (experiment.yaml's): every translation
    that evaluate scores is the one the SavedModel that export wrote serves, and so is the
    BLEU. (After its 40 updates the slice's model says little: tests/test_import_marian.py
    holds the same to an imported model's sentences.) Two graphs of one engine, over batches
    of other widths, on a model trained in the run: a line may differ only where the search,
    replayed (`ties.replay_beam`, the directory's settings), meets a choice within
    SCORE_TOLERANCE (`ties.translations_part_at_a_tie`); most lines alike (all when
    written)."""
    import keras

    import keras_transformer  # noqa: F401  (registers the classes that load_model needs)
    from keras_transformer import evaluation
    from tests import bible, ties
    from trainers.run_dir import RunDirectory

    model_dir, _, _ = trained
    sentences = 40
    result = run_main(
        "trainers.evaluate",
        "--model-dir",
        model_dir,
        "--split",
        "test",
        "--limit",
        sentences,
        "--output",
        tmp_path / "evaluated.hyp",
    )
    scores = json.loads(result.stdout)
    manifest = json.loads((exported / "1" / "assets.extra" / "manifest.json").read_text())
    for setting in ("beam_size", "length_penalty", "stopping", "finish_rule"):
        assert scores[setting] == manifest["decoding"][setting], setting
    test = bible.pairs("test").take(sentences)
    (tmp_path / "test.en").write_text("".join(s + "\n" for s in test.sources), encoding="utf-8")
    run_main(
        "trainers.translate",
        "--saved-model",
        exported,
        "--input",
        tmp_path / "test.en",
        "--output",
        tmp_path / "served.hyp",
    )
    evaluated = (tmp_path / "evaluated.hyp").read_text(encoding="utf-8").splitlines()
    served = (tmp_path / "served.hyp").read_text(encoding="utf-8").splitlines()
    assert len(served) == len(evaluated) == sentences
    if served != evaluated:
        run = RunDirectory(model_dir)
        model = keras.saving.load_model(run.model())
        vocabularies = run.load_vocabularies()
        settings = run.load_experiment().decoding.replace(n_best=1)  # evaluate's best
        for sentence, mine, other in zip(test.sources, evaluated, served, strict=True):
            assert mine == other or ties.translations_part_at_a_tie(
                model, vocabularies, settings, sentence, mine, other, tolerance=ties.SCORE_TOLERANCE
            ), (sentence, mine, other)
    assert sum(a == b for a, b in zip(served, evaluated, strict=True)) > sentences // 2
    assert evaluation.score(evaluated, test.targets)["bleu"] == scores["bleu"]


def test_the_model_directory_is_a_keras_hub_preset(trained, tmp_path):
    """trainers.train writes its model directory as a keras-hub preset beside model.keras;
    a directory written before (no preset) is evaluated from model.keras as it was."""
    import shutil

    import keras
    import keras_hub

    import keras_transformer as kt
    from tests.test_run_dir import PRESET_FILES

    model_dir, _, _ = trained
    for name in PRESET_FILES:
        assert (model_dir / name).exists(), name
    expected = keras.saving.load_model(model_dir / "model.keras").get_weights()
    for task in (
        kt.models.TransformerSeq2SeqLM.from_preset(model_dir),
        keras_hub.models.Seq2SeqLM.from_preset(str(model_dir)),
    ):
        assert isinstance(task, kt.models.TransformerSeq2SeqLM)
        assert task.decoding == kt.decoding.DecodingSettings(length_penalty=0.8)
        for ours, theirs in zip(task.backbone.get_weights(), expected, strict=True):
            np.testing.assert_array_equal(ours, theirs)
    old = tmp_path / "old"  # as trainers.train wrote it before the preset
    old.mkdir()
    shutil.copytree(model_dir / "vocab", old / "vocab")
    for name in ("experiment.yaml", "model.keras"):
        shutil.copy(model_dir / name, old / name)
    limit = ("--split", "test", "--limit", "12")
    for directory in (model_dir, old):
        output = ("--output", tmp_path / f"{directory.name}.hyp")
        run_main("trainers.evaluate", "--model-dir", directory, *limit, *output)
    assert (tmp_path / "old.hyp").read_text() == (tmp_path / "model.hyp").read_text()
    old_scores = json.loads((tmp_path / "old.json").read_text())
    new_scores = json.loads((tmp_path / "model.json").read_text())
    assert old_scores["bleu"] == new_scores["bleu"] and old_scores["length_penalty"] == 0.8


def test_visualize_draws_one_heat_map_per_head(trained, tmp_path):
    import matplotlib.image

    model_dir, _, _ = trained
    out = tmp_path / "attention.png"
    result = run_main(
        "trainers.visualize",
        "--model-dir",
        model_dir,
        "--text",
        "God said.",
        "--out",
        out,
        "--layer",
        "0",
    )
    heads, target, source = re.search(r"(\d+) heads, (\d+) x (\d+) pieces", result.stdout).groups()
    assert heads == "4"
    # Translated as evaluate and export translate: the directory's decoding settings.
    assert "(beam 4, length penalty 0.8, early stopping)" in result.stdout
    # A 2 x 2 grid of heat maps, each sized by the longer of the two piece sequences.
    side = int(2 * (0.28 * max(int(target), int(source)) + 2) * 100)
    assert matplotlib.image.imread(out).shape == (side, side, 4)
    result = run_main(
        "trainers.visualize",
        "--model-dir",
        model_dir,
        "--text",
        "x",
        "--out",
        out,
        "--layer",
        "1",
        check=False,
    )
    assert result.returncode == 2 and "--layer=1: the decoder has 1 layer (0 to 0" in result.stderr


@pytest.mark.parametrize("text", ["", " \t "])
def test_visualize_refuses_blank_text_before_any_work(tmp_path, text):
    """Nothing to translate draws nothing: refused naming the flag, where a 1 x 1 picture
    was drawn (issue 66); before the model directory is read (argparse's refusal: in this
    process, `run_main`)."""
    out = tmp_path / "attention.png"
    args = ("--model-dir", tmp_path / "run", "--text", text, "--out", out)
    result = run_main("trainers.visualize", *args, check=False)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()[-1:]  # one line: the parser's refusal
    assert line.startswith("python -m trainers.visualize: error: ")
    assert f"--text {text!r}: nothing to translate; give a sentence" in line
    assert not out.exists()


@pytest.mark.exact
def test_mirrored_strategy_on_two_logical_cpus(tmp_path, capsys):
    # No dev split: validation under MirroredStrategy is test_model's
    # test_fit_and_evaluate_report_the_loss_per_token[mirrored].
    config = slice_config(tmp_path, dev=False, steps=20, steps_per_epoch=10)
    result = train_cli(
        config, tmp_path / "model", "--strategy", "mirrored", "--cpu-devices", "2", "--verbose", "0"
    )
    summary = summary_line(result.stdout)
    assert summary["strategy"] == "mirrored" and summary["replicas"] == 2
    assert summary["jit_compile"] is False  # XLA cannot span CPU devices
    assert summary["steps"] == 20 and summary["final_loss"] < summary["initial_loss"]
    # Refused before any work (in this process, which has two logical CPUs too).
    from trainers import train

    sets = ["--set", "training.jit_compile=true", "--set", "training.fast=false"]
    code = train.main(
        ["--config", str(config), "--model-dir", str(tmp_path / "xla"), "--strategy", "mirrored"]
        + sets
    )
    assert code == 2
    assert "jit_compile=true does not work with 2 replicas on CPU devices" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "xla").exists() or not any((tmp_path / "xla").iterdir())


@pytest.mark.exact
def test_gradient_accumulation_counts_optimizer_updates(trained):
    _, _, result = trained
    summary = summary_line(result.stdout)
    assert summary["steps"] == 40  # updates; 80 batches went through, 40 an epoch
    assert "40/40" in result.stdout
    assert summary["final_loss"] < summary["initial_loss"]
    # Dev BLEU at updates 16 and 32 and at the end, not once a batch of each update.
    assert re.findall(r"step (\d+): dev BLEU", result.stdout) == ["16", "32", "40"]


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_a_bad_corpus_fails_before_anything_is_written(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_bytes(b"en\tes\nGod said.\tDijo Dios.\nAmen\xff.\tAmen.\n")
    config = tmp_path / "bad.yaml"
    config.write_text(f"model: {{preset: tiny}}\ndata: {{train: {bad}, vocab_size: 300}}\n")
    # In this process: refused while reading the corpus, before anything process-wide is set.
    result = run_main(
        "trainers.train", "--config", config, "--model-dir", tmp_path / "model", check=False
    )
    assert result.returncode == 2
    assert f"{bad}:3: invalid UTF-8 at byte 5 (0xff)" in result.stderr
    assert not (tmp_path / "model").exists()


def test_misaligned_text_files_are_reported_by_name(tmp_path):
    (tmp_path / "train.en").write_text("one\ntwo\nthree\n")
    (tmp_path / "train.es").write_text("uno\ndos\n")
    config = tmp_path / "text.yaml"
    config.write_text(
        f"model: {{preset: tiny}}\ndata: {{format: text, train: "
        f"{tmp_path / 'train'}, vocab_size: 300}}\n"
    )
    result = run_main(  # in this process, as above
        "trainers.train", "--config", config, "--model-dir", tmp_path / "model", check=False
    )
    assert result.returncode == 2
    assert "train.en has 3 lines but" in result.stderr and "train.es has 2" in result.stderr
    assert not (tmp_path / "model").exists()


def test_evaluate_says_what_it_wrote_and_draws_no_bar_into_a_pipe(tmp_path):
    """trainers.evaluate, its stderr a pipe (a log file, CI): the hypotheses and scores it
    wrote are named, as the other programs name theirs, on stderr (stdout holds the scores'
    JSON alone), and no progress bar is drawn: Keras's carriage returns and colour codes
    would stay in the log."""
    from tests.test_run_dir import trained_directory

    run_dir, model = trained_directory(tmp_path)
    run_dir.save_trained(model, run_dir.load_vocabularies())
    result = programs.program(
        "trainers.evaluate", "--model-dir", tmp_path, "--split", "test", "--limit", "2",
        "--beam-size", "1",
    )  # fmt: skip
    hypotheses = tmp_path / "eval" / "model" / "test.hyp"
    assert f"wrote {hypotheses} and {hypotheses.with_suffix('.json')}" in result.stderr.splitlines()
    assert "\r" not in result.stderr and "\x1b" not in result.stderr, result.stderr
    assert json.loads(result.stdout)["data"] == "test"
    assert len(hypotheses.read_text().splitlines()) == 2

"""The console scripts of pyproject.toml (`kt-train`...): each names a `main` of trainers/
that takes no argument (as a console script calls it) and returns the exit status, and
prints its usage under the name it was run by. A mistyped path is refused before TensorFlow
starts, and the wheel carries the shipped configs that `kt-train --config NAME` names."""

import argparse
import importlib
import inspect
import json
import re
import shutil
import sys
import types
import zipfile
from pathlib import Path

import pytest

from tests import programs

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"


def scripts() -> dict[str, str]:
    """pyproject.toml's `[project.scripts]` table, read line by line (tomllib is Python
    3.11's; the project runs on 3.10)."""
    table = PYPROJECT.read_text().split("\n[project.scripts]\n", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^([\w-]+) = "([\w.]+:\w+)"$', table, re.M))


SCRIPTS = scripts()


def target(script: str):
    module, _, attribute = SCRIPTS[script].partition(":")
    return getattr(importlib.import_module(module), attribute)


def test_every_program_of_trainers_has_a_script():
    programs = {value.partition(":")[0] for value in SCRIPTS.values()}
    assert len(SCRIPTS) == 8 and all(script.startswith("kt-") for script in SCRIPTS)
    assert {
        "trainers.train",
        "trainers.evaluate",
        "trainers.export",
        "trainers.translate",
        "trainers.visualize",
        "trainers.average_checkpoints",
        "trainers.import_pretrained",
    } <= programs


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_script_calls_a_main_without_arguments_that_returns_the_status(script):
    main = target(script)
    assert callable(main)
    inspect.signature(main).bind()  # a console script calls main() and exits with its value
    assert inspect.signature(main).return_annotation in (int, "int")


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_a_script_prints_its_usage(script, capsys):
    with pytest.raises(SystemExit) as exit_status:
        target(script)(["--help"])
    assert exit_status.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_the_usage_names_the_command_the_user_ran(script, capsys, monkeypatch):
    module = SCRIPTS[script].partition(":")[0]
    ran = {  # sys.argv[0] -> the name in the usage line
        f"/usr/local/bin/{script}": script,
        str(ROOT / (module.replace(".", "/") + ".py")): f"python -m {module}",  # python -m
    }
    for argv0, name in ran.items():
        monkeypatch.setattr(sys, "argv", [argv0, "--help"])
        with pytest.raises(SystemExit):
            target(script)(["--help"])
        assert capsys.readouterr().out.startswith(f"usage: {name} "), argv0


# Every program of trainers/: the modules that run as `python -m trainers.NAME`.
PROGRAMS = sorted(
    f"trainers.{path.stem}"
    for path in (ROOT / "trainers").glob("*.py")
    if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8")
)


def test_every_script_is_a_program():
    assert {value.partition(":")[0] for value in SCRIPTS.values()} <= set(PROGRAMS)


@pytest.mark.parametrize("module", PROGRAMS)
def test_ctrl_c_is_one_line_and_exit_status_130(module, capsys, monkeypatch):
    """Ctrl-C anywhere in a program's `main` (here: as it reads its flags) ends it with the
    line `interrupted` and status 130 (`trainers.errors.program`), no traceback."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", interrupted)
    try:
        status = importlib.import_module(module).main(["--help"])
    except KeyboardInterrupt:  # not let out: pytest would stop the whole run
        pytest.fail(f"{module}.main let the KeyboardInterrupt out (a traceback)")
    assert status == 130
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "interrupted\n")


@pytest.mark.parametrize("module", PROGRAMS)
def test_sigterm_takes_ctrl_c_s_way_out_and_ends_the_process_as_sigterm(module, monkeypatch):
    """SIGTERM anywhere in a program's `main` (here: as it reads its flags) is raised there,
    so that its `finally` blocks remove what it half wrote (`trainers.errors.program`), then
    ends the process as SIGTERM ends it (stood in for: this is pytest's process); SIGTERM's
    handler is the default again afterwards."""
    import signal

    from trainers import errors

    def terminated(*args, **kwargs):
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler), "SIGTERM's default would end the process, half-written files"
        handler(signal.SIGTERM, None)  # as `kill PID` calls it

    ended = []
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", terminated)
    monkeypatch.setattr(errors, "_end_as_terminated", lambda: ended.append(True) or 143)
    assert importlib.import_module(module).main(["--help"]) == 143 and ended == [True]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def run_program(module: str, *args, cwd=ROOT):
    """`python -m MODULE ARGS` in a new process: (exit status, stderr, the heavy modules it
    had imported when it ended)."""
    return run_programs((module, *args), cwd=cwd)[0]


def run_programs(*runs, cwd=ROOT) -> list[tuple]:
    """`python -m MODULE ARGS` for each `(MODULE, *ARGS)` of `runs`, in turn in one new
    process (`programs.programs_imports`): for each, (exit status, stderr, the heavy
    modules imported when it ended, by it or a run before it)."""
    done = programs.programs_imports(runs, cwd=cwd, env={"PYTHONPATH": ROOT}, timeout=300)
    return [(result.returncode, result.stderr, heavy) for result, heavy in done]


def test_a_bad_argument_is_one_line_naming_it_and_exit_status_2():
    """argparse's refusals, as every program's parser (`trainers.flags.ArgumentParser`)
    writes them: `PROG: error: MESSAGE` and a pointer to `--help` in one line, not the usage
    block before it; exit status 2, before TensorFlow starts."""
    # import_marian last: it imports import_pretrained, which runpy would then run again.
    modules = sorted(PROGRAMS, key=lambda module: module == "trainers.import_marian")
    cases = [  # a required flag missing, mostly; saved_model_cli's command unknown
        (module, "no-such-command" if module.endswith("saved_model_cli") else "--no-such-flag")
        for module in modules
    ]
    cases.append(("trainers.saved_model_cli",))  # no command
    translate = ("trainers.translate", "--model", ROOT, "--batch-size", "0")
    reports = run_programs(*cases, translate)
    for (module, *_), (status, stderr, heavy) in zip([*cases, translate], reports, strict=True):
        prog = f"python -m {module}"
        assert (status, heavy) == (2, []), (module, stderr)
        assert len(stderr.splitlines()) == 1, (module, stderr)
        assert stderr.startswith(f"{prog}: error: "), (module, stderr)
        assert stderr.endswith(f" ({prog} --help lists the flags)\n"), (module, stderr)
    assert reports[-1][1] == (
        "python -m trainers.translate: error: argument --batch-size: 0 must be >= 1 "
        "(python -m trainers.translate --help lists the flags)\n"
    )


def test_a_missing_path_is_refused_before_tensorflow_starts(tmp_path):
    """Each program given a path that is not there: one line naming it, exit status 2, and
    neither TensorFlow nor Keras nor the library imported (about half a minute saved). The
    line names the program as its flags' refusals do (`PROG: error: MESSAGE`), the alias
    trainers.import_marian by its own name."""
    missing = tmp_path / "missing"
    trained = tmp_path / "trained"  # written by this process, read by the program's
    trained.mkdir()
    (trained / "experiment.yaml").write_text("model: {}\n")
    (trained / "model.keras").write_bytes(b"")  # there: the programs stop before reading it
    cases = [
        (("trainers.evaluate", "--model-dir", missing, "--split", "test"), f"{missing}"),
        (
            (
                "trainers.evaluate",
                "--model-dir",
                trained,
                "--model",
                "model.averaged.keras",
                "--split",
                "test",
            ),
            "no model.averaged.keras",
        ),
        (
            (
                "trainers.evaluate",
                "--model-dir",
                trained,
                "--model",
                "model.keras",
                "--source",
                missing,
                "--reference",
                missing,
            ),
            f"--source {missing}",
        ),
        (("trainers.export", "--model-dir", missing, "--out", tmp_path / "out"), f"{missing}"),
        (("trainers.import_pretrained", missing, "--model-dir", tmp_path / "x"), f"{missing}"),
        (("trainers.import_marian", missing, "--model-dir", tmp_path / "x"), f"{missing}"),
        (("trainers.translate", "--model", missing), f"--model {missing}"),
        (("trainers.translate", "--model", trained, "--input", missing), f"--input {missing}"),
        (
            ("trainers.visualize", "--model-dir", missing, "--text", "x", "--out", missing),
            f"{missing}",
        ),
        (("trainers.average_checkpoints", "--model-dir", missing), f"{missing}"),
        (("trainers.train", "--config", missing, "--model-dir", missing), f"--config {missing}"),
        (("trainers.train", "--model-dir", missing), f"--model-dir {missing}"),
    ]
    # One process runs them in turn (one Python start-up, where each took its own).
    reports = run_programs(*(args for args, _ in cases))
    for (args, named), (status, stderr, heavy) in zip(cases, reports, strict=True):
        assert status == 2, (args, stderr)
        assert len(stderr.splitlines()) == 1, (args, stderr)
        assert stderr.startswith(f"python -m {args[0]}: error: "), (args, stderr)
        assert named in stderr, (args, stderr)
        assert heavy == [], (args, heavy)


def test_a_saved_model_is_never_replaced_by_an_average(tmp_path):
    """docs/guides/training.md: a program never replaces what is saved. An average already
    there, under the default name or --output's, is refused in one line (exit status 2) before
    TensorFlow starts, and kept; --overwrite replaces it (tests/test_trainer.py)."""
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    (model_dir / "experiment.yaml").write_text("model: {}\n")
    for name in ("model.averaged.keras", "mine.keras"):
        (model_dir / name).write_bytes(b"saved before")
    outputs = (("model.averaged.keras", ()), ("mine.keras", ("--output", "mine.keras")))
    average = ("trainers.average_checkpoints", "--model-dir", model_dir, "--last", "5")
    reports = run_programs(*((*average, *output) for _, output in outputs))
    for (name, _), (status, stderr, heavy) in zip(outputs, reports, strict=True):
        assert (status, heavy) == (2, []), stderr
        assert stderr.splitlines() == [
            f"python -m trainers.average_checkpoints: error: {model_dir / name} exists (a model "
            "saved before): give another --output NAME.keras, or --overwrite to replace it"
        ]
        assert (model_dir / name).read_bytes() == b"saved before"


def test_an_evaluation_never_replaces_another_models_scores(tmp_path):
    """An --output whose scores (NAME.json) are another model file's, or not an evaluation's,
    is refused in one line before TensorFlow starts, and kept (the default names are each
    model file's own: tests/test_trainer.py)."""
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    (model_dir / "experiment.yaml").write_text("model: {}\n")
    (model_dir / "model.keras").write_bytes(b"")  # there: refused before it is read
    another = {"model": "model.averaged.keras", "model_dir": str(model_dir), "bleu": 12.1}
    cases = [
        (another, f"holds the scores of model.averaged.keras in {model_dir}; name another"),
        ({"model": "model.keras", "model_dir": str(tmp_path / "other")}, "model.keras in"),
        (["not", "scores"], "is there and is not trainers.evaluate's scores"),
    ]
    evaluate = ("trainers.evaluate", "--model-dir", model_dir, "--split", "test", "--output")
    for index, (record, _) in enumerate(cases):  # an --output a case, in one process
        (tmp_path / f"scored{index}.json").write_text(json.dumps(record))
    reports = run_programs(*((*evaluate, tmp_path / f"scored{i}.hyp") for i in range(len(cases))))
    for index, ((record, message), report) in enumerate(zip(cases, reports, strict=True)):
        status, stderr, heavy = report
        scores = tmp_path / f"scored{index}.json"
        assert (status, heavy) == (2, []), stderr
        assert len(stderr.splitlines()) == 1 and stderr.startswith(
            f"python -m trainers.evaluate: error: --output {tmp_path / f'scored{index}.hyp'}: "
            f"{scores} "
        )
        assert message in stderr, stderr
        assert json.loads(scores.read_text()) == record


def test_a_hugging_face_id_is_not_refused_as_a_missing_path(tmp_path):
    """`hf://ORG/NAME` is no local path: the import's own reader takes it (or refuses it)."""
    status, stderr, _ = run_program(
        "trainers.import_pretrained", "hf://org/name", "--model-dir", tmp_path / "x"
    )
    assert "no such checkpoint directory" not in stderr, stderr


def test_saved_model_cli_help_exits_0_without_tensorflow():
    status, stderr, heavy = run_program("trainers.saved_model_cli", "--help")
    assert status == 0 and heavy == [], stderr


@pytest.mark.slow
def test_the_wheel_ships_the_configs_that_an_installed_kt_train_names(tmp_path):
    """A wheel built from the sources holds trainers/configs/*.yaml; installed (with its
    console scripts) and run outside the checkout, `kt-train --config demo` reads the
    shipped demo.yaml, and the usage names kt-train."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in ("keras_transformer", "trainers"):
        shutil.copytree(
            ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    pip = ["pip", "--disable-pip-version-check", "-q"]
    build = ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", tmp_path / "dist"]
    programs.program(*pip, *build, source, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    configs = sorted(ROOT.glob("trainers/configs/*.yaml"))
    shipped = [n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("trainers/configs/")]
    assert shipped == [f"trainers/configs/{p.name}" for p in configs] and configs
    site = tmp_path / "site"
    install = ["install", "--no-deps", "--no-index", "--target", site, wheel]
    programs.program(*pip, *install, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    kt_train = site / "bin" / "kt-train"

    def run(*args):
        return programs.run(
            [kt_train, *args], cwd=elsewhere, env={"PYTHONPATH": site}, timeout=300, check=False
        )

    usage = run("--help")
    assert usage.returncode == 0 and usage.stdout.startswith("usage: kt-train "), usage.stderr
    assert "base_wmt14, big_wmt14, demo, small" in " ".join(usage.stdout.split())
    trained = run("--config", "demo", "--model-dir", "runs/demo", "--set", "data.train=mine.tsv")
    # demo.yaml read from the installed package: its data.train, set here, is looked for
    assert trained.returncode == 2 and trained.stderr.strip().endswith("mine.tsv: no such file")
    unknown = run("--config", "tiny", "--model-dir", "runs/tiny")
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == (
        "kt-train: error: --config tiny: no such file, nor a shipped config of that name "
        "(base_wmt14, big_wmt14, demo, small)"
    )


def test_average_checkpoints_reports_a_folder_in_place_of_a_file_in_one_line(tmp_path):
    """Bad inputs of trainers.average_checkpoints that were tracebacks or messages of several
    lines: an --output that is a folder (even with --overwrite: before TensorFlow starts), a
    checkpoint that is a folder (once the model is built), an experiment.yaml that is not
    YAML. One line each, `PROG: error: ...`, naming the flag or file; nothing written."""
    average = "python -m trainers.average_checkpoints: error:"
    from tests.test_run_dir import trained_directory

    model_dir = tmp_path / "run"
    model_dir.mkdir()
    trained_directory(model_dir)  # experiment.yaml and vocab/, as trainers.train writes them
    (model_dir / "folder.keras").mkdir()
    status, stderr, heavy = run_program(
        "trainers.average_checkpoints", "--model-dir", model_dir, "--last", "1",
        "--output", "folder.keras", "--overwrite",
    )  # fmt: skip
    assert (status, heavy) == (2, [])
    assert stderr == f"{average} --output folder.keras: {model_dir / 'folder.keras'} is a folder\n"
    checkpoint = model_dir / "checkpoints" / "ckpt-00000001.weights.h5"
    checkpoint.mkdir(parents=True)
    status, stderr, _ = run_program(
        "trainers.average_checkpoints", "--model-dir", model_dir, "--last", "1"
    )
    assert status == 2
    assert stderr == f"{average} {checkpoint}: a folder, not a checkpoint file\n"
    assert not (model_dir / "model.averaged.keras").exists()
    # An experiment.yaml that is not YAML: the parser's message, in one line.
    experiment = model_dir / "experiment.yaml"
    experiment.write_text(experiment.read_text() + "model: [\n")
    status, stderr, _ = run_program(
        "trainers.average_checkpoints", "--model-dir", model_dir, "--last", "1"
    )
    assert status == 2
    assert stderr.startswith(f"{average} {experiment}: not valid YAML: ")
    assert stderr.endswith(")\n")
    assert len(stderr.splitlines()) == 1, stderr


# "line" where a sentence to translate is meant: the programs say "sentence" for that, and
# "line" for a line of a file alone (one sentence a line, line 3 is not UTF-8).
LINE_FOR_SENTENCE = re.compile(
    r"source lines?\b|lines? translated|every line is translated|translate lines"
    r"|gives one (translation|hypothesis) a line|hypotheses a line",
    re.IGNORECASE,
)


@pytest.mark.parametrize("module", sorted({v.partition(":")[0] for v in SCRIPTS.values()}))
def test_the_help_says_sentence_for_a_sentence_and_line_for_a_line(module):
    """Each program's --help (in a process of its own, as a user reads it), and the
    runtimes' refusals of --n-best, which trainers.translate prints."""
    result = programs.program(module, "--help", env={"COLUMNS": "1000"}, timeout=300)
    assert LINE_FOR_SENTENCE.findall(result.stdout) == [], result.stdout
    if module == "trainers.translate":
        from keras_transformer.serving import LiteRTTranslator, SavedModelTranslator

        litert = LiteRTTranslator.n_best_problem(None, 2)
        saved = SavedModelTranslator.n_best_problem(
            types.SimpleNamespace(target_prefix=None), 2, target_prefix="spa_Latn"
        )
        assert "sentences translated at once" in result.stdout
        assert (litert, saved) == (
            "a LiteRT file gives one translation a sentence",
            "a target prefix gives one hypothesis a sentence (the serving_prefix signature)",
        )

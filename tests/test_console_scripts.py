"""The console scripts of pyproject.toml (`kt-train`...): each names a `main` of trainers/
that takes no argument (as a console script calls it) and returns the exit status; those
that parse their own arguments print their usage."""

import importlib
import inspect
import re
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def scripts() -> dict[str, str]:
    """pyproject.toml's `[project.scripts]` table, read line by line (tomllib is Python
    3.11's; the project runs on 3.10)."""
    table = PYPROJECT.read_text().split("\n[project.scripts]\n", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^([\w-]+) = "([\w.]+:\w+)"$', table, re.M))


SCRIPTS = scripts()
# Runs TensorFlow's saved_model_cli on sys.argv: no arguments of its own to parse.
WITHOUT_ARGV = {"kt-saved-model-cli"}


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


@pytest.mark.parametrize("script", sorted(set(SCRIPTS) - WITHOUT_ARGV))
def test_a_script_prints_its_usage(script, capsys):
    with pytest.raises(SystemExit) as exit_status:
        target(script)(["--help"])
    assert exit_status.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")

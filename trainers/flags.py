"""The programs' parser and the types of their flags: a bad value is refused by argparse in
one line (exit status 2, with the flag named) before any work. Plain Python:
`trainers.translate` runs without TensorFlow."""

from __future__ import annotations

import argparse
import contextvars
import os
import sys
from pathlib import Path

# The `prog` of the parser that parsed the running program's flags (`program_name`).
_parsed_by: contextvars.ContextVar[str | None] = contextvars.ContextVar("parsed_by", default=None)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, with a bad argument reported in one line, `PROG: error: MESSAGE
    (PROG --help lists the flags)`, and exit status 2 (`errors.EXIT_USER_ERROR`), instead
    of the usage block before the message: the line names the argument, and the usage is
    one `--help` away. Every program's parser is one. Parsing records its `prog`, with which
    `errors.fail` names the program in the refusals that come after the flags
    (`program_name`)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the flags)\n")

    def parse_known_args(self, args=None, namespace=None):
        parsed = super().parse_known_args(args, namespace)
        _parsed_by.set(self.prog)
        return parsed


def program_name() -> str | None:
    """The name of the program whose flags were parsed last (in this thread), as its parser's
    refusals give it: `python -m trainers.export`, `kt-export`; None before any were."""
    return _parsed_by.get()


def at_least(minimum, kind=int):
    """An argparse `type` that reads `kind` (int or float) and refuses values below
    `minimum`."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            noun = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if not value >= minimum:  # NaN included
            raise argparse.ArgumentTypeError(f"{text} must be >= {minimum}")
        return value

    parse.__name__ = kind.__name__  # argparse's messages name the type
    return parse


positive_int = at_least(1)
non_negative_int = at_least(0)
non_negative_float = at_least(0.0, float)


def creatable(path) -> str | None:
    """Why `path` (a file or folder to write, with any folders missing above it) cannot be
    created, naming the file in its way or the folder that cannot be written; None if it
    can. For the programs' output flags, checked before any work: `--output README.md/x`
    is refused in one line, not by the traceback of a write that fails later."""
    for folder in Path(path).parents:
        if folder.exists():
            if not folder.is_dir():
                return f"{folder} is a file, not a folder"
            if not os.access(folder, os.W_OK | os.X_OK):
                return f"cannot write in {folder}"
            return None
        if folder.is_symlink():
            return f"{folder} is a broken link"
    return None


def add_length_penalty(parser, ranking_note: str = "") -> None:
    """`--length-penalty` and `--ranking`, the two flags of the length penalty that evaluate
    and export share (`ranking_note`: what the ranking means for a program's own format)."""
    parser.add_argument(
        "--length-penalty",
        type=non_negative_float,
        help="alpha of the length penalty, ((5 + length) / 6) ** alpha or length ** alpha "
        "(--ranking) (default: the directory's decoding.length_penalty, else 0.6)",
    )
    parser.add_argument(
        "--ranking",
        choices=("gnmt", "length"),
        help="the length penalty's form: gnmt, ((5 + length) / 6) ** alpha, or length, "
        "length ** alpha as CTranslate2 and transformers rank, length counting EOS (default: "
        f"the directory's decoding.ranking, else gnmt{ranking_note})",
    )


def non_blank(text: str) -> str:
    """A flag's text that must hold something (a prefix: leave the flag out for none)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be blank (leave the flag out for none)")
    return text


def add_prefixes(parser, defaults: str = "the directory's decoding") -> None:
    """`--target-prefix` and `--source-prefix`, the two languages' flags (an NLLB-200
    model's codes) that evaluate, export and translate share; `defaults` says whose settings
    they override."""
    parser.add_argument(
        "--target-prefix",
        type=non_blank,
        help="text every translation starts with: an NLLB-200 model's target language code, "
        f"e.g. spa_Latn (default: {defaults}.target_prefix, else none)",
    )
    parser.add_argument(
        "--source-prefix",
        type=non_blank,
        help="text put at the start of every source sentence that does not start with a "
        "language code already: an NLLB-200 model's source language code, e.g. eng_Latn, or "
        f"a multilingual OPUS-MT model's >>spa<< (default: {defaults}.source_prefix, else "
        "none)",
    )


def prog(module: str) -> str:
    """The name a program's usage line gives it: the command the user ran, `kt-translate`
    when it runs as its console script (pyproject.toml's `[project.scripts]`), else
    `python -m trainers.translate` (`module`). argparse's own default would be the file's
    name, `translate.py`, which is no command."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    name = name.removesuffix(".exe")  # a console script's launcher on Windows
    return name if name.startswith("kt-") else f"python -m {module}"


def first_missing(*named) -> str | None:
    """`FLAG PATH: no such file or folder` for the first `(flag, path)` pair whose path is
    given (not None) and does not exist, or None. The programs check their input paths
    with it before they import TensorFlow, so that a mistyped path costs no start-up."""
    for flag, path in named:
        if path is not None and not os.path.exists(path):
            return f"{flag} {path}: no such file or folder"
    return None

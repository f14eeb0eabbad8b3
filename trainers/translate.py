"""Translate sentences, one a line, with an exported model:
`python -m trainers.translate --model saved_models/NAME [--input FILE] [--n-best K]`.

Reads sentences one a line (stdin by default; lines end at "\\n" only, a CRLF's "\\r" is
dropped), writes one translation a line (stdout by default), in batches. The decoding
settings are the export's (`trainers.export`). --model (or its older name --saved-model) is either

- a TF Serving SavedModel (`trainers.export`): a version folder, or the model folder whose
  highest version is used. It needs nothing but tensorflow and tensorflow_text, like TF
  Serving: the tokenizer and the beam search are inside the SavedModel; or
- a CTranslate2 directory (`trainers.export --format ctranslate2`). It needs nothing but
  ctranslate2 and sentencepiece, and decodes as the SavedModel does; or
- a LiteRT file (`trainers.export --format litert`: OUT/model.tflite, or OUT). It runs with
  ai-edge-litert's interpreter and tensorflow-text's ops, neither TensorFlow nor Keras
  imported; an NLLB-200 file takes language codes as prefixes (`--source-prefix eng_Latn
  --target-prefix spa_Latn`), other files none; no --n-best yet.

The translators are the library's: its table of formats (`keras_transformer.serving.formats`,
as `kt.serving.open` reads it) picks `SavedModelTranslator`, `CTranslate2Translator` or
`LiteRTTranslator` by what --model holds; this program reads and writes the lines around
them. For a CTranslate2 directory or a LiteRT file it loads that package alone, without the
rest of the library: neither TensorFlow nor Keras is imported.

--source-prefix puts text in front of each source sentence that does not start with a language
code (NLLB-200's source language, `--source-prefix eng_Latn`; a multilingual OPUS-MT model's
`>>spa<<`), over the export's; --target-prefix starts every translation with text (NLLB-200's
target language, `--target-prefix fra_Latn`), over the export's (a SavedModel takes it through
its `serving_prefix` signature). A language code the vocabulary lacks is refused before the
model loads.

With --n-best K, each sentence gets its K best hypotheses, best first, as
`INDEX ||| TRANSLATION ||| SCORE` lines (the n-best format of Moses and Marian; INDEX counts
the sentences, the input's lines, from 0).

Input must be UTF-8: a line that is not is refused (exit status 2), naming the file (or
stdin) and the line, and nothing is written to --output; a file is checked whole before the
model loads. `--errors replace` translates such lines instead, their bad bytes read as U+FFFD,
with a warning that names the first one. With --output, a SIGTERM or Ctrl-C removes the
partial output and leaves an existing file as it was; the process then ends as SIGTERM ends
it (exit status 143 in a shell), or after Ctrl-C prints `interrupted` (exit status 130).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import time
import warnings
from pathlib import Path

from trainers import errors, flags
from trainers.run_dir import RunDirectory

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# The library's translators and the light core (no TensorFlow, Keras or keras-hub).
from keras_transformer import serving  # noqa: E402
from keras_transformer.core.settings import BATCH_SIZE  # noqa: E402

# Names this program held before the translators moved into the library (name -> the module
# that holds it now, and its name there): deprecated aliases, for one release.
_MOVED = {
    **{
        name: (serving, name)
        for name in (
            "CTranslate2Translator",
            "Hypothesis",
            "PieceRules",
            "SavedModelTranslator",
            "is_ctranslate2",
            "resolve_version",
        )
    },
    **{
        name: (serving.pieces, name)
        for name in ("SPECIAL_PIECES", "WHITESPACE", "WHITESPACE_CHARACTERS", "WORD_BOUNDARY")
    },
    "CTRANSLATE2_FORMAT": (serving.ctranslate2, "FORMAT"),
}


def __getattr__(name: str):
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, new = _MOVED[name]
    warnings.warn(
        f"{__name__}.{name} moved to {module.__name__}.{new}; the alias will be removed in "
        "the next release",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(module, new)


def parse_args(argv=None) -> argparse.Namespace:
    parser = flags.ArgumentParser(
        prog=flags.prog("trainers.translate"),
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        "--saved-model",
        dest="model",
        required=True,
        type=Path,
        help="a SavedModel (version or model folder), a CTranslate2 directory or a LiteRT file",
    )
    parser.add_argument("--input", type=Path, help="one sentence a line (default: stdin)")
    parser.add_argument(
        "--output",
        type=Path,
        help="default: stdout (a file is written whole or not at all: an existing one is "
        "replaced once every sentence is translated; missing folders are made)",
    )
    parser.add_argument(
        "--batch-size",
        type=flags.positive_int,
        default=BATCH_SIZE,
        help="sentences translated at once (default: 64, as generate's)",
    )
    parser.add_argument(
        "--with-scores", action="store_true", help="write SCORE<TAB>TRANSLATION lines"
    )
    parser.add_argument(
        "--n-best",
        type=flags.positive_int,
        default=1,
        help="write the K best hypotheses of each sentence (at most the beam size; default: 1)",
    )
    parser.add_argument(
        "--errors",
        choices=("strict", "replace"),
        default="strict",
        help="input lines that are not UTF-8: strict refuses them, naming the first, before "
        "anything is written (the default); replace translates them, their bad bytes read as "
        "U+FFFD, with a warning",
    )
    parser.add_argument(
        "--threads",
        type=flags.non_negative_int,
        default=0,
        help="threads of the CTranslate2 translator, of LiteRT's interpreter, or of "
        "TensorFlow's intra-op and inter-op pools for a SavedModel (0: its default)",
    )
    # A SavedModel takes --target-prefix by its serving_prefix signature.
    flags.add_prefixes(parser, "the export manifest's decoding")
    return parser.parse_args(argv)


FLAGS = ("--source-prefix", "--target-prefix")  # what a refused prefix is called here


def load_translator(args):
    """The translator of --model: the runtime of its format (`kt.serving.formats`, by what
    the path holds), its prefixes checked against its vocabulary before the model loads
    (ValueError naming the flag)."""
    try:
        found = serving.formats.find(args.model)
    except FileNotFoundError as error:  # a training run directory: say how to export it
        run = RunDirectory(args.model)
        if not run.experiment_file.exists():
            if run.model().exists():  # an export's keras/ copy, or a model file's folder
                raise FileNotFoundError(
                    f"{error}; it holds a Keras model ({run.model().name}), which "
                    "trainers.translate does not run: give --model the folder trainers.export "
                    "wrote, or load this one in Python with "
                    f"TransformerSeq2SeqLM.from_preset({str(args.model)!r})"
                ) from None
            raise
        out = f"saved_models/{args.model.resolve().name}"
        command = ["python", "-m", "trainers.export", "--model-dir", str(args.model), "--out"]
        default = serving.formats.FORMATS[serving.formats.DEFAULT]
        others = " or ".join(
            f"--format {name}" for name in serving.formats.FORMATS if name != default.name
        )
        raise FileNotFoundError(
            f"{error}; it is a training run directory ({run.model().name}, "
            f"{run.experiment_file.name}): export it first, {shlex.join(command)} {out} (a "
            f"{default.title}; {others} for the others), then --model {out}"
        ) from None
    return found.open(
        args.model,
        source_prefix=args.source_prefix,
        target_prefix=args.target_prefix,
        threads=args.threads,
        prefix_names=FLAGS,
    )


def batches(lines, size: int):
    """Lists of `size` lines (the last one shorter), each without its line end: lines end at
    "\\n" only (as the corpus readers'), a CRLF's "\\r" is dropped, a lone "\\r" stays in its
    line; a UTF-8 byte order mark before the first line is dropped (as the corpus readers
    drop it)."""
    batch = []
    for number, line in enumerate(lines):
        if number == 0:
            line = line.removeprefix("\ufeff")
        batch.append(line.removesuffix("\n").removesuffix("\r"))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def not_utf8(name: str, number: int, line: bytes) -> str | None:
    """Why line `number` (1-based) of the input `name` is refused: the first byte that is
    not UTF-8, and the two ways on; None for a UTF-8 line."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as error:
        return (
            f"{name}: line {number} is not UTF-8 (byte 0x{line[error.start]:02x} at byte "
            f"{error.start + 1} of the line); convert the input to UTF-8 (e.g. iconv -f "
            "latin1 -t utf-8), or translate it with --errors replace (U+FFFD for bad bytes)"
        )
    return None


def first_bad_line(path: Path) -> str | None:
    """`not_utf8`'s reason for the first line of the file `path` that is not UTF-8, or None:
    read whole before the model loads. Lines end at "\\n", as `batches` cuts them."""
    with open(path, "rb") as file:
        for number, line in enumerate(file, start=1):
            if (problem := not_utf8(f"--input {path}", number, line)) is not None:
                return problem
    return None


def _remove_empty(folders: list[Path]) -> None:
    """The folders this run made for --output (deepest first), removed while empty: a run
    that ends early leaves the file system as it found it."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # something else was put there meanwhile: kept
            return


@errors.program
def main(argv=None) -> int:
    args = parse_args(argv)
    if args.input and args.output and _same_file(args.input, args.output):
        return errors.fail(f"--output {args.output} is the --input file")
    problem = args.output and _output_problem(args.output)  # before any work
    if problem:
        return errors.fail(f"--output {args.output}: {problem}")
    # The paths, before the model loads: a mistyped one costs no TensorFlow start-up.
    if problem := flags.first_missing(("--model", args.model), ("--input", args.input)):
        return errors.fail(problem)
    unscored = [f for f in serving.FORMATS.values() if not f.scores and f.recognises(args.model)]
    if args.with_scores and unscored:
        return errors.fail(
            f"--with-scores: a {unscored[0].title} gives translations without scores"
        )
    try:
        problem = args.input and args.errors == "strict" and first_bad_line(args.input)
    except OSError as error:  # a folder, an unreadable file
        problem = f"--input {args.input}: {error.strerror or error}"
    if problem:
        return errors.fail(problem)
    try:
        translator = load_translator(args)
    except (OSError, ValueError, ImportError) as error:  # ImportError: a runtime's package
        return errors.fail(error)
    made = []  # --output's folders made here, deepest first: removed again on a failure
    if args.output:  # its missing folders, as trainers.evaluate makes them
        folder = args.output.parent
        while not folder.exists() and folder != folder.parent:
            made.append(folder)
            folder = folder.parent
        try:
            args.output.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            return errors.fail(f"--output {args.output}: {error.strerror or error}")
    sentences, started = 0, time.perf_counter()
    name = f"--input {args.input}" if args.input else "stdin"
    replaced = []  # the numbers of the lines read with U+FFFD (--errors replace)
    # The output goes to a temporary file beside --output, renamed when every line is done:
    # a failure, a SIGTERM or Ctrl-C leaves an existing file as it was, and no partial one.
    partial = args.output and args.output.with_name(f".partial-{os.getpid()}-{args.output.name}")
    try:
        with contextlib.ExitStack() as files:  # closes the files it opened, not stdin/stdout
            if args.input:
                source = files.enter_context(
                    open(args.input, encoding="utf-8", errors="surrogateescape", newline="\n")
                )
            else:
                source = sys.stdin
                source.reconfigure(encoding="utf-8", errors="surrogateescape", newline="\n")
            sink = (
                files.enter_context(open(partial, "w", encoding="utf-8"))
                if args.output
                else sys.stdout
            )
            for batch in batches(source, args.batch_size):
                # Bytes as read: undecodable input becomes U+FFFD (in the SavedModel's graph,
                # or in the CTranslate2 translator).
                raw = [line.encode("utf-8", "surrogateescape") for line in batch]
                for number, line in enumerate(raw, start=sentences + 1):
                    if (problem := not_utf8(name, number, line)) is not None:
                        if args.errors == "strict":
                            raise ValueError(problem)
                        replaced.append(number)
                if sentences == 0 and (problem := translator.n_best_problem(args.n_best)):
                    raise ValueError(f"--n-best {args.n_best}: {problem}")
                results = translator.translate(raw, n_best=args.n_best)
                for index, hypotheses in enumerate(results, start=sentences):
                    sink.write(_format(index, hypotheses, args))
                sink.flush()
                sentences += len(batch)
        if partial:
            os.replace(partial, args.output)
    except (OSError, ValueError) as error:
        if partial:
            partial.unlink(missing_ok=True)
        _remove_empty(made)
        if isinstance(error, BrokenPipeError):  # the reader went away (`| head`)
            sys.stdout = None
            return 1
        written = getattr(error, "filename", None)
        if partial and written is not None and os.fspath(written) == os.fspath(partial):
            error = f"--output {args.output}: {error.strerror}"  # the user's name, not ours
        return errors.fail(error)
    except BaseException:  # Ctrl-C, SIGTERM (errors.program)...: no partial output left behind
        if partial:
            partial.unlink(missing_ok=True)
        _remove_empty(made)
        raise
    if replaced:
        print(
            f"warning: {name}: {len(replaced)} line{'s' * (len(replaced) != 1)} not UTF-8 "
            f"(the first: line {replaced[0]}), translated with U+FFFD for their bad bytes "
            "(--errors replace)",
            file=sys.stderr,
        )
    seconds = time.perf_counter() - started
    print(
        f"translated {sentences} sentence{'' if sentences == 1 else 's'} in {seconds:.1f} s "
        f"({sentences / max(seconds, 1e-9):.1f} sentences/s, after loading the model)",
        file=sys.stderr,
    )
    return 0


def _output_problem(output: Path) -> str | None:
    """Why --output cannot be written (a file in the way of its folders, a folder by its
    name), or None."""
    if output.is_dir():
        return "is a folder; name a file"
    return flags.creatable(output)


def _same_file(a: Path, b: Path) -> bool:
    """Whether paths `a` and `b` name one file (`b` need not exist)."""
    try:
        return a.resolve() == b.resolve() or (b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def _format(index: int, hypotheses: list, args) -> str:
    if args.n_best > 1:
        return "".join(f"{index} ||| {h.text} ||| {h.score:.4f}\n" for h in hypotheses)
    best = hypotheses[0]
    return f"{best.score:.4f}\t{best.text}\n" if args.with_scores else best.text + "\n"


if __name__ == "__main__":
    sys.exit(main())

"""Export a trained model for TF Serving, CTranslate2 or a device (LiteRT):
`python -m trainers.export --model-dir DIR --out saved_models/NAME [--format ctranslate2]`.

The model is loaded as `kt.models.TransformerSeq2SeqLM.from_preset(DIR)` loads it (the
keras-hub preset that trainers.train writes, or model.keras and vocab/ of a directory written
before it; --model another .keras file there), and decodes with the model directory's
experiment.yaml `decoding` section (beam size, length penalty, stopping and finish rules,
extra length) unless the flags say otherwise: as `trainers.evaluate` scores it.

An export already there is refused before any work: --out itself (ctranslate2, litert), or a
SavedModel's --version folder and its keras/ (a new version is added beside the others, but
keras/ holds one model). `--overwrite` replaces it once the new export is complete (written
beside it, then swapped in: a failed export leaves the earlier one as it was).

`--format savedmodel` (the default) writes saved_models/NAME/VERSION/ (the next free version
unless --version is given), a SavedModel whose `serving_default` signature takes raw strings
(`text`) and returns `translation` and `score`, with tokenization and beam search in the
graph; and saved_models/NAME/keras/ (the model file and the vocabulary) for fine-tuning
with model.fit. Both carry a manifest.json:
configuration, vocabulary, decoding settings, metrics, version. The SavedModel's search is
traced with the speed switch as the experiment's `training.fast` says
(`keras_transformer.fast`; the same translations, faster).

`--quantize int8` writes the SavedModel with int8 weights (Keras's `quantize("int8")` of
every projection and of the embedding table, on a copy of the model) and `--quantize
bfloat16` with bfloat16 weights and matrix products, where the exporting CPU computes
bfloat16 natively (AVX512_BF16 or AMX-BF16; elsewhere it falls back to float32 weights,
with a warning); either loads, as the float32 export does, with tensorflow and
tensorflow-text alone. Its manifest.json records the weights ("quantize": "int8",
"bfloat16" or "float32"); the keras/ copy stays the float32 model. A model that is already
quantized, or has LoRA adapters, is refused.

`--format ctranslate2 [--quantize TYPE]` (int8, bfloat16, or CTranslate2's own int8_float32,
int8_float16, int16, float16) writes the directory --out as a
CTranslate2 model with its SentencePiece models and manifest.json; `trainers.translate
--model` runs it with ctranslate2 and sentencepiece alone. It needs the optional extra:
pip install 'keras-transformer[ctranslate2]'. `--quantization` is the former name of
`--quantize` (deprecated).

`--format litert [--quantize int8|int4|float16]` writes the directory --out with
model.tflite, one LiteRT file that takes text and gives translations (SentencePiece, the
search and detokenization inside: `kt.export.litert`), and manifest.json. LiteRT's
interpreter with tensorflow-text's ops runs it; `trainers.translate --model OUT/model.tflite`
does. int8 is dynamic-range int8 weights, the tied embedding table stored twice (the
projection in int8; `--int8-table once` for the smaller file); int4 the projections in int4
and the table in int8 (ai-edge-quantizer). `--ops builtin` writes a file of LiteRT's builtin
ops alone, UTF-8 bytes in and out (no string tensor, no tensorflow-text op), that the stock
runtimes run: a phone's LiteRT, LiteRT.js in a browser (`kt.export.litert_builtin`); its
input is one text's bytes a run, or `--batch B` texts' (int32 [B, N]).

`--format web [--quantize int8|float16]` writes the directory --out as a static site that
translates in the browser: index.html, the builtin-ops LiteRT file and LiteRT.js, shipped
inside this package (`kt.export.web`). Any static server serves it (`python -m http.server
-d OUT`); `trainers.translate --model OUT` runs its file in Python.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import warnings
from pathlib import Path

# The table of formats, light (no TensorFlow yet): the flags are checked against it first.
from keras_transformer.serving import formats as _formats
from keras_transformer.serving.formats import DEFAULT, FORMATS
from trainers import errors, flags
from trainers.errors import ConfigError
from trainers.run_dir import MODEL, RunDirectory, write_json

# The first stage's manifest entries (experiment, model file, metrics), in its folder.
PROGRAM_MANIFEST = "program-manifest.json"
# The weights' types, every format's (the SavedModel's int8 and bfloat16 first, then
# CTranslate2's own), each checked against its format's.
QUANTIZE_TYPES = tuple(dict.fromkeys(t for entry in FORMATS.values() for t in entry.quantize))


def parse_args(argv=None) -> argparse.Namespace:
    parser = flags.ArgumentParser(
        prog=flags.prog("trainers.export"),
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model-dir", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path, help="e.g. saved_models/demo")
    parser.add_argument(
        "--model",
        default=MODEL,
        help="model file in the model directory (e.g. model.averaged.keras)",
    )
    parser.add_argument(
        "--version", type=flags.positive_int, help="version number (default: the next one)"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an export already at --out (a SavedModel's --version folder and its "
        "keras/) once the new one is complete",
    )
    parser.add_argument(
        "--format",
        default=DEFAULT,
        choices=list(FORMATS),
        help=f"default: {DEFAULT}",
    )
    parser.add_argument(
        "--prefix-signature",
        action="store_true",
        default=None,
        help="--format savedmodel: write the serving_prefix and serving_languages signatures, "
        "which take a target prefix (and a source prefix) a request, as trainers.translate "
        "--target-prefix asks (default: for a vocabulary with language codes, NLLB-200's)",
    )
    parser.add_argument(
        "--int8-table",
        choices=["once", "twice"],
        help="--format litert --quantize int8: the tied embedding table stored twice (the "
        "default: a lookup copy and the output projection's int8 weights, the projection in "
        "int8: speed in BENCHMARKS.md) or once (a table's size less, the projection in float32 "
        "on the table dequantized once a request: for an app whose download size decides); "
        "the manifest's int8_table names the layout",
    )
    parser.add_argument(
        "--ops",
        choices=["text", "builtin"],
        help="--format litert: tensorflow-text's ops, strings in and out (text, the default), "
        "or LiteRT's builtin ops alone, UTF-8 bytes in and out (builtin: for the stock runtimes, "
        "a phone's or LiteRT.js in a browser)",
    )
    parser.add_argument(
        "--batch",
        type=flags.positive_int,
        help="--format litert --ops builtin: the texts one run of the file takes, its input "
        "int32 [batch, N] (default 1), each row translated as alone",
    )
    parser.add_argument(
        "--quantize",
        choices=QUANTIZE_TYPES,
        help="the weights' type (default float32): int8 or bfloat16 for either format (a "
        "SavedModel's bfloat16 where this CPU computes it natively, else float32); "
        "CTranslate2's own types for --format ctranslate2; int8, int4 (the projections in int4 "
        "and the embedding table in int8, by ai-edge-quantizer; text ops only) or float16 for "
        "--format litert; int8 or float16 for --format web",
    )
    parser.add_argument(
        "--quantization",
        choices=QUANTIZE_TYPES,
        help="deprecated: the former name of --quantize",
    )
    parser.add_argument(
        "--beam-size",
        type=flags.positive_int,
        help="hypotheses kept per sentence, 1 for greedy search (default: the directory's "
        "decoding.beam_size in experiment.yaml, else 4)",
    )
    flags.add_length_penalty(
        parser,
        "; --format ctranslate2: length is its own ranking, gnmt a re-ranking of its hypotheses",
    )
    parser.add_argument(
        "--stopping",
        choices=["exact", "early", "k_finished"],
        help="--format savedmodel and litert: when beam search stops (default: the directory's "
        "decoding.stopping, else early: as soon as no alive "
        "hypothesis could beat the best finished one by ending at the next step, as "
        "CTranslate2, Marian and transformers stop; exact: tensor2tensor's rule, the best "
        "hypothesis the beam can reach, about twice the steps for almost always the same "
        "translations: BENCHMARKS.md; k_finished: once beam-size hypotheses have finished, "
        "CTranslate2's rule)",
    )
    flags.add_prefixes(parser)
    # --format litert's first stage, in a process of its own (`export_in_two_processes`):
    # load the model, trace the file's signatures into this new folder, and stop.
    parser.add_argument("--traced-to", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def flag_problem(args: argparse.Namespace) -> str | None:
    """Why the flags cannot go together, by the table of formats (each format's weight types,
    options and the settings it decides itself), or None: checked before any work."""
    found = FORMATS[args.format]
    if args.quantize not in (None, *found.quantize):
        takers = [name for name, entry in FORMATS.items() if args.quantize in entry.quantize]
        return (
            f"--quantize {args.quantize}: --format {found.name} takes "
            f"{' or '.join(found.quantize)} (--quantize {args.quantize} applies to --format "
            f"{' and '.join(takers)} only)"
        )
    if args.int8_table and not ("int8_table" in found.options and args.quantize == "int8"):
        takers = [name for name, entry in FORMATS.items() if "int8_table" in entry.options]
        return f"--int8-table applies to --format {' and '.join(takers)} --quantize int8 only"
    if args.prefix_signature and "prefix_signature" not in found.options:
        takers = [name for name, entry in FORMATS.items() if "prefix_signature" in entry.options]
        return f"--prefix-signature applies to --format {' and '.join(takers)} only"
    if args.ops and "ops" not in found.options:
        takers = [name for name, entry in FORMATS.items() if "ops" in entry.options]
        return f"--ops applies to --format {' and '.join(takers)} only"
    if args.batch is not None and not ("batch" in found.options and args.ops == "builtin"):
        takers = [name for name, entry in FORMATS.items() if "batch" in entry.options]
        return f"--batch applies to --format {' and '.join(takers)} --ops builtin only"
    if args.ops == "builtin" and args.quantize == "int4":
        return "--ops builtin: --quantize int4 is not in builtin-ops files yet"
    if args.stopping and "stopping" in found.decides:
        takers = [name for name, entry in FORMATS.items() if "stopping" not in entry.decides]
        return (
            f"--stopping applies to --format {' and '.join(takers)} (a {found.title} "
            "decides it itself)"
        )
    return None


@errors.program
def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.quantization:
        if args.traced_to is None:  # the first stage's process: said once, by its parent
            print("warning: --quantization is deprecated; use --quantize", file=sys.stderr)
        if args.quantize not in (None, args.quantization):
            return errors.fail(
                f"--quantization {args.quantization} and --quantize {args.quantize} disagree"
            )
        args.quantize = args.quantization
    if problem := flag_problem(args):
        return errors.fail(problem)
    if problem := flags.creatable(args.out):  # before any work
        return errors.fail(f"--out {args.out}: {problem}")
    if blocked := earlier_export(args):
        earlier, replaceable = blocked
        where = f"--out {args.out}" + ("" if earlier == args.out else f": {earlier}")
        if not replaceable:
            return errors.fail(
                f"{where} exists and holds no earlier {FORMATS[args.format].title} export: "
                "an export never replaces it, --overwrite or not; give another --out"
            )
        if not args.overwrite:
            return errors.fail(
                f"{where} exists (an earlier export): --overwrite replaces it once the new "
                "export is complete, or give another --out"
            )
    run = RunDirectory(args.model_dir)
    try:  # before TensorFlow starts: a mistyped path costs no start-up
        run.check_trained(args.model)
    except ConfigError as error:
        return errors.fail(error)
    found = FORMATS[args.format]
    given = {  # a format's own flags, those given
        "version": args.version,
        "int8_table": args.int8_table,
        "prefix_signature": args.prefix_signature,
        "ops": args.ops,
        "batch": args.batch,
    }
    options = {
        name: value for name, value in given.items() if name in found.options and value is not None
    }
    if found.name == "litert" and args.traced_to is None:
        return export_in_two_processes(argv, args, options)
    from keras_transformer import fast

    try:  # the flags over the directory's decoding settings
        experiment, task = run.load_task(
            args.model,
            beam_size=args.beam_size,
            length_penalty=args.length_penalty,
            ranking=args.ranking,
            stopping=args.stopping,
            target_prefix=args.target_prefix,
            source_prefix=args.source_prefix,
        )
    except errors.USER_ERRORS as error:
        return errors.fail(error)
    manifest = {
        "experiment": experiment.to_dict(),
        "source_model": str(run.model(args.model)),
        "metrics": run.metrics(args.model),
    }
    if args.traced_to is not None:
        from keras_transformer.export import litert

        try:
            with fast.switched(experiment.training.fast):
                litert.trace_signatures(task, args.traced_to, quantize=args.quantize, **options)
        except (FileExistsError, NotADirectoryError, ImportError, ValueError) as error:
            return errors.fail(error)
        except write_errors() as error:  # the disk's refusal: full, read-only, not permitted
            return errors.fail(cannot_write(args.out, error))
        (args.traced_to / PROGRAM_MANIFEST).write_text(json.dumps(manifest))
        return errors.EXIT_OK
    with fast.switched(experiment.training.fast):  # its beam search's top-k, as in training
        written = write_export(task, args, manifest, options)
    if written is None:
        return errors.EXIT_USER_ERROR
    if found.versioned:  # a model folder of versions: the Keras model beside them
        kept = keep_keras_model(run, args, task, manifest)
        print(f"{wrote(written, found)} and {kept} (Keras model)")
    else:
        print(wrote(written, found))
    return errors.EXIT_OK


def write_export(task, args: argparse.Namespace, manifest: dict, options: dict) -> Path | None:
    """`kt.export.export` of `task` (or of a LiteRT file's `TracedSignatures`) as the flags
    say; the path written, or None once the error is printed (one line). Warnings
    (bfloat16's fallback to float32) as the programs print them: one line each."""
    from keras_transformer import export
    from keras_transformer.export.litert_child import ConversionError

    try:
        with warnings.catch_warnings(record=True) as caught:
            return export.export(
                task,
                args.out,
                format=FORMATS[args.format].name,
                quantize=args.quantize,
                manifest=manifest,
                overwrite=args.overwrite,
                **options,
            )
    except (FileExistsError, NotADirectoryError, ImportError, ValueError) as error:
        errors.fail(error)  # an existing --version, a model already quantized...
    except ConversionError as error:  # LiteRT's converter's, in its own process: one line
        errors.fail(error)
    except write_errors() as error:  # the disk's refusal: full, read-only, not permitted
        errors.fail(cannot_write(args.out, error))
    finally:
        for warning in caught:
            print(f"warning: {warning.message}", file=sys.stderr)
    return None


def write_errors() -> tuple:
    """What writing an export raises when the disk refuses (after --out's checks passed: a
    file system that says no only when written, a full disk): `OSError`, and TensorFlow's
    own for its SavedModel writer where TensorFlow is loaded."""
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return (OSError,)
    return (OSError, tf.errors.PermissionDeniedError, tf.errors.ResourceExhaustedError,
            tf.errors.OutOfRangeError)  # fmt: skip


def cannot_write(out: Path, error: BaseException) -> str:
    """The one line for a refused write under --out: the reason, without the library's
    temporary names beside --out."""
    reason = getattr(error, "strerror", None) or getattr(error, "message", None) or str(error)
    return f"--out {out}: cannot write the export: {reason.splitlines()[0]}"


def wrote(written: Path, found) -> str:
    """The line that says what was written: `wrote PATH (FORMAT, WEIGHTS weights)`."""
    from keras_transformer._manifest import read_manifest

    weights = read_manifest(written / found.manifest_file, "quantize")["quantize"]
    return f"wrote {written} ({found.caption}, {weights} weights)"


def export_in_two_processes(argv: list[str], args: argparse.Namespace, options: dict) -> int:
    """`--format litert` in two processes one after the other, neither holding what the
    other does: this program again with `--traced-to` loads the model and saves the file's
    signatures (`kt.export.litert.trace_signatures`) in a folder beside --out, then this
    process, which never loads the model, converts them (`kt.export.export` of the
    `TracedSignatures`, its converter in a process of its own) and writes --out. The folder
    is removed in every case; a failure leaves an earlier export as it was."""
    import subprocess

    from keras_transformer._files import temporary_path

    folder = temporary_path(args.out.with_name(args.out.name + "-traced"))
    shutil.rmtree(folder, ignore_errors=True)  # left by a killed process of the same id
    command = [sys.executable, "-m", "trainers.export", *argv, "--traced-to", str(folder)]
    environment = dict(os.environ)  # this program's code first, whatever the folder
    root = Path(__file__).resolve().parents[1]
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(root), *filter(None, [environment.get("PYTHONPATH")])]
    )
    try:
        status = subprocess.run(command, env=environment, check=False).returncode
        if status < 0:
            name = signal.Signals(-status).name
            why = " (out of memory?)" if -status == signal.SIGKILL else ""
            return errors.fail(f"loading and tracing the model was killed by {name}{why}")
        if status != errors.EXIT_OK:
            return status  # it printed its error
        from keras_transformer.export.litert import TracedSignatures

        manifest = json.loads((folder / PROGRAM_MANIFEST).read_text())
        written = write_export(TracedSignatures(folder), args, manifest, options)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if written is None:
        return errors.EXIT_USER_ERROR
    print(wrote(written, FORMATS[args.format]))
    return errors.EXIT_OK


def earlier_export(args: argparse.Namespace) -> tuple[Path, bool] | None:
    """What this export would write over (`kt.serving.formats.in_the_way`: --out, or a
    SavedModel's --version folder, or its keras/), and whether it is an earlier export that
    --overwrite replaces; None where nothing is in the way."""
    found = FORMATS[args.format]
    if blocked := _formats.in_the_way(found, args.out, args.version):
        return blocked
    keras_dir = args.out / "keras"  # a SavedModel's Keras model beside its versions
    if found.versioned and _formats.occupied(keras_dir):
        return keras_dir, keras_dir.is_dir()
    return None


def keep_keras_model(run: RunDirectory, args, task, manifest: dict) -> Path:
    """`--out/keras/`: the model file itself (a kt.Transformer, as model.fit fine-tunes it),
    its vocabulary and the manifest, beside a SavedModel's versions, written complete before
    it replaces an earlier one (`earlier_export` refused that without --overwrite). Returns
    the folder."""
    from keras_transformer._files import atomic_directory
    from keras_transformer.export import MANIFEST

    keras_dir = args.out / "keras"
    with atomic_directory(keras_dir, replace=True) as temporary:
        temporary.mkdir()
        shutil.copyfile(run.model(args.model), temporary / MODEL)
        task.preprocessor.tokenizer.vocabularies.save(temporary / "vocab")
        write_json(temporary / MANIFEST, manifest | {"for": "model.fit fine-tuning"})
    return keras_dir


if __name__ == "__main__":
    sys.exit(main())

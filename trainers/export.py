"""Export a trained model for TF Serving or CTranslate2:
`python -m trainers.export --model-dir DIR --out saved_models/NAME [--format ctranslate2]`.

The model is loaded as `kt.models.TransformerSeq2SeqLM.from_preset(DIR)` loads it (the
keras-hub preset that trainers.train writes, or model.keras and vocab/ of a directory written
before it; --model another .keras file there), and decodes with the model directory's
experiment.yaml `decoding` section (beam size, length penalty, stopping and finish rules,
extra length) unless the flags say otherwise: as `trainers.evaluate` scores it.

`--format savedmodel` (the default) writes saved_models/NAME/VERSION/ (the next free version
unless --version is given), a SavedModel whose `serving_default` signature takes raw strings
(`text`) and returns `translation` and `score`, with tokenization and beam search in the
graph; and saved_models/NAME/keras/ (the model file and the vocabulary) for fine-tuning
with model.fit. Both carry a manifest.json:
configuration, vocabulary, decoding settings, metrics, version. The SavedModel's search is
traced with the speed switch as the experiment's `training.fast` says
(`keras_transformer.fast`; the same translations, faster).

`--format ctranslate2 [--quantization TYPE]` (int8, int8_float32, int8_float16, int16,
float16, bfloat16) writes the directory --out (which must not exist) as a CTranslate2 model
with its SentencePiece models and manifest.json; `trainers.translate --model` runs it with
ctranslate2 and sentencepiece alone. It needs the optional extra:
pip install 'keras-transformer[ctranslate2]'.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from trainers import errors, flags
from trainers.errors import ConfigError
from trainers.run_dir import MODEL, RunDirectory, write_json


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
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
        "--format",
        default="savedmodel",
        choices=["savedmodel", "ctranslate2"],
        help="default: savedmodel",
    )
    parser.add_argument(
        "--quantization",
        choices=["int8", "int8_float32", "int8_float16", "int16", "float16", "bfloat16"],
        help="--format ctranslate2: the weights' type (default float32)",
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
        help="--format savedmodel: when beam search stops (default: the directory's "
        "decoding.stopping, else early: as soon as no alive "
        "hypothesis could beat the best finished one by ending at the next step, as "
        "CTranslate2, Marian and transformers stop; exact: tensor2tensor's rule, the best "
        "hypothesis the beam can reach, about twice the steps for almost always the same "
        "translations: BENCHMARKS.md; k_finished: once beam-size hypotheses have finished, "
        "CTranslate2's rule)",
    )
    flags.add_prefixes(parser)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.quantization and args.format != "ctranslate2":
        return errors.fail(ValueError("--quantization applies to --format ctranslate2 only"))
    if args.stopping and args.format != "savedmodel":
        return errors.fail(
            ValueError("--stopping applies to --format savedmodel only (CTranslate2 has its own)")
        )
    if problem := flags.creatable(args.out):  # before any work
        return errors.fail(f"--out {args.out}: {problem}")
    run = RunDirectory(args.model_dir)
    try:  # before TensorFlow starts: a mistyped path costs no start-up
        run.check_trained(args.model)
    except ConfigError as error:
        return errors.fail(error)
    from keras_transformer import export, fast
    from keras_transformer._files import atomic_write

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
        "metrics": run.metrics(),
    }
    if args.format == "ctranslate2":
        try:
            written = export.ctranslate2.export_ctranslate2(
                task, args.out, quantization=args.quantization, manifest=manifest
            )
        except (FileExistsError, NotADirectoryError, ImportError, ValueError) as error:
            return errors.fail(error)
        print(f"wrote {written} (CTranslate2 model, {args.quantization or 'float32'} weights)")
        return errors.EXIT_OK
    try:
        with fast.switched(experiment.training.fast):  # its beam search's top-k, as in training
            version = export.export_saved_model(
                task, args.out, version=args.version, manifest=manifest
            )
    except (FileExistsError, NotADirectoryError) as error:  # an existing --version...
        return errors.fail(error)
    keras_dir = args.out / "keras"
    keras_dir.mkdir(parents=True, exist_ok=True)
    # The model file itself (a kt.Transformer, as model.fit fine-tunes it), and its vocabulary.
    source = run.model(args.model)
    atomic_write(keras_dir / MODEL, lambda temporary: shutil.copyfile(source, temporary))
    task.preprocessor.tokenizer.vocabularies.save(keras_dir / "vocab")
    write_json(keras_dir / export.MANIFEST, manifest | {"for": "model.fit fine-tuning"})
    print(f"wrote {version} (SavedModel for TF Serving) and {keras_dir} (Keras model)")
    return errors.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

"""Average the last checkpoints of a run (paper section 6.1):
`python -m trainers.average_checkpoints --model-dir DIR --last N`.

"For the base models, we used a single model obtained by averaging the last 5 checkpoints ...
For the big models, we averaged the last 20 checkpoints." The average is written to
DIR/model.averaged.keras (or --output); evaluate and export it with `--model`. A model saved
before under that name is refused before any work, and replaced only with --overwrite (once
the new average is complete).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainers import errors, flags
from trainers.errors import ConfigError
from trainers.run_dir import AVERAGED, MODEL, PRETRAINED_MODEL, RunDirectory


def parse_args(argv=None) -> argparse.Namespace:
    parser = flags.ArgumentParser(
        prog=flags.prog("trainers.average_checkpoints"), description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model-dir", required=True, type=Path)
    parser.add_argument("--last", type=int, default=5, help="how many checkpoints (default 5)")
    parser.add_argument(
        "--output",
        default=AVERAGED,
        help=f"a new .keras file name in the model directory (default: {AVERAGED})",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the --output file if it exists (once the new average is complete)",
    )
    args = parser.parse_args(argv)
    kept = (MODEL, PRETRAINED_MODEL)  # the trained model, an imported model's weights
    if args.output in kept or not args.output.endswith(".keras") or "/" in args.output:
        parser.error(
            f"--output {args.output}: name a .keras file in the model directory other than "
            f"{MODEL}, the trained model, and {PRETRAINED_MODEL}, an imported one"
        )
    return args


def average_checkpoints(model, paths) -> None:
    """Sets `model`'s weights to the element-wise mean of the weight files `paths`;
    `ConfigError` names a file that is not a checkpoint of this model."""
    total = None
    for path in paths:
        if not path.is_file():
            raise ConfigError(f"{path}: a folder, not a checkpoint file")
        try:
            model.load_weights(path)
        except (OSError, ValueError) as error:
            why = " ".join(str(error).split())  # h5py's messages span lines
            raise ConfigError(f"{path}: not a checkpoint of this model ({why})") from None
        weights = [w.numpy().astype("float64") for w in model.weights]
        total = weights if total is None else [t + w for t, w in zip(total, weights, strict=True)]
    model.set_weights([t / len(paths) for t in total])


@errors.program
def main(argv=None) -> int:
    args = parse_args(argv)
    run = RunDirectory(args.model_dir)
    try:  # the directory first: a mistyped one costs no TensorFlow start-up
        run.check_trained(model_file=None)  # checkpoints, not a model file, are averaged
        if run.model(args.output).is_dir():
            raise ConfigError(f"--output {args.output}: {run.model(args.output)} is a folder")
        if run.model(args.output).exists() and not args.overwrite:
            raise ConfigError(
                f"{run.model(args.output)} exists (a model saved before): give another "
                "--output NAME.keras, or --overwrite to replace it"
            )
    except ConfigError as error:
        return errors.fail(error)
    import keras_transformer as kt

    try:
        if args.last < 1:
            raise ConfigError(f"--last={args.last} must be >= 1")
        experiment = run.load_experiment()
        paths = run.checkpoints.files()
        if len(paths) < args.last:
            raise ConfigError(
                f"{run.checkpoints.path} has {len(paths)} checkpoints; --last {args.last} "
                "needs that many (training.keep_checkpoints keeps the last ones)"
            )
    except errors.USER_ERRORS as error:
        return errors.fail(error)
    paths = paths[-args.last :]
    model = kt.build_transformer(experiment.model)
    try:
        average_checkpoints(model, paths)
    except ConfigError as error:
        return errors.fail(error)
    try:
        output = run.save_model(model, args.output, replace=args.overwrite)
    except FileExistsError as error:  # saved by another process while this one averaged
        return errors.fail(error)
    except OSError as error:  # a full disk, a folder it may not write in
        where = run.model(args.output)
        return errors.fail(f"--output {args.output}: cannot write {where} ({error.strerror})")
    print(f"averaged {', '.join(p.name for p in paths)} into {output}")
    return errors.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())

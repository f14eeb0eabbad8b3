"""TensorFlow's `saved_model_cli`, with tensorflow-text's ops registered first.

`saved_model_cli show` works on our exports as it is; `run` must execute the SentencePiece
ops, which exist in a process only once `tensorflow_text` is imported (TF Serving links them
in). Same arguments as the original:

    python -m trainers.saved_model_cli show --dir saved_models/demo/1 --all
    python -m trainers.saved_model_cli run --dir saved_models/demo/1 --tag_set serve \\
        --signature_def serving_default --input_exprs 'text=["The Lord is my shepherd."]'

`--help` (or `-h`, anywhere) prints this usage: the original cannot, since Abseil's flag
parser takes `--help` before the original's own parser sees it and exits with status 1
(`--helpfull` lists Abseil's flags, not the commands'). The flags of each command are in
TensorFlow's guide to SavedModel, "Details of the SavedModel command line interface".
"""

import argparse
import os
import sys
from importlib.metadata import entry_points

from trainers import errors, flags

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

COMMANDS = ("show", "run", "scan", "convert", "aot_compile_cpu", "freeze_model")


def usage_parser(prog: str) -> argparse.ArgumentParser:
    """The parser whose help `--help` prints (the arguments themselves go to the original)."""
    parser = flags.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=COMMANDS, help="the original's command")
    parser.add_argument(
        "arguments", nargs=argparse.REMAINDER, help="its flags, e.g. --dir DIR --all"
    )
    return parser


@errors.program
def main(argv=None) -> int:
    """Runs the `saved_model_cli` command that the tensorflow package declares (its console
    script entry point) in this process, where tensorflow-text's ops are registered;
    `argv` (default: the command line's) are its arguments. `--help` prints this program's
    usage and exits with status 0; a missing or unknown command is refused in one line
    (status 2) before TensorFlow starts. The command's own flags are the original's to
    check."""
    argv = sys.argv[1:] if argv is None else [str(arg) for arg in argv]
    prog = flags.prog("trainers.saved_model_cli")
    if "-h" in argv or "--help" in argv:
        usage_parser(prog).parse_args(["--help"])  # prints the usage, exits with status 0
    if not argv:
        usage_parser(prog).error(f"give a command: one of {', '.join(COMMANDS)}")
    if not argv[0].startswith("-"):  # the original's --version aside
        usage_parser(prog).parse_args(argv)  # the command is one of COMMANDS
    # TensorFlow's Python logger gives itself a handler when it starts and the root logger has
    # none; the original's absl.app.run then gives the root Abseil's, and every record (`run`'s
    # deprecation notice of the loader it calls) was written twice. Abseil's handler first,
    # as absl.app.run sets it: each written once, TensorFlow's own warnings left as they are.
    from absl import logging as absl_logging

    absl_logging.use_absl_handler()
    import tensorflow_text  # noqa: F401  (registers SentencepieceOp and friends)

    (command,) = entry_points(group="console_scripts", name="saved_model_cli")
    sys.argv = [prog, *argv]  # the original reads them there (absl.app.run)
    return command.load()()


if __name__ == "__main__":
    sys.exit(main())

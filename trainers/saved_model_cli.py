"""TensorFlow's `saved_model_cli`, with tensorflow-text's ops registered first.

`saved_model_cli show` works on our exports as it is; `run` must execute the SentencePiece
ops, which exist in a process only once `tensorflow_text` is imported (TF Serving links them
in). Same arguments as the original:

    python -m trainers.saved_model_cli run --dir saved_models/demo/1 --tag_set serve \\
        --signature_def serving_default --input_exprs 'text=["The Lord is my shepherd."]'
"""

import os
import sys
from importlib.metadata import entry_points

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow_text  # noqa: E402, F401  (registers SentencepieceOp and friends)


def main() -> int:
    """Runs the `saved_model_cli` command that the tensorflow package declares (its console
    script entry point) in this process, where tensorflow-text's ops are registered."""
    (command,) = entry_points(group="console_scripts", name="saved_model_cli")
    sys.argv[0] = "saved_model_cli"
    return command.load()()


if __name__ == "__main__":
    sys.exit(main())

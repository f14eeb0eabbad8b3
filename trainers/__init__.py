"""Command-line programs over the keras_transformer library: train, evaluate,
average_checkpoints, export, translate, visualize, saved_model_cli. Beside them: experiment
(the YAML configuration), run_dir (the run directory and every path in it), errors (the error
types and exit statuses), runtime (strategies), checkpointing and callbacks.

TensorFlow's C++ INFO and WARNING lines (oneDNN notices, XLA's "Ignoring Assert operator")
are hidden by default; set TF_CPP_MIN_LOG_LEVEL=0 to see them. Errors are always shown.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

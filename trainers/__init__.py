"""Command-line programs over the keras_transformer library: train, evaluate,
average_checkpoints, export, translate, visualize, saved_model_cli. Beside them: experiment
(the YAML configuration), run_dir (the run directory and every path in it), errors (the error
types and exit statuses), runtime (strategies), checkpointing and callbacks.

TensorFlow's C++ INFO and WARNING lines (oneDNN and CUDA notices, XLA's "Ignoring Assert
operator") are hidden by default, those written while TensorFlow loads included, with the
failed CUDA probe of a machine without a GPU (startup_logs); set TF_CPP_MIN_LOG_LEVEL=0 to see
them. Other errors are always shown.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from trainers import startup_logs  # noqa: E402

startup_logs.install()

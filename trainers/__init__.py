"""Command-line programs over the keras_transformer library: train, evaluate,
average_checkpoints, export, translate, visualize, saved_model_cli.

TensorFlow's C++ INFO and WARNING lines (oneDNN notices, XLA's "Ignoring Assert operator")
are hidden by default; set TF_CPP_MIN_LOG_LEVEL=0 to see them. Errors are always shown.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

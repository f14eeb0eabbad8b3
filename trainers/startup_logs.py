"""TensorFlow's start-up lines and SentencePiece's, held to `TF_CPP_MIN_LOG_LEVEL`: the
library's `keras_transformer._logs` (its docstring says how), which `import keras_transformer`
installs for library use too.

The programs load that one file without running the package's `__init__`, which imports
Keras and so TensorFlow (`trainers.library.light_module`): they check their arguments and
paths before TensorFlow starts, and install the filter before its first import. The module
is the package's own afterwards (`sys.modules["keras_transformer._logs"]`), so the two never
differ.
"""

from __future__ import annotations

from trainers.library import light_module

_logs = light_module("keras_transformer._logs")
filter_lines = _logs.filter_lines
filtered_stderr = _logs.filtered_stderr
hidden = _logs.hidden
install = _logs.install
min_log_level = _logs.min_log_level
native_logs = _logs.native_logs

__all__ = [
    "filter_lines",
    "filtered_stderr",
    "hidden",
    "install",
    "min_log_level",
    "native_logs",
]

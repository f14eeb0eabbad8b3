"""TensorFlow's start-up lines and SentencePiece's, held to `TF_CPP_MIN_LOG_LEVEL`: the
library's `keras_transformer.core.logs` (its docstring says how), which `import
keras_transformer` installs for library use too.

The light core imports without Keras or TensorFlow: the programs check their arguments and
paths before TensorFlow starts, and install the filter before its first import.
"""

from __future__ import annotations

from keras_transformer.core import logs as _logs

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

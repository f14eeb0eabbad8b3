"""TensorFlow's start-up lines and SentencePiece's, held to `TF_CPP_MIN_LOG_LEVEL`: the
library's `keras_transformer._logs` (its docstring says how), which `import keras_transformer`
installs for library use too.

The programs load that one file without running the package's `__init__`, which imports
Keras and so TensorFlow: they check their arguments and paths before TensorFlow starts, and
install the filter before its first import. The module is the package's own afterwards
(`sys.modules["keras_transformer._logs"]`), so the two never differ.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def _library_logs():
    name = "keras_transformer._logs"
    if name not in sys.modules:
        package = importlib.util.find_spec("keras_transformer")
        path = Path(next(iter(package.submodule_search_locations))) / "_logs.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


_logs = _library_logs()
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

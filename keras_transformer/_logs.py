"""The log filter's former place: it is `keras_transformer.core.logs` (light)."""

from keras_transformer.core.logs import (
    filter_lines,
    filtered_stderr,
    hidden,
    install,
    min_log_level,
    native_logs,
)

__all__ = [
    "filter_lines",
    "filtered_stderr",
    "hidden",
    "install",
    "min_log_level",
    "native_logs",
]

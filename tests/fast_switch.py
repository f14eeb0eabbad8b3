"""The `kt.fast` switch set for a block of a test, then restored."""

import contextlib

import keras_transformer as kt


@contextlib.contextmanager
def fast_path(enabled: bool):
    """`kt.fast` switched on or off for the block, then restored."""
    was_enabled = kt.fast.is_enabled()
    kt.fast.enable() if enabled else kt.fast.disable()
    try:
        yield
    finally:
        kt.fast.enable() if was_enabled else kt.fast.disable()

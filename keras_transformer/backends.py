"""The Keras backends this package runs on, checked once at import."""

from __future__ import annotations

import keras

# TensorFlow alone for now: tf.data, tensorflow-text and the SavedModel export need it, and
# the layers have not been run on another backend. Widen this when they have.
SUPPORTED_BACKENDS = ("tensorflow",)


def check_backend(backend: str | None = None) -> None:
    """Raises ImportError unless Keras's backend is one this package runs on.

    `import keras_transformer` sets `KERAS_BACKEND=tensorflow` when it is unset, but Keras
    picks its backend once, when it is first imported: `import keras` before this package (or
    `KERAS_BACKEND` or `~/.keras/keras.json` naming another) leaves it on that backend.

    Args:
        backend: str or None. The backend's name. Defaults to None, Keras's own
            (`keras.config.backend()`).

    Example:
    >>> check_backend("tensorflow")
    """
    backend = keras.config.backend() if backend is None else backend
    if backend not in SUPPORTED_BACKENDS:
        raise ImportError(
            f"keras_transformer runs on Keras's TensorFlow backend, but Keras was imported "
            f"with backend {backend!r}: set KERAS_BACKEND=tensorflow before importing keras "
            "(or import keras_transformer first, which sets it when it is unset)"
        )

"""The Keras backends the package runs on (TensorFlow and JAX): a clear error at import on
any other. The JAX pass itself: tests/test_jax.py."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MESSAGE = "set KERAS_BACKEND to one of them before importing keras"


def import_after_keras(backend: str) -> subprocess.CompletedProcess:
    """`import keras_transformer` in a fresh process whose Keras, imported first, reports
    `backend` (Keras runs on TensorFlow and says otherwise: no torch is installed)."""
    code = f"import keras; keras.config.backend = lambda: {backend!r}; import keras_transformer"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("backend", ["torch", "numpy", "openvino"])
def test_keras_imported_first_on_another_backend_is_refused_by_name(backend):
    result = import_after_keras(backend)
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("ImportError:"), result.stderr[-2000:]
    assert f"backend {backend!r}" in last_line and MESSAGE in last_line, last_line


def test_keras_imported_first_on_tensorflow_is_accepted():
    result = import_after_keras("tensorflow")
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_check_names_the_backend_and_what_to_set():
    from keras_transformer.backends import check_backend

    check_backend()  # this process: TensorFlow
    check_backend("jax")
    with pytest.raises(ImportError, match=f"backend 'torch': {MESSAGE}"):
        check_backend("torch")


def test_what_needs_tensorflow_says_so_on_another_backend(monkeypatch):
    from keras_transformer import backends

    backends.require_tensorflow("kt.data")  # this process: TensorFlow
    monkeypatch.setattr(backends, "BACKEND", "jax")
    with pytest.raises(ImportError, match="kt.data needs Keras's TensorFlow backend"):
        backends.require_tensorflow("kt.data")

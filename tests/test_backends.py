"""The Keras backends the package runs on (TensorFlow and JAX): a clear error at import on
any other. The JAX pass itself: tests/jax/."""

import json

import pytest

from tests import programs

MESSAGE = "set KERAS_BACKEND to one of them before importing keras"


IMPORTS = """
import json, sys, traceback
import keras
for backend in sys.argv[1:]:
    keras.config.backend = lambda: backend
    for name in [m for m in sys.modules if m.split(".")[0] == "keras_transformer"]:
        del sys.modules[name]  # the package's import runs again, as in a fresh process
    try:
        import keras_transformer
        print(json.dumps([backend, None]))
    except Exception:
        print(json.dumps([backend, traceback.format_exc().strip().splitlines()[-1]]))
"""
BACKENDS = ["torch", "numpy", "openvino", "tensorflow"]


@pytest.fixture(scope="module")
def imports_after_keras() -> dict:
    """backend -> the last line of `import keras_transformer`'s traceback (None when it
    imports) in a fresh process whose Keras, imported first, reports that backend (Keras
    runs on TensorFlow and says otherwise: no torch is installed). One process tries them
    all, the package's modules removed before each import."""
    result = programs.snippet(IMPORTS, *BACKENDS, env={"KERAS_BACKEND": "tensorflow"}, timeout=300)
    return dict(json.loads(line) for line in result.stdout.splitlines() if line.startswith("["))


@pytest.mark.parametrize("backend", ["torch", "numpy", "openvino"])
def test_keras_imported_first_on_another_backend_is_refused_by_name(imports_after_keras, backend):
    last_line = imports_after_keras[backend]
    assert last_line is not None and last_line.startswith("ImportError:"), last_line
    assert f"backend {backend!r}" in last_line and MESSAGE in last_line, last_line


def test_keras_imported_first_on_tensorflow_is_accepted(imports_after_keras):
    assert imports_after_keras["tensorflow"] is None


def test_the_check_names_the_backend_and_what_to_set():
    from keras_transformer._backends import check_backend

    check_backend()  # this process: TensorFlow
    check_backend("jax")
    with pytest.raises(ImportError, match=f"backend 'torch': {MESSAGE}"):
        check_backend("torch")


def test_what_needs_tensorflow_says_so_on_another_backend(monkeypatch):
    from keras_transformer import _backends as backends

    backends.require_tensorflow("kt.data")  # this process: TensorFlow
    monkeypatch.setattr(backends, "BACKEND", "jax")
    with pytest.raises(ImportError, match="kt.data needs Keras's TensorFlow backend"):
        backends.require_tensorflow("kt.data")

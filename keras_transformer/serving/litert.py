"""`LiteRTTranslator`: a LiteRT file (`kt.export.litert`) run by LiteRT's interpreter
(`ai-edge-litert`) with tensorflow-text's ops, without Keras, TensorFlow or this library's
models.

tensorflow-text's ops come from its compiled registrar library, loaded as a library when
`tensorflow_text` is not imported already (importing it starts TensorFlow and Keras). That
library needs TensorFlow's C++ framework library (`libtensorflow_framework.so.2`, from the
`tensorflow` package), which is loaded as a library too: the `tensorflow` and
`tensorflow-text` packages must be installed, and neither is imported.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from keras_transformer.serving.common import Hypothesis, lines_of

FORMAT = "litert"
MANIFEST = "manifest.json"
# The tensorflow-text ops a file of `kt.export.litert` may hold, by their registrars' names.
REGISTRARS = ("AddFastSentencepieceTokenize", "AddNgramsStringJoin", "AddRaggedTensorToTensor")
HOW_TO_REGISTER = (
    "a LiteRT file of kt.export.litert needs tensorflow-text's ops: pip install tensorflow-text, "
    "and run it with ai_edge_litert.interpreter.InterpreterWithCustomOps("
    "custom_op_registerers=tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS, ...)"
)


def is_litert(path) -> bool:
    """True for a `.tflite` file, or a directory that holds `model.tflite`."""
    path = Path(path)
    return (path.is_file() and path.suffix == ".tflite") or (path / "model.tflite").is_file()


def text_op_registrars() -> list:
    """tensorflow-text's TFLite op registrars (`REGISTRARS`), for `InterpreterWithCustomOps`'s
    `custom_op_registerers`, without importing TensorFlow or Keras (see the module doc).

    Raises:
        ImportError: tensorflow-text (or tensorflow) is not installed, saying how to
            register the ops.
    """
    imported = sys.modules.get("tensorflow_text")
    if imported is not None:
        registrar = imported.tflite_registrar
    else:
        try:
            tensorflow = _package("tensorflow")
            library = next(
                (_package("tensorflow_text") / "core" / "pybinds").glob("tflite_registrar*.so")
            )
        except (ImportError, StopIteration):
            raise ImportError(HOW_TO_REGISTER) from None
        ctypes.CDLL(str(tensorflow / "libtensorflow_framework.so.2"), ctypes.RTLD_GLOBAL)
        spec = importlib.util.spec_from_file_location("tflite_registrar", library)
        registrar = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(registrar)
    return [getattr(registrar, name) for name in REGISTRARS]


def _package(name: str) -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ImportError(name)
    return Path(spec.origin).parent


class LiteRTTranslator:
    """Translates text with a LiteRT file of `kt.export.litert` (its `serving_default`
    signature: `text` in, `translations` out), the search its export wrote into it.

    Args:
        path: str or path. The `.tflite` file, or the directory that holds `model.tflite`
            (and the export's `manifest.json`).
        source_prefix: None. Source prefixes are not in LiteRT files yet.
        target_prefix: None. Target prefixes are not in LiteRT files yet.
        threads: int. Threads of LiteRT's interpreter; 0 lets LiteRT choose. Defaults to 0.

    Raises:
        FileNotFoundError: no such file.
        ImportError: `ai-edge-litert` or tensorflow-text's ops are missing (saying how to
            install and register them).
    """

    def __init__(
        self,
        path,
        *,
        source_prefix: str | None = None,
        target_prefix: str | None = None,
        threads: int = 0,
    ):
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
            raise ValueError(f"threads={threads!r}: a number of threads, 0 or more")
        path = Path(path)
        if path.is_dir():
            path = path / "model.tflite"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no LiteRT file")
        for name, prefix in (("source_prefix", source_prefix), ("target_prefix", target_prefix)):
            if prefix is not None:
                raise ValueError(f"{name}={prefix!r}: not in LiteRT files yet")
        try:
            from ai_edge_litert.interpreter import InterpreterWithCustomOps
        except ImportError:
            raise ImportError(
                "running a LiteRT file needs LiteRT's interpreter: pip install ai-edge-litert"
            ) from None
        self.path = path
        manifest = path.parent / MANIFEST
        self.manifest = json.loads(manifest.read_text()) if manifest.is_file() else {}
        interpreter = InterpreterWithCustomOps(
            custom_op_registerers=text_op_registrars(),
            model_path=str(path),
            num_threads=threads or None,
        )
        self._run = interpreter.get_signature_runner("serving_default")

    def n_best_problem(self, n_best: int, *, target_prefix: str | None = None) -> str | None:
        """Why `translate` cannot give `n_best` hypotheses a line, or None when it can."""
        if n_best < 1:
            return "must be at least 1"
        return None if n_best == 1 else "a LiteRT file gives one translation a line"

    def translate(self, lines: Sequence[str | bytes], *, n_best: int = 1) -> list[list[Hypothesis]]:
        """The translation of each line, as the file gives it (`Hypothesis.ids` empty and
        `score` NaN: the file answers text alone).

        Args:
            lines: sequence of str or bytes (bytes go to the file as they are).
            n_best: int. 1: a LiteRT file gives one translation a line.

        Returns:
            A list of one-`Hypothesis` lists, one a line.
        """
        import numpy as np

        if (problem := self.n_best_problem(n_best)) is not None:
            raise ValueError(f"n_best={n_best}: {problem}")
        lines = lines_of(lines, "lines")
        text = np.array(
            [line if isinstance(line, bytes) else line.encode("utf-8") for line in lines],
            dtype=object,
        )
        translations = self._run(text=text)["translations"]
        return [
            [Hypothesis([], translation.decode("utf-8", "replace"), float("nan"))]
            for translation in translations
        ]


__all__ = ["FORMAT", "LiteRTTranslator", "REGISTRARS", "is_litert", "text_op_registrars"]

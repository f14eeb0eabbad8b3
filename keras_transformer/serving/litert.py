"""`LiteRTTranslator`: a LiteRT file (`kt.export.litert`) run by LiteRT's interpreter
(`ai-edge-litert`) with tensorflow-text's ops, without Keras, TensorFlow or this library's
models.

tensorflow-text's ops come from its compiled registrar library, loaded as a library when
`tensorflow_text` is not imported already (importing it starts TensorFlow and Keras). That
library needs TensorFlow's C++ framework library (`libtensorflow_framework.so.2`, from the
`tensorflow` package), which is loaded as a library too: the `tensorflow` and
`tensorflow-text` packages must be installed, and neither is imported. Both load with their
symbols kept to themselves (TensorFlow's library carries BoringSSL, whose symbols would
take the place of OpenSSL's for `hashlib` and crash it), and the registrar library stands
in `sys.modules` under tensorflow-text's own name for it, so that importing TensorFlow,
Keras or `tensorflow_text` later in the process reuses it rather than initializing it twice.

An NLLB-200 file takes the languages of each request (its `serving_languages` signature; a
builtin-ops file's `serving_default`, as indices in the manifest's lists); the translator
checks them against the manifest's `languages` (`check_prefixes`) before the file
runs, which answers "" for a code it lacks rather than failing.
"""

from __future__ import annotations

import ctypes
import difflib
import importlib.util
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

from keras_transformer.core.logs import native_logs
from keras_transformer.serving.common import (
    LANGUAGE_CODE,
    Hypothesis,
    check_target_prefix,
    lines_of,
    read_manifest,
)
from keras_transformer.serving.litert_bytes import (
    batch_size,
    decoded,
    encoded,
    input_bytes,
    is_builtin,
)

FORMAT = "litert"  # manifest.json's "format"
MANIFEST = "manifest.json"  # beside the file
MODEL_FILE = "model.tflite"  # the file, in the folder `kt.export.litert` writes
# The tensorflow-text ops a file of `kt.export.litert` may hold, by their registrars' names.
REGISTRARS = (
    "AddByteSplit",
    "AddFastSentencepieceTokenize",
    "AddNgramsStringJoin",
    "AddRaggedTensorToTensor",
)
HOW_TO_REGISTER = (
    "a LiteRT file of kt.export.litert needs tensorflow-text's ops: pip install tensorflow-text, "
    "and run it with ai_edge_litert.interpreter.InterpreterWithCustomOps("
    "custom_op_registerers=tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS, ...)"
)


def is_litert(path) -> bool:
    """True for a `.tflite` file, or a directory that holds `model.tflite`."""
    path = Path(path)
    return (path.is_file() and path.suffix == ".tflite") or (path / MODEL_FILE).is_file()


REGISTRAR_MODULE = "tensorflow_text.core.pybinds.tflite_registrar"


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
        # TensorFlow's start-up lines, held to the level (keras_transformer.core.logs).
        with native_logs():
            ctypes.CDLL(str(tensorflow / "libtensorflow_framework.so.2"), ctypes.RTLD_LOCAL)
            spec = importlib.util.spec_from_file_location(REGISTRAR_MODULE, library)
            registrar = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(registrar)
        sys.modules[REGISTRAR_MODULE] = registrar
    return [getattr(registrar, name) for name in REGISTRARS]


def _package(name: str) -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ImportError(name)
    return Path(spec.origin).parent


def _manifest(path: Path) -> dict:
    """The export's manifest beside a LiteRT file, or {} where there is none (ValueError
    naming a damaged one: `read_manifest`)."""
    manifest = path.parent / MANIFEST
    return read_manifest(manifest) if manifest.is_file() else {}


def languages(path) -> dict[str, list[str]] | None:
    """The language codes a LiteRT file takes, by side ("source", "target"), from its
    manifest: NLLB-200's; none for another model; None where the manifest is missing (its
    languages unknown)."""
    path = Path(path)
    path = path / MODEL_FILE if path.is_dir() else path
    if not (path.parent / MANIFEST).is_file():
        return None
    listed = _manifest(path).get("languages", {})
    return {side: list(listed.get(side, [])) for side in ("source", "target")}


def check_prefixes(
    languages: dict[str, list[str]] | None,
    source_prefix: str | None = None,
    target_prefix: str | None = None,
    *,
    names: tuple[str, str] = ("source_prefix", "target_prefix"),
) -> None:
    """Refuses a prefix a LiteRT file does not take: any, where it has no language codes
    (`languages`) or its manifest is missing (`languages` None: they are unknown); else one
    that is not one of its codes. ValueError naming the prefix by `names` (a program's
    flags) and the code it could have meant. None passes."""
    for name, side, prefix in zip(
        names, ("source", "target"), (source_prefix, target_prefix), strict=True
    ):
        if prefix is None:
            continue
        if languages is None:
            raise ValueError(
                f"{name}={prefix!r}: the file's {MANIFEST} is missing, so its languages are "
                f"unknown: keep the export's {MANIFEST} beside model.tflite"
            )
        codes = languages[side]
        if not codes:
            raise ValueError(
                f"{name}={prefix!r}: this LiteRT file takes no prefix (its model's "
                "vocabulary has no language codes)"
            )
        # The library's check names the code it could have meant.
        check_target_prefix(prefix, SimpleNamespace(language_codes=codes), where=name)
        if prefix not in codes:
            close = difflib.get_close_matches(prefix, codes, n=1)
            meant = f" (did you mean {close[0]!r}?)" if close else ""
            listed = ", ".join(codes[:6]) + (", ..." if len(codes) > 6 else "")
            raise ValueError(
                f"{name}={prefix!r}: a LiteRT file takes one language code as its prefix"
                f"{meant}; its codes: {listed}"
            )


class LiteRTTranslator:
    """Translates text with a LiteRT file of `kt.export.litert`, the search its export wrote
    into it: its `serving_default` signature (`text` in, `translations` out), or for an
    NLLB-200 file `serving_languages` (`text`, `source_prefix`, `target_prefix`), both
    languages given a request. A builtin-ops file (`kt.export.litert_builtin`) takes the
    lines' UTF-8 bytes, its manifest's `batch` of them a run (the last run filled with empty
    rows, their answers dropped).

    For an NLLB-200 file, each line's source language is the language code it starts with
    (a word of its own, one of the file's codes: it is taken off the text, as the library's
    tokenizer splits it off), else the source prefix (this call's, the translator's, or the
    export's); the target language is the target prefix (the same order). A code is checked
    against the manifest's `languages` before the file runs (the file answers "" for a
    code it lacks).

    Args:
        path: str or path. The `.tflite` file, or the directory that holds `model.tflite`
            (and the export's `manifest.json`).
        source_prefix: str or None. An NLLB-200 file's source language code ("eng_Latn");
            None takes the export's. A file without language codes takes none.
        target_prefix: str or None. An NLLB-200 file's target language code ("spa_Latn");
            None takes the export's.
        threads: int. Threads of LiteRT's interpreter; 0 lets LiteRT choose. Defaults to 0.
        prefix_names: tuple of two str. What a refusal of the two prefixes above calls
            them (a program's flags). Defaults to ("source_prefix", "target_prefix").

    Raises:
        FileNotFoundError: no such file, or no `manifest.json` beside it.
        ValueError: a manifest without its `decoding` entry (or damaged), naming it; a
            prefix the file does not take (a file without language codes, or a
            code it lacks, naming the codes it could have meant).
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
        prefix_names: tuple[str, str] = ("source_prefix", "target_prefix"),
    ):
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
            raise ValueError(f"threads={threads!r}: a number of threads, 0 or more")
        path = Path(path)
        if path.is_dir():
            path = path / MODEL_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no LiteRT file")
        self.path, self.threads, self.prefix_names = path, threads, prefix_names
        if not (path.parent / MANIFEST).is_file():  # the export's settings: never guessed
            raise FileNotFoundError(
                f"{path}: no {MANIFEST} beside it (the export's decoding settings and "
                f"languages): keep the {MANIFEST} that trainers.export wrote beside the file"
            )
        self.manifest = read_manifest(path.parent / MANIFEST, "decoding")
        self.languages = languages(path)
        check_prefixes(self.languages, source_prefix, target_prefix, names=prefix_names)
        self.source_prefix, self.target_prefix = source_prefix, target_prefix
        try:
            from ai_edge_litert.interpreter import InterpreterWithCustomOps
        except ImportError:
            raise ImportError(
                "running a LiteRT file needs LiteRT's interpreter: pip install ai-edge-litert"
            ) from None
        # A builtin-ops file (bytes in and out) needs no custom op.
        builtin = is_builtin(self.manifest)
        registrars = [] if builtin else text_op_registrars()
        try:
            # The first allocation applies the XNNPACK delegate, which says so on stderr:
            # done here, with the line held to the level (keras_transformer.core.logs).
            with native_logs():
                interpreter = InterpreterWithCustomOps(
                    custom_op_registerers=registrars,
                    model_path=str(path),
                    num_threads=threads or None,
                )
                interpreter.allocate_tensors()
        except ValueError as error:  # not a LiteRT file ("not a valid Flatbuffer buffer")
            raise ValueError(f"{path}: {error}") from None
        self._run = interpreter.get_signature_runner("serving_default")
        self._bytes = input_bytes(self.manifest) if builtin else None
        self._batch = batch_size(self.manifest) if builtin else None
        self._languages = None
        if self.languages and self.languages["target"]:
            # A builtin-ops file takes the languages in `serving_default` itself.
            name = "serving_default" if builtin else "serving_languages"
            self._languages = interpreter.get_signature_runner(name)

    def _check(self, source_prefix: str | None, target_prefix: str | None) -> None:
        check_prefixes(self.languages, source_prefix, target_prefix)

    def n_best_problem(self, n_best: int, *, target_prefix: str | None = None) -> str | None:
        """Why `translate` cannot give `n_best` hypotheses a sentence, or None when it can."""
        if n_best < 1:
            return "must be at least 1"
        return None if n_best == 1 else "a LiteRT file gives one translation a sentence"

    def translate(
        self,
        lines: Sequence[str | bytes],
        *,
        n_best: int = 1,
        source_prefix: str | None = None,
        target_prefix: str | None = None,
    ) -> list[list[Hypothesis]]:
        """The translation of each line, as the file gives it (`Hypothesis.ids` empty and
        `score` NaN: the file answers text alone).

        Args:
            lines: sequence of str or bytes (bytes go to the file as they are).
            n_best: int. 1: a LiteRT file gives one translation a sentence.
            source_prefix: str or None. This call's source language code, over the
                translator's. Defaults to None.
            target_prefix: str or None. This call's target language code, over the
                translator's. Defaults to None.

        Returns:
            A list of one-`Hypothesis` lists, one a line.
        """
        import numpy as np

        lines = [
            line if isinstance(line, bytes) else line.encode("utf-8", "surrogateescape")
            for line in lines_of(lines, "lines")
        ]
        if (problem := self.n_best_problem(n_best)) is not None:
            raise ValueError(f"n_best={n_best}: {problem}")
        self._check(source_prefix, target_prefix)
        if self._languages is not None:
            decoding = self.manifest.get("decoding", {})
            sources = [
                self._source_language(line, source_prefix, decoding.get("source_prefix"))
                for line in lines
            ]
            target = next(
                (
                    p
                    for p in (target_prefix, self.target_prefix, decoding.get("target_prefix"))
                    if p is not None
                ),
                "",
            )
        if self._bytes is not None:  # the file's B lines a run: bytes `[B, N]` in and out
            if self._languages is None:
                runs = [{"text": encoded(line, self._bytes)} for line in lines]
            else:  # the languages as indices in the manifest's lists, -1 for none
                runs = [
                    {
                        "text": encoded(text, self._bytes),
                        "source_language": _index(self.languages["source"], code),
                        "target_language": _index(self.languages["target"], target),
                    }
                    for text, code in sources
                ]
            translations = self._run_rows(runs)
            return [[Hypothesis([], decoded(t), float("nan"))] for t in translations]
        if self._languages is None:
            translations = self._run(text=np.array(lines, dtype=object))["translations"]
        else:
            translations = self._languages(
                text=np.array([text for text, _ in sources], dtype=object),
                source_prefix=np.array([code.encode() for _, code in sources], dtype=object),
                target_prefix=np.array([target.encode()] * len(lines), dtype=object),
            )["translations"]
        return [
            [Hypothesis([], translation.decode("utf-8", "replace"), float("nan"))]
            for translation in translations
        ]

    def _run_rows(self, runs: list[dict]) -> list:
        """A builtin-ops file's answers to `runs`, each a line's inputs (`text` int32 `[1,
        N]`...), the file's `batch` of them stacked a run, the last run filled with empty
        rows (`text` of zeros: answered "", the answers dropped): each line's translation's
        bytes `[M]`."""
        import numpy as np

        answers = []
        for start in range(0, len(runs), self._batch):
            chunk = runs[start : start + self._batch]
            empty = {**chunk[-1], "text": np.zeros_like(chunk[-1]["text"])}
            filled = chunk + [empty] * (self._batch - len(chunk))
            stacked = {name: np.concatenate([run[name] for run in filled]) for name in chunk[0]}
            answers += list(self._run(**stacked)["translations"][: len(chunk)])
        return answers

    def _source_language(self, line: bytes, call: str | None, export: str | None):
        """A line's text and source language code ("" for none): the code it starts with
        (taken off), else the first prefix set of this call's, the translator's and the
        export's, unless the line starts with a word shaped like a code (the library leaves
        such a line as it is, `kt.decoding.with_source_prefix`)."""
        words = line.decode("utf-8", "replace").split(maxsplit=1)
        if words and re.fullmatch(LANGUAGE_CODE, words[0]):
            if words[0] in self.languages["source"]:
                return line.split(words[0].encode(), 1)[1], words[0]
            return line, ""
        return line, next((p for p in (call, self.source_prefix, export) if p), "")


def _index(codes: list[str], code: str):
    """A language code's index in a builtin-ops file's list, int32 `[1]` (-1 for "")."""
    import numpy as np

    return np.array([codes.index(code) if code else -1], np.int32)


__all__ = [
    "FORMAT",
    "MANIFEST",
    "MODEL_FILE",
    "LiteRTTranslator",
    "REGISTRARS",
    "check_prefixes",
    "is_litert",
    "languages",
    "text_op_registrars",
]

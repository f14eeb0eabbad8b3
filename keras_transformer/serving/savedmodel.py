"""A client of the TF Serving SavedModel (`kt.export.export`) in Python: text in,
translations out through its signatures, with `tensorflow` and `tensorflow_text` alone (no
Keras, none of this library's models), as TF Serving runs it.

The tokenizer and the beam search are inside the SavedModel; `SavedModelTranslator` adds what
a request needs from outside: a source prefix put in front of each sentence here, by the
library's rule (`with_source_prefix`; a sentence then starts with a language code, which the
SavedModel leaves as it is), and a target prefix given to its `serving_prefix` signature.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from keras_transformer.serving.common import (
    LANGUAGE_CODE,
    ExportedVocabulary,
    Hypothesis,
    check_prefixes,
    library_module,
    lines_of,
    prefixed,
    read_manifest,
)

EXTRA = "assets.extra"  # the version folder's files beside the graph: manifest, vocabulary
MANIFEST = f"{EXTRA}/manifest.json"  # kt.export's manifest, in a version folder
PIECES = "pieces.json"  # kt.text.PIECES: the piece lists of an imported model's vocabulary


def is_saved_model(path) -> bool:
    """Whether `path` holds a SavedModel of `kt.export`: saved_model.pb (a version folder),
    or numbered version folders (a model folder: `resolve_version` takes the highest)."""
    path = Path(path)
    if (path / "saved_model.pb").exists():
        return True
    return path.is_dir() and any(p.name.isdigit() for p in path.iterdir())


def resolve_version(path) -> Path:
    """A version folder: `path` itself if it holds saved_model.pb, else its highest version.
    FileNotFoundError when it has neither (`kt.serving.open` names the three formats an
    export may be)."""
    path = Path(path)
    if (path / "saved_model.pb").exists():
        return path
    versions = sorted((p for p in path.glob("*") if p.name.isdigit()), key=lambda p: int(p.name))
    if not versions:
        raise FileNotFoundError(
            f"{path}: no SavedModel (no saved_model.pb, no version folder) in it"
        )
    return versions[-1]


def set_threads(threads: int) -> None:
    """TensorFlow's intra-op and inter-op thread pools, `threads` threads each
    (`tf.config.threading`), for what this process runs; 0 leaves TensorFlow's defaults (as
    many as the cores). TensorFlow takes them before it starts (before its first op).

    Raises:
        ValueError: `threads` is not an integer >= 0.
        RuntimeError: TensorFlow has started in this process with other numbers.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise ValueError(f"threads={threads!r}: a number of threads, 0 or more")
    if not threads:
        return
    import tensorflow as tf

    threading = tf.config.threading
    try:
        threading.set_intra_op_parallelism_threads(threads)
        threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:  # "cannot be modified after initialization"
        started = threading.get_intra_op_parallelism_threads() or "its default"
        raise RuntimeError(
            f"threads={threads}: TensorFlow has started in this process already, with "
            f"{started} intra-op threads; set the threads before it runs anything"
        ) from None


def vocabularies(version) -> tuple[ExportedVocabulary, ExportedVocabulary]:
    """The source and target vocabularies of a SavedModel version folder, from the files its
    `assets.extra/` holds (an imported model's `pieces.json` with its language codes, or the
    SentencePiece models, read by tensorflow-text), for the prefix checks
    (`check_prefixes`)."""
    extra = Path(version) / EXTRA
    if (extra / PIECES).exists():
        lists = json.loads((extra / PIECES).read_text(encoding="utf-8"))
        codes = lists.get("language_codes") or [
            token for token in lists["special_tokens"] if re.fullmatch(LANGUAGE_CODE, token)
        ]
        return (
            ExportedVocabulary(lists["source"], codes),
            ExportedVocabulary(lists["target"], codes),
        )
    names = ["shared.model"] * 2 if (extra / "shared.model").exists() else []
    names = names or ["source.model", "target.model"]
    missing = [name for name in names if not (extra / name).exists()]
    if missing:
        raise FileNotFoundError(f"{extra}: no {missing[0]} (the vocabulary of the SavedModel)")
    import tensorflow as tf
    import tensorflow_text

    found = []
    for name in names:
        with library_module("keras_transformer._logs").native_logs():
            tokenizer = tensorflow_text.SentencepieceTokenizer(model=(extra / name).read_bytes())
        pieces = tokenizer.id_to_string(tf.range(tokenizer.vocab_size())).numpy()
        found.append(ExportedVocabulary([p.decode("utf-8") for p in pieces]))
    return found[0], found[1]


class SavedModelTranslator:
    """Translates with a SavedModel's signatures: `serving_default`, `n_best` for several
    hypotheses, `serving_prefix` for a target prefix of the caller's.

    Args:
        version: str or path. The SavedModel's version folder (`resolve_version`).
        source_prefix: str or None. Text put in front of each source here, before the
            SavedModel reads it (`with_source_prefix`: a sentence that starts with a
            language code keeps its own); None leaves the sources to the SavedModel.
            Defaults to None.
        target_prefix: str or None. Text every translation starts with, given to the
            `serving_prefix` signature (a SavedModel without it is refused); None leaves
            it to the SavedModel. Defaults to None.
        threads: int. Threads of TensorFlow's intra-op and inter-op pools (`set_threads`),
            set before TensorFlow starts; 0 leaves TensorFlow's defaults. Defaults to 0.
        prefix_names: tuple of two str. What a refusal of the two prefixes above calls
            them (a program's flags). Defaults to ("source_prefix", "target_prefix").

    Raises:
        FileNotFoundError: no such folder, or no saved_model.pb in it (a model folder: its
            version folder is `resolve_version`'s; `kt.serving.open` takes either).
        ValueError: the folder is not a translation SavedModel of `trainers.export`, or a
            prefix names a language its vocabulary lacks.
        RuntimeError: `threads` where TensorFlow has started already with other numbers.
    """

    def __init__(
        self,
        version,
        *,
        source_prefix: str | None = None,
        target_prefix: str | None = None,
        threads: int = 0,
        prefix_names: tuple[str, str] = ("source_prefix", "target_prefix"),
    ):
        version = Path(version)
        if not (version / "saved_model.pb").is_file():
            problem = "no saved_model.pb in it" if version.is_dir() else "no such folder"
            problem = "a file, not a folder" if version.is_file() else problem
            raise FileNotFoundError(
                f"{version}: {problem}; SavedModelTranslator takes a SavedModel's version "
                "folder (kt.serving.resolve_version gives a model folder's highest)"
            )
        set_threads(threads)  # before the vocabularies' TensorFlow ops
        self.version = version
        self.threads, self.prefix_names = threads, prefix_names
        self._vocabularies = self._manifest = None
        self._check(source_prefix, target_prefix, names=prefix_names)
        self.source_prefix, self.target_prefix = source_prefix, target_prefix

        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

        self._tf = tf
        # Its SentencePiece ops load their models.
        with library_module("keras_transformer._logs").native_logs():
            self.loaded = tf.saved_model.load(str(version))
        serving = self.loaded.signatures.get("serving_default")
        inputs = serving.structured_input_signature[1] if serving is not None else {}
        if "text" not in inputs:
            raise ValueError(
                f"{version} is not a translation SavedModel of trainers.export: its "
                f"serving_default signature takes {sorted(inputs) or 'nothing'}, not `text`"
            )
        if target_prefix is not None:
            self._prefix_signature()

    @property
    def vocabularies(self) -> tuple[ExportedVocabulary, ExportedVocabulary]:
        """The source and target vocabularies (`vocabularies`), read on first use."""
        if self._vocabularies is None:
            self._vocabularies = vocabularies(self.version)
        return self._vocabularies

    @property
    def manifest(self) -> dict:
        """The export's manifest (`assets.extra/manifest.json`; {} for a SavedModel without
        one), read on first use (ValueError naming a damaged one: `read_manifest`)."""
        if self._manifest is None:
            path = self.version / MANIFEST
            self._manifest = read_manifest(path) if path.is_file() else {}
        return self._manifest

    @property
    def languages(self) -> dict[str, list[str]]:
        """The language codes the SavedModel takes as prefixes, by side ("source",
        "target"): an imported NLLB-200 model's; empty lists for another."""
        source, target = self.vocabularies
        return {"source": list(source.language_codes), "target": list(target.language_codes)}

    def _check(self, source_prefix, target_prefix, *, names=("source_prefix", "target_prefix")):
        if source_prefix is not None or target_prefix is not None:
            check_prefixes(*self.vocabularies, source_prefix, target_prefix, names=names)

    def n_best_problem(self, n_best: int, *, target_prefix: str | None = None) -> str | None:
        """Why `translate` cannot give `n_best` hypotheses a line (with `target_prefix`;
        None: the translator's), or None when it can."""
        target_prefix = self.target_prefix if target_prefix is None else target_prefix
        if n_best < 1:
            return "must be at least 1"
        if n_best == 1:
            return None
        if target_prefix is not None:
            return "a target prefix gives one hypothesis a sentence (the serving_prefix signature)"
        if "n_best" not in self.loaded.signatures:
            return "this SavedModel has no n_best signature; export it again"
        kept = self.loaded.signatures["n_best"].structured_outputs["translations"].shape[1]
        if kept is not None and n_best > kept:
            return f"the SavedModel keeps {kept} hypotheses (its beam size)"
        return None

    def _prefix_signature(self):
        if "serving_prefix" not in self.loaded.signatures:
            name = self.prefix_names[1]
            how = (  # a program's flag: the programs' way, else the library's
                "python -m trainers.export --prefix-signature (a target prefix a request), or "
                "--target-prefix TEXT (the export's own)"
                if name.startswith("--")
                else "kt.export.export(..., prefix_signature=True), or with the target prefix "
                "as its own"
            )
            raise ValueError(
                f"{self.version} has no serving_prefix signature, which takes {name}; export "
                f"it again with {how}"
            )
        return self.loaded.signatures["serving_prefix"]

    def translate(
        self,
        lines: Sequence[str | bytes],
        *,
        n_best: int = 1,
        source_prefix: str | None = None,
        target_prefix: str | None = None,
    ) -> list[list[Hypothesis]]:
        """The `n_best` best hypotheses of each line, best first, as the SavedModel gives
        them (`Hypothesis.ids` empty: the signatures answer text).

        Args:
            lines: sequence of str or bytes. Bytes go to the SavedModel as they are (it
                reads a byte that is not UTF-8 as U+FFFD).
            n_best: int. Hypotheses a line (the `n_best` signature's, at most the beam
                size). Defaults to 1.
            source_prefix: str or None. This call's source prefix, over the translator's.
                Defaults to None.
            target_prefix: str or None. This call's target prefix, over the translator's.
                Defaults to None.

        Returns:
            A list of `Hypothesis` lists, one a line.
        """
        tf = self._tf
        lines = lines_of(lines, "lines")
        self._check(source_prefix, target_prefix)
        source_prefix = self.source_prefix if source_prefix is None else source_prefix
        target_prefix = self.target_prefix if target_prefix is None else target_prefix
        text = tf.constant(
            [
                line.encode("utf-8", "surrogateescape") if isinstance(line, str) else line
                for line in (prefixed(line, source_prefix) for line in lines)
            ],
            tf.string,
        )
        if problem := self.n_best_problem(n_best, target_prefix=target_prefix):
            raise ValueError(f"n_best={n_best}: {problem}")
        if target_prefix is not None:
            prefixes = tf.constant([target_prefix] * len(lines), tf.string)
            return _best(self._prefix_signature()(text=text, target_prefix=prefixes))
        if n_best == 1:
            return _best(self.loaded.signatures["serving_default"](text=text))
        result = self.loaded.signatures["n_best"](text=text)
        translations, scores = result["translations"].numpy(), result["scores"].numpy()
        if n_best > translations.shape[1]:  # a signature whose count is not in its shape
            raise ValueError(
                f"n_best={n_best}: the SavedModel keeps {translations.shape[1]} hypotheses "
                "(its beam size)"
            )
        return [
            [
                Hypothesis([], t.decode("utf-8"), float(s))
                for t, s in zip(row[:n_best], row_scores[:n_best], strict=True)
            ]
            for row, row_scores in zip(translations, scores, strict=True)
        ]


def _best(result) -> list[list[Hypothesis]]:
    """The hypotheses of a `translation` and `score` answer, one a line."""
    return [
        [Hypothesis([], translation.decode("utf-8"), float(score))]
        for translation, score in zip(
            result["translation"].numpy(), result["score"].numpy(), strict=True
        )
    ]


__all__ = [
    "EXTRA",
    "MANIFEST",
    "SavedModelTranslator",
    "is_saved_model",
    "resolve_version",
    "set_threads",
    "vocabularies",
]

"""The contracts of the export formats (STYLE 21): `Translator`, what every runtime of an
export offers once open, `Runtime`, how the table opens one, and `Writer`, how
`kt.export.export` writes one. The three formats' runtimes (`SavedModelTranslator`,
`CTranslate2Translator`, `LiteRTTranslator`) and writers (`kt.export.savedmodel.write`,
`kt.export.ctranslate2.write`, `kt.export.litert.write`) implement them; the table of
formats (`kt.serving.formats`) names them, and the programs use nothing else of them.

It imports nothing but the standard library and `serving.common` (light: no TensorFlow).

Examples:
    A translator of your own stands in for the three:

    >>> from keras_transformer.serving import Hypothesis, Translator
    >>> class Echo:
    ...     manifest, languages, threads = {}, None, 0
    ...     def translate(self, lines, *, n_best=1, source_prefix=None, target_prefix=None):
    ...         return [[Hypothesis([], line, 0.0)] for line in lines]
    ...     def n_best_problem(self, n_best):
    ...         return None if n_best == 1 else "one translation a sentence"
    >>> isinstance(Echo(), Translator)
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from keras_transformer.serving.common import Hypothesis


@runtime_checkable
class Translator(Protocol):
    """An open export: text in, translations out. What `kt.serving.open` returns, and what
    `trainers.translate` and the benchmarks use of a runtime.

    Attributes:
        manifest: dict. The export's `manifest.json` ({} where it has none beside it).
        languages: dict or None. The language codes the export takes as prefixes, by side
            (`{"source": [...], "target": [...]}`: NLLB-200's), empty lists for a model
            without them; None where they are unknown (a LiteRT file apart from its
            manifest).
        threads: int. The threads it was opened with (0: its engine's default).
    """

    manifest: dict
    languages: dict[str, list[str]] | None
    threads: int

    def translate(
        self,
        lines: Sequence[str | bytes],
        /,
        *,
        n_best: int = 1,
        source_prefix: str | None = None,
        target_prefix: str | None = None,
    ) -> list[list[Hypothesis]]:
        """The `n_best` best hypotheses of each line, best first; the prefixes, when given,
        over the runtime's and the export's."""
        ...

    def n_best_problem(self, n_best: int, /) -> str | None:
        """Why `translate` cannot give `n_best` hypotheses a line, or None when it can."""
        ...


class Runtime(Protocol):
    """A runtime class, as the table of formats opens it: called with the path that the
    format's `locate` gives, and the options of `kt.serving.open`.

    Call arguments:
        path: str or path. The export (a SavedModel's version folder, a CTranslate2
            directory, a LiteRT file or its folder).
        source_prefix: str or None. The source prefix over the export's.
        target_prefix: str or None. The target prefix over the export's.
        threads: int. The engine's threads; 0 lets it choose.
        prefix_names: tuple of two str. What the errors call the two prefixes (a program's
            flags, "--source-prefix" and "--target-prefix").

    Returns:
        A `Translator`.
    """

    def __call__(
        self,
        path: Any,
        /,
        *,
        source_prefix: str | None = None,
        target_prefix: str | None = None,
        threads: int = 0,
        prefix_names: tuple[str, str] = ("source_prefix", "target_prefix"),
    ) -> Translator: ...


class Writer(Protocol):
    """A format's writer, as `kt.export.export` calls it: a task (or a directory it loads
    from, or a `Transformer` with its vocabularies) and the path to write, the decoding
    settings, the weights' type and the format's own options (the table's `options`).

    Call arguments:
        model: a `TransformerSeq2SeqLM`, a directory it loads from, or a `Transformer`.
        path: str or path. Where to write.
        vocabularies: the model's `kt.text.Vocabularies`; None takes the task's.
        decoding: `kt.decoding.DecodingSettings` or None; None takes the task's.
        quantize: str or None. The weights' type; None keeps float32.
        **options: the format's own (`manifest`, a SavedModel's `version`...).

    Returns:
        The path written (a SavedModel's version folder).
    """

    def __call__(
        self,
        model: Any,
        path: Any,
        /,
        *,
        vocabularies: Any = None,
        decoding: Any = None,
        quantize: str | None = None,
        **options: Any,
    ) -> Path: ...


__all__ = ["Runtime", "Translator", "Writer"]

"""The export formats, in one table (STYLE 21): each entry names the format, its writer, its
runtime, how a path that holds one is recognised, and the options its writer takes.
`kt.export.export(task, path, format=...)` writes by it, `kt.serving.open(path)` opens by it,
and `trainers.export` and `trainers.translate` read it for their flags and messages: a new
format is an entry here, with its writer and its runtime.

format        writer (kt.export.)   runtime (kt.serving.)   a path that holds one
savedmodel    savedmodel.write      SavedModelTranslator    saved_model.pb, or version folders
ctranslate2   ctranslate2.write     CTranslate2Translator   model.bin and manifest.json
litert        litert.write          LiteRTTranslator        a .tflite file, or model.tflite
web           web.write             LiteRTTranslator        index.html beside model.tflite

The table lives with the runtimes, which are light (no TensorFlow: `trainers.translate` reads
it without starting TensorFlow), and which the
writers import their constants from (the manifest's name, the model file's): a writer needs
TensorFlow, so the table names it by its module path, "module:function", and
`kt.export.export` imports it when it writes. The contracts are `kt.serving.protocols`'.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from keras_transformer.serving.ctranslate2 import MANIFEST as CTRANSLATE2_MANIFEST
from keras_transformer.serving.ctranslate2 import MODEL_FILE as CTRANSLATE2_MODEL
from keras_transformer.serving.ctranslate2 import CTranslate2Translator, is_ctranslate2
from keras_transformer.serving.litert import MANIFEST as LITERT_MANIFEST
from keras_transformer.serving.litert import MODEL_FILE as LITERT_MODEL
from keras_transformer.serving.litert import LiteRTTranslator, is_litert
from keras_transformer.serving.protocols import Runtime, Translator
from keras_transformer.serving.savedmodel import MANIFEST as SAVED_MODEL_MANIFEST
from keras_transformer.serving.savedmodel import (
    SavedModelTranslator,
    is_saved_model,
    resolve_version,
)
from keras_transformer.serving.web import PAGE as WEB_PAGE
from keras_transformer.serving.web import is_web

DEFAULT = "savedmodel"  # `kt.export.export`'s format, and `trainers.export --format`'s


@dataclasses.dataclass(frozen=True)
class Format:
    """One export format: its writer, its runtime, and what the programs say of it.

    Args:
        name: str. The format's name: `kt.export.export(..., format=name)`,
            `trainers.export --format name`.
        title: str. One export of it, in messages ("LiteRT file").
        caption: str. What `trainers.export` says it wrote ("SavedModel for TF Serving").
        signs: str. What `recognises` looks for, for the refusal of a path that holds no
            export ("model.tflite").
        recognises: callable path -> bool. Whether a path holds an export of this format.
        runtime: `kt.serving.protocols.Runtime`. The class that runs one.
        writer: str. Its `kt.serving.protocols.Writer`, "module:function", imported when
            `kt.export.export` writes (it needs TensorFlow).
        manifest_file: str. Its manifest.json, under the path the writer returns.
        quantize: tuple of str. The weight types its writer takes (`quantize=`; none keeps
            float32), as `trainers.export --quantize` offers them.
        options: tuple of str. The writer's keywords beside `kt.export.export`'s own.
        decides: tuple of str. The decoding settings its engine decides itself, whatever
            the settings say (CTranslate2's stopping rule). Defaults to ().
        scores: bool. Whether its runtime scores the translations. Defaults to True.
        versioned: bool. Whether the writer writes a numbered version folder under the path
            it is given (TF Serving's layout), where the others write the path itself.
            Defaults to False.
        locate: callable path -> path. The path the runtime takes, from one that
            `recognises` accepts (a SavedModel's model folder -> its highest version).
            Defaults to the path itself.

    Examples:
        >>> from keras_transformer.serving import formats
        >>> litert = formats.FORMATS["litert"]
        >>> litert.title, litert.runtime.__name__, litert.writer
        ('LiteRT file', 'LiteRTTranslator', 'keras_transformer.export.litert:write')
    """

    name: str
    title: str
    caption: str
    signs: str
    recognises: Callable[[Path], bool]
    runtime: Runtime
    writer: str
    manifest_file: str
    quantize: tuple[str, ...]
    options: tuple[str, ...]
    decides: tuple[str, ...] = ()
    scores: bool = True
    versioned: bool = False
    locate: Callable[[Path], Path] = Path

    def destination(self, path, version: int | None = None) -> Path | None:
        """The folder that an export at `path` writes: `path` itself, or a versioned
        format's `path/VERSION`; None for a versioned one without `version` (the next free
        number, which never exists)."""
        if not self.versioned:
            return Path(path)
        return None if version is None else Path(path) / str(version)

    def open(self, path, **options) -> Translator:
        """The runtime of the export at `path` (`locate`'s path), opened with `options`
        (`kt.serving.open`'s)."""
        return self.runtime(self.locate(Path(path)), **options)


FORMATS: dict[str, Format] = {
    entry.name: entry
    for entry in (
        Format(
            name="savedmodel",
            title="SavedModel",
            caption="SavedModel for TF Serving",
            signs="no saved_model.pb, no version folder",
            recognises=is_saved_model,
            runtime=SavedModelTranslator,
            writer="keras_transformer.export.savedmodel:write",
            manifest_file=SAVED_MODEL_MANIFEST,
            quantize=("int8", "bfloat16"),
            options=("manifest", "version", "prefix_signature"),
            versioned=True,
            locate=resolve_version,
        ),
        Format(
            name="ctranslate2",
            title="CTranslate2 model",
            caption="CTranslate2 model",
            signs=f"{CTRANSLATE2_MODEL} and {CTRANSLATE2_MANIFEST}",
            recognises=is_ctranslate2,
            runtime=CTranslate2Translator,
            writer="keras_transformer.export.ctranslate2:write",
            manifest_file=CTRANSLATE2_MANIFEST,
            quantize=("int8", "bfloat16", "int8_float32", "int8_float16", "int16", "float16"),
            options=("manifest",),
            decides=("stopping", "finish_rule"),
        ),
        Format(
            name="litert",
            title="LiteRT file",
            caption="LiteRT file",
            signs=LITERT_MODEL,
            recognises=lambda path: is_litert(path) and not is_web(path),  # not a site's
            runtime=LiteRTTranslator,
            writer="keras_transformer.export.litert:write",
            manifest_file=LITERT_MANIFEST,
            quantize=("int8", "int4", "float16"),
            options=("manifest", "int8_table", "ops", "batch"),
            scores=False,
        ),
        Format(
            name="web",
            title="web site",
            caption="static web site (LiteRT.js)",
            signs=f"{WEB_PAGE} beside {LITERT_MODEL}",
            recognises=is_web,
            runtime=LiteRTTranslator,  # the site's builtin-ops file, outside a browser
            writer="keras_transformer.export.web:write",
            manifest_file=LITERT_MANIFEST,
            quantize=("int8", "float16"),
            options=("manifest",),
            scores=False,
        ),
    )
}


def occupied(path) -> bool:
    """Whether `path` holds anything: a file, or a folder with anything in it (an empty
    folder is written into). `in_the_way` tells whether an export may replace it.

    Examples:
        >>> from keras_transformer.serving import formats
        >>> formats.occupied("saved_models/missing")
        False
    """
    path = Path(path)
    return path.is_symlink() or path.is_file() or (path.is_dir() and any(path.iterdir()))


def in_the_way(found: Format, path, version: int | None = None) -> tuple[Path, bool] | None:
    """What an export in `found`'s format at `path` (a SavedModel's `version`) would write
    over, or None: `(where, replaceable)`. `replaceable`: `where` holds an earlier export of
    this format, which `kt.export.export(..., overwrite=True)` and `trainers.export
    --overwrite` replace once the new one is complete. Anything else (a folder or file of
    one's own, another format's export, a model folder that holds more than versions and
    `keras/`) is never replaced: an export there is refused, with or without overwrite.

    Examples:
        >>> from keras_transformer.serving import formats
        >>> formats.in_the_way(formats.get("litert"), "on_device/missing") is None
        True
    """
    path = Path(path)
    if found.versioned and occupied(path):  # a model folder: versions and keras/ alone
        if not path.is_dir() or any(
            not (entry.name.isdigit() or entry.name == "keras") for entry in path.iterdir()
        ):
            return path, False
    where = found.destination(path, version)
    if where is None or not occupied(where):
        return None
    try:
        return where, where.is_dir() and found.recognises(where)
    except ValueError:  # its manifest is damaged: still this format's export
        return where, True


def get(name: str) -> Format:
    """The format named `name`.

    Raises:
        ValueError: no format has that name, naming each.

    Examples:
        >>> from keras_transformer.serving import formats
        >>> formats.get("ctranslate2").runtime.__name__
        'CTranslate2Translator'
        >>> formats.get("onnx")
        Traceback (most recent call last):
        ValueError: format='onnx' is not one of 'savedmodel', 'ctranslate2', 'litert', 'web'
    """
    if name not in FORMATS:
        raise ValueError(f"format={name!r} is not one of {', '.join(map(repr, FORMATS))}")
    return FORMATS[name]


def find(path) -> Format:
    """The format of the export at `path`: the first of the table that recognises it.

    Raises:
        FileNotFoundError: `path` holds no export, naming each format and what it was
            looked for by.
        ValueError: a CTranslate2 directory's manifest is damaged (`read_manifest`).

    Examples:
        >>> from keras_transformer.serving import formats
        >>> formats.find("saved_models/missing")
        Traceback (most recent call last):
        FileNotFoundError: saved_models/missing: not an exported model: no SavedModel (...
    """
    path = Path(path)
    for entry in FORMATS.values():
        if entry.recognises(path):
            return entry
    looked = [f"no {entry.title} ({entry.signs})" for entry in FORMATS.values()]
    raise FileNotFoundError(
        f"{path}: not an exported model: {', '.join(looked[:-1])} and {looked[-1]} in it"
    )


def open(path, **options) -> Translator:  # kt.serving.open, as io.open is open
    """The translator of the export at `path`, whatever its format: a SavedModel (its model
    folder, whose highest version is opened, or a version folder), a CTranslate2 directory,
    or a LiteRT file (or the folder that holds model.tflite).

    Args:
        path: str or path. The export.
        **options: the runtime's (`kt.serving.protocols.Runtime`): `source_prefix`,
            `target_prefix`, `threads`, `prefix_names`, and a runtime's own
            (`CTranslate2Translator`'s `compute_type`...).

    Returns:
        A `kt.serving.protocols.Translator`.

    Raises:
        FileNotFoundError: `path` holds no export (`find`).
        ValueError: a prefix its vocabulary lacks, a damaged manifest...

    Examples:
        Skipped by the doctests: it reads an export (`trainers.export` writes one).

        >>> from keras_transformer import serving  # doctest: +SKIP
        >>> translator = serving.open("saved_models/demo")  # doctest: +SKIP
        >>> translator.translate(["God is love."])[0][0].text  # doctest: +SKIP
    """
    return find(path).open(path, **options)


__all__ = ["DEFAULT", "FORMATS", "Format", "find", "get", "in_the_way", "occupied", "open"]

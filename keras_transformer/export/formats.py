"""`export`: a task (or a model and its vocabularies) written in any format of the table
(`kt.serving.formats.FORMATS`): a TF Serving SavedModel, a CTranslate2 model, a LiteRT
file or a web site, each by its format's writer (`kt.serving.protocols.Writer`), with one set of
arguments.

The formats, and each one's own options (`kt.serving.formats.FORMATS`):

- "savedmodel": `path/VERSION/`, a TF Serving SavedModel, text in and translations out
  (`kt.export.savedmodel.write`); options `manifest`, `version` (None: the next
  free number), `prefix_signature` (None: for a vocabulary with language codes).
  `quantize`: "int8" or "bfloat16".
- "ctranslate2": `path`, a CTranslate2 model directory (`kt.export.ctranslate2.write`;
  the optional `ctranslate2` package); option `manifest`. `quantize`: CTranslate2's
  weight types ("int8", "int8_float32", "int16", "float16"...).
- "litert": `path/model.tflite`, one LiteRT file for a device
  (`kt.export.litert.write`); options `manifest`, `int8_table` (with int8: "twice",
  the default, or "once"), `ops`: "text" (tensorflow-text's ops, strings in and out) or
  "builtin" (builtin ops only, UTF-8 bytes in and out, `kt.export.litert_builtin`),
  `batch` (a builtin-ops file's texts a run: its input `[batch, N]`; 1 by default).
  `quantize`: "int8", "int4" (ai-edge-quantizer; its table in int8; text ops only) or
  "float16".
- "web": `path`, a static web site that translates in the browser with LiteRT.js
  (`kt.export.web.write`): the builtin-ops LiteRT file and the page; option
  `manifest`. `quantize`: "int8" or "float16".

Each writes its `manifest.json` (`manifest`: extra facts for it), and `kt.serving.open`
runs what it wrote. The destination (`path`, or a SavedModel's `path/VERSION`) is written
complete or not at all: an earlier export of the format there is refused unless
`overwrite=True`, and then replaced only once the new export is complete (written beside it,
then swapped in), so a failed export leaves the earlier one as it was; anything else there (a
folder of one's own, another format's export) is never replaced
(`kt.serving.formats.in_the_way`).

The former per-format functions (`export_saved_model`, `kt.export.ctranslate2.
export_ctranslate2`, `export_litert`) are deprecated wrappers of the writers, with their
former arguments and a DeprecationWarning, for one release.
"""

from __future__ import annotations

import functools
import importlib
import shutil
from pathlib import Path

from keras_transformer._files import atomic_directory
from keras_transformer.decoding.settings import DecodingSettings
from keras_transformer.serving.formats import DEFAULT, get, in_the_way
from keras_transformer.serving.protocols import Writer


def writer(name: str) -> Writer:
    """The writer of the format named `name`, imported from the module the table names.

    Raises:
        ValueError: no format has that name, naming each.

    Examples:
        >>> from keras_transformer.export.formats import writer
        >>> writer("litert").__module__
        'keras_transformer.export.litert'
    """
    module, function = get(name).writer.split(":")
    return getattr(importlib.import_module(module), function)


def export(
    task_or_model,
    path,
    *,
    format: str = DEFAULT,
    decoding: DecodingSettings | None = None,
    quantize: str | None = None,
    vocabularies=None,
    overwrite: bool = False,
    **format_options,
) -> Path:
    """Writes an export of `task_or_model` at `path` in `format`, decoding with `decoding`.

    The formats and their own options: the module doc. The destination is written complete
    or not at all (the module doc).

    Args:
        task_or_model: a `TransformerSeq2SeqLM`, a directory
            `TransformerSeq2SeqLM.from_preset` loads, or a trained
            `keras_transformer.Transformer` (with `vocabularies`).
        path: str or path. Where to write (a SavedModel's model folder; the directory of
            the others).
        format: str. "savedmodel", "ctranslate2", "litert" or "web". Defaults to "savedmodel".
        decoding: `kt.decoding.DecodingSettings` or None: the search written into the
            export, or recorded in its manifest for its runtime (beam size, length penalty,
            prefixes...). None takes the task's, or the defaults (the paper's) for a
            `Transformer`. Defaults to None.
        quantize: str or None. The weights' type (the format's, above); None exports the
            model's float32 weights. Defaults to None.
        vocabularies: the model's `keras_transformer.text.Vocabularies`; None takes the
            task's. Defaults to None.
        overwrite: bool. Replace an existing export at the destination (the directory, or
            a SavedModel's `version`) once the new one is complete. Defaults to False.
        **format_options: the format's own options (above).

    Returns:
        The path written: a SavedModel's version folder, the others' directory.

    Raises:
        ValueError: an unknown format (naming each), or what its writer refuses (a
            setting or a model the format cannot hold), before anything is written.
        TypeError: an option the format does not take, naming those it does.
        FileExistsError: the destination (the directory, a SavedModel's version) holds an
            earlier export and `overwrite` is False, or anything else, naming it, before
            anything is loaded.

    Examples:
        Skipped by the doctests: an export takes a while (`docs/` runs them).

        >>> import keras_transformer as kt  # doctest: +SKIP
        >>> task = kt.models.TransformerSeq2SeqLM.from_preset("runs/demo")  # doctest: +SKIP
        >>> kt.export.export(task, "saved_models/demo")  # doctest: +SKIP
        >>> kt.export.export(task, "on_device/demo", format="litert")  # doctest: +SKIP

        An option another format takes is refused by name, before anything is loaded:

        >>> from keras_transformer import export
        >>> export.export("runs/demo", "x", format="litert", version=2)
        Traceback (most recent call last):
        TypeError: version=2: format='litert' takes no option version (its options: ...)
    """
    found = get(format)
    _check_arguments(found, decoding, format_options)
    destination = found.destination(path, format_options.get("version"))
    if blocked := in_the_way(found, path, format_options.get("version")):
        where, replaceable = blocked
        if not replaceable:
            raise FileExistsError(
                f"{where} exists and holds no earlier {found.title} export: an export never "
                "replaces it, overwrite=True or not; choose another path"
            )
        if not overwrite:
            raise FileExistsError(
                f"{where} exists (an earlier export): overwrite=True replaces it once the "
                "new export is complete"
            )
    write = functools.partial(
        writer(format),
        task_or_model,
        vocabularies=vocabularies,
        decoding=decoding,
        quantize=quantize,
        **format_options,
    )
    if destination is None or not (destination.exists() or destination.is_symlink()):
        return write(path)
    return _replaced(destination, write, found.versioned)


def _check_arguments(found, decoding, format_options: dict) -> None:
    """TypeError naming a `decoding` that is not settings, or an option `found` (a format)
    does not take, with those it does."""
    if decoding is not None and not isinstance(decoding, DecodingSettings):
        raise TypeError(
            f"decoding={decoding!r} must be a kt.decoding.DecodingSettings or None (the "
            "task's), e.g. kt.decoding.DecodingSettings(beam_size=4)"
        )
    for name, value in format_options.items():
        if name not in found.options:
            raise TypeError(
                f"{name}={value!r}: format={found.name!r} takes no option {name} (its options: "
                f"{', '.join(found.options)})"
            )


def _replaced(destination: Path, write, versioned: bool) -> Path:
    """`destination` replaced by what `write(path)` writes: written beside it, then swapped
    in, so that a failed export leaves it as it was. A `versioned` format writes
    `folder/VERSION`: a folder of its own beside, then moved."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    with atomic_directory(destination, replace=True) as temporary:
        folder = temporary.with_name(temporary.name + "-versions") if versioned else None
        try:
            written = write(temporary if folder is None else folder)
            if folder is not None:
                written.rename(temporary)
        finally:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
    return destination


__all__ = ["export", "writer"]

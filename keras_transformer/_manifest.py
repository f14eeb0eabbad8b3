"""`manifest.json`, the facts an export or a vocabulary directory carries (STYLE 14): one
writer for every export (`write_manifest`: this package, its version, the time, the model's
configuration and weights, then the format's own facts), and one reader for every door
(`read_manifest`), so that a damaged one is named with what is wrong with it (`ValueError:
runs/x/manifest.json: not valid JSON (Expecting ',' delimiter: line 3 column 5)`), never a
bare parser message.

It imports nothing but the standard library at its top: the light runtimes
(`keras_transformer.serving`) import it without Keras or TensorFlow.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

PACKAGE = "keras-transformer"  # every export manifest's "package"

# The JSON names of what `json.loads` may return, by their Python types' names.
JSON_KINDS = {
    "list": "array",
    "str": "string",
    "int": "number",
    "float": "number",
    "bool": "boolean",
    "NoneType": "null",
}
# The entries a runtime reads as JSON objects, with the keys every export writes in each.
OBJECTS = {"decoding": ("beam_size", "length_penalty", "max_extra_length")}


def read_manifest(path, *keys: str) -> dict:
    """The JSON object in the manifest file `path`, holding each of `keys`.

    Args:
        path: str or path. The `manifest.json` file.
        *keys: str. Top-level entries the caller reads ("decoding", "vocabulary"...).

    Returns:
        The manifest, a dict.

    Raises:
        FileNotFoundError: no such file (OSError for another read error).
        ValueError: naming `path` and what is wrong: not UTF-8, not valid JSON (the
            parser's message, line and column), not a JSON object, or without one of `keys`.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from keras_transformer._manifest import read_manifest
        >>> path = Path(tempfile.mkdtemp()) / "manifest.json"
        >>> _ = path.write_text('{"format": "litert"}')
        >>> read_manifest(path, "format")
        {'format': 'litert'}
        >>> _ = path.write_text("{format: litert}")
        >>> read_manifest(path)
        Traceback (most recent call last):
        ValueError: .../manifest.json: not valid JSON (Expecting ...: line 1 column 2); ...
    """
    path = Path(path)
    how = "export the model again, or restore the file from the export"
    try:
        manifest = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path}: not UTF-8 text ({error.reason} at byte {error.start}); {how}"
        ) from None
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        raise ValueError(f"{path}: not valid JSON ({error.msg}: {where}); {how}") from None
    if not isinstance(manifest, dict):
        kind = JSON_KINDS.get(type(manifest).__name__, type(manifest).__name__)
        raise ValueError(f"{path}: not a manifest: a JSON {kind}, not an object; {how}")
    missing = [key for key in keys if key not in manifest]
    if missing:
        raise ValueError(f"{path}: no {missing[0]!r} entry in it; {how}")
    for key in set(keys) & set(OBJECTS):  # entries read as objects, and what each holds
        entry = manifest[key]
        if not isinstance(entry, dict):
            kind = JSON_KINDS.get(type(entry).__name__, type(entry).__name__)
            raise ValueError(f"{path}: its {key!r} entry is a JSON {kind}, not an object; {how}")
        if absent := [name for name in OBJECTS[key] if name not in entry]:
            raise ValueError(f"{path}: no {key}.{absent[0]} in it; {how}")
    return manifest


def write_manifest(
    path, *, model_config: dict, quantize: str, facts: dict, extra: dict | None = None
) -> dict:
    """Writes an export's `manifest.json` at `path`: the facts every export carries, then
    the format's own, then the caller's.

    Every manifest holds `package` and `package_version` (this package's), `created` (UTC,
    ISO 8601), `model_config` and `quantize` (the type of the weights written: "float32",
    "int8"...). `facts` adds the format's own (its vocabulary, decoding settings,
    signatures...), and `extra` the caller's (an experiment, metrics), over both.

    Args:
        path: str or path. The file to write (in the export's folder, which is written
            atomically around it).
        model_config: dict. The model's `TransformerConfig.to_dict()`.
        quantize: str. The weights' type.
        facts: dict. The format's own entries.
        extra: dict or None. The caller's entries, over the others. Defaults to None.

    Returns:
        The manifest written, a dict.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from keras_transformer._manifest import read_manifest, write_manifest
        >>> path = Path(tempfile.mkdtemp()) / "manifest.json"
        >>> _ = write_manifest(
        ...     path, model_config={}, quantize="int8", facts={"format": "x"}, extra={"n": 1}
        ... )
        >>> manifest = read_manifest(path, "created")
        >>> manifest["package"], manifest["quantize"], manifest["format"], manifest["n"]
        ('keras-transformer', 'int8', 'x', 1)
    """
    from keras_transformer._version import __version__  # the package is imported: it exports

    manifest = {
        "package": PACKAGE,
        "package_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model_config": model_config,
        "quantize": quantize,
        **facts,
        **(extra or {}),
    }
    Path(path).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


__all__ = ["PACKAGE", "read_manifest", "write_manifest"]

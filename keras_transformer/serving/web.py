"""A site of `kt.export.web`: its constants and how a path that holds one is recognised. Its
runtime outside a browser is `LiteRTTranslator`, over the site's builtin-ops LiteRT file
(`model.tflite` and `manifest.json` beside the page), with LiteRT's stock interpreter.
"""

from __future__ import annotations

from pathlib import Path

from keras_transformer.serving.litert import MANIFEST, MODEL_FILE

FORMAT = "web"  # manifest.json's "format"
PAGE = "index.html"


def is_web(path) -> bool:
    """True for a directory that holds a site: `index.html`, `model.tflite` and
    `manifest.json`."""
    path = Path(path)
    return all((path / name).is_file() for name in (PAGE, MODEL_FILE, MANIFEST))


__all__ = ["FORMAT", "PAGE", "is_web"]

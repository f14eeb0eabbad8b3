"""Exports of a trained model for serving.

savedmodel.py    `export_saved_model`: a TF Serving SavedModel, text in, translations out
                 (tokenization and beam search in the graph)
precision.py     `reduced_precision`: the int8 or bfloat16 copy of a model that an export
                 writes with `quantize=`
ctranslate2.py   `export_ctranslate2`: a CTranslate2 model directory (the optional
                 `ctranslate2` package; imported on first use)
litert.py        `export_litert`: one LiteRT file for a device, text in, translations out
                 (tokenization, search and detokenization inside; imported on first use)
litert_bpe.py    `BpeCut`: SentencePiece's BPE cut in LiteRT's builtin ops, for litert.py
"""

from keras_transformer._backends import require_tensorflow

require_tensorflow("kt.export")

import importlib

from keras_transformer.export import precision
from keras_transformer.export.savedmodel import (
    MANIFEST,
    export_saved_model,
    next_version,
    translation_endpoints,
    write_saved_model,
)


def __getattr__(name: str):
    # ctranslate2.py needs the optional `ctranslate2` package only when it writes a model.
    if name in ("ctranslate2", "litert"):
        return importlib.import_module(f"{__name__}.{name}")
    if name == "export_litert":
        return importlib.import_module(f"{__name__}.litert").export_litert
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MANIFEST",
    "ctranslate2",
    "export_litert",
    "export_saved_model",
    "litert",
    "next_version",
    "precision",
    "translation_endpoints",
    "write_saved_model",
]

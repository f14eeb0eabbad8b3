"""Exports of a trained model for serving: `export(task, path, format=...)` writes any
format of the table (`kt.serving.formats`), by that format's writer.

formats.py       `export`, one door for every format, and `writer`
savedmodel.py    `write`: a TF Serving SavedModel, text in, translations out (tokenization
                 and beam search in the graph)
signatures.py    `translation_endpoints`: the SavedModel's signatures, each over one
                 `kt.decoding.DecodingPlan`
buckets.py       `pad_to_bucket`, `decode_sorted_in_chunks`: `serving_xla`'s batches for XLA
precision.py     `reduced_precision`: the int8 or bfloat16 copy of a model that an export
                 writes with `quantize=`
ctranslate2.py   `write`: a CTranslate2 model directory (the optional `ctranslate2`
                 package; imported on first use)
litert.py        `write`: one LiteRT file for a device, text in, translations out
                 (tokenization, search and detokenization inside; imported on first use):
                 the checks, the file and its manifest
litert_trace.py  `signatures`: the file's traced signatures (the search, the weights as
                 constants, how the tied embedding table is read)
litert_text.py   the file's tokenization and detokenization in ops a device runs
litert_convert.py  `convert`: LiteRT's converter, the weights' quantization (int8, float16;
                 int4 by ai-edge-quantizer) and `check_ops`, the refusal of other ops; in
                 two stages, `save_signatures` and `convert_saved_model`
litert_child.py  `convert_in_child`: `convert_saved_model` in a process of its own
litert_bpe.py    `BpeCut`: SentencePiece's BPE cut in LiteRT's builtin ops, for litert_text.py
litert_builtin.py  the bytes signature: litert.py's file of builtin ops alone
                 (`ops="builtin"`), UTF-8 bytes in and out, for the stock runtimes
litert_unigram.py  `UnigramCut`: SentencePiece's unigram cut of UTF-8 bytes in builtin ops
web.py           `write`: a static site that translates in the browser with LiteRT.js (the
                 builtin-ops file, the page, LiteRT.js from web_assets/)

The former names, `export_saved_model`, `ctranslate2.export_ctranslate2` and
`export_litert`, are deprecated: each does what `export(format=...)` does with its former
arguments, with a DeprecationWarning, and goes in the next release (the documentation's
list of deprecated names).
"""

from keras_transformer._backends import require_tensorflow

require_tensorflow("kt.export")

import importlib

from keras_transformer._deprecation import aliased
from keras_transformer.export import precision, savedmodel
from keras_transformer.export.formats import export, writer
from keras_transformer.export.savedmodel import (
    MANIFEST,
    next_version,
    translation_endpoints,
    write_saved_model,
)

# The former exporters under this package's names, which their warnings name (the modules'
# own warn under theirs).
export_saved_model = aliased(savedmodel.export_saved_model, f"{__name__}.export_saved_model")


def __getattr__(name: str):
    # ctranslate2.py needs the optional `ctranslate2` package only when it writes a model.
    if name in ("ctranslate2", "litert", "litert_builtin", "litert_unigram", "web"):
        return importlib.import_module(f"{__name__}.{name}")
    if name == "export_litert":
        litert = importlib.import_module(f"{__name__}.litert")
        return aliased(litert.export_litert, f"{__name__}.export_litert")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MANIFEST",
    "ctranslate2",
    "export",
    "export_litert",
    "export_saved_model",
    "litert",
    "next_version",
    "precision",
    "translation_endpoints",
    "web",
    "write_saved_model",
    "writer",
]

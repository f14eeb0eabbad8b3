"""Translators of the exported directories, in Python: text in, translations out, without
Keras or this library's models (the export's manifest and files say how to translate).

`open(path)` opens any export by what the path holds, through the table of formats:

formats.py       `FORMATS`, the table of the export formats (each one's writer, runtime,
                 signs and options), `open`, `find`, `get`
protocols.py     `Translator`, what every runtime offers (`translate`, `n_best_problem`,
                 `manifest`, `languages`, `threads`); `Runtime` and `Writer`, how the table
                 opens and writes one
ctranslate2.py   `CTranslate2Translator`: a CTranslate2 directory (`kt.export.ctranslate2`)
                 run with `ctranslate2` and `sentencepiece` alone, no TensorFlow
litert.py        `LiteRTTranslator`: a LiteRT file (`kt.export.litert`) run by LiteRT's
                 interpreter with tensorflow-text's ops, no TensorFlow or Keras imported
litert_bytes.py  the bytes of a builtin-ops LiteRT file (`kt.export.litert_builtin`): a
                 text's UTF-8 bytes in a 0-padded int32 row, and back
web.py           a site of `kt.export.web` (`is_web`); its file runs by `LiteRTTranslator`
pieces.py        `PieceRules`: text into the directory's pieces and back, as the export's
                 tokenizer cuts and joins them
savedmodel.py    `SavedModelTranslator`: a TF Serving SavedModel (`kt.export`) through its
                 signatures, with `tensorflow` and `tensorflow_text` alone
common.py        `Hypothesis` (what both return), `ExportedVocabulary` and `check_prefixes`
                 (the prefixes checked against an export's vocabulary), the source prefix
                 rule (`kt.core.rules.with_source_prefix`)

Each takes the decoding settings' source and target prefixes over the export's (NLLB-200's
language codes: `source_prefix="eng_Latn"`, `target_prefix="spa_Latn"`). `trainers.translate`
is the command line over them.

Nothing here imports TensorFlow, Keras or keras-hub at import time (nor does
`import keras_transformer`): `trainers.translate` runs a CTranslate2 directory without them.

Examples:
    >>> from keras_transformer import serving
    >>> serving.is_ctranslate2("saved_models/missing")
    False
    >>> [entry.title for entry in serving.FORMATS.values()]
    ['SavedModel', 'CTranslate2 model', 'LiteRT file', 'web site']
"""

from keras_transformer.serving.common import (
    ExportedVocabulary,
    Hypothesis,
    check_prefixes,
)
from keras_transformer.serving.ctranslate2 import CTranslate2Translator, is_ctranslate2
from keras_transformer.serving.formats import FORMATS, Format, find, open
from keras_transformer.serving.litert import LiteRTTranslator, is_litert
from keras_transformer.serving.pieces import PieceRules
from keras_transformer.serving.protocols import Translator
from keras_transformer.serving.savedmodel import (
    SavedModelTranslator,
    is_saved_model,
    resolve_version,
)

__all__ = [
    "FORMATS",
    "CTranslate2Translator",
    "ExportedVocabulary",
    "Format",
    "Hypothesis",
    "LiteRTTranslator",
    "PieceRules",
    "SavedModelTranslator",
    "Translator",
    "check_prefixes",
    "find",
    "is_ctranslate2",
    "is_litert",
    "is_saved_model",
    "open",
    "resolve_version",
]

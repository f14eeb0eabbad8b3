"""Readers of published checkpoints, into this library's `Transformer` and tokenizers.

bart            what the BART family shares in converting: the config's sizes and checks,
                the weight-name map, the decoding defaults; `convert` runs a family's
                converter (keras-hub's protocol: `convert_config`, `convert_weights`,
                `convert_tokenizer`)
bart_checkpoint what the BART family shares in reading: config.json, generation_config.json
                and the weights read and checked (without torch)
marian          OPUS-MT (Marian) models in Hugging Face transformers' format: `load_marian`;
                the directory read by `marian_checkpoint`, the vocabularies by `marian_vocab`,
                the generation settings by `marian_decoding`
m2m100          NLLB-200 and M2M100 (m2m100_418M, 1.2B) models in Hugging Face transformers'
                format: `load_m2m100`; the directory read by `m2m100_checkpoint`, their
                tokenizer files by `nllb_vocab` (NLLB-200's) and `m2m100_vocab` (M2M100's own)
family          the contract every family implements (`CheckpointFamily`, a Protocol), the one
                table that picks it by config.json's `model_type` (`FAMILIES`), and the one
                door every importer goes through (`import_checkpoint`)
checkpoint      deprecated alias of `marian`

Their tokenizers (`PieceVocabularyTokenizer`, `NllbTokenizer`, `M2M100Tokenizer`) live in
`kt.tokenizers`.

`load(path)` reads any of them as `(model, vocabularies)`, choosing by config.json's
`model_type`; `import_checkpoint(path, source_language=..., target_language=...)` gives also
the decoding settings, the files read and what to record (`TransformerSeq2SeqLM.from_preset`
and `trainers.import_pretrained` use it). Every refusal is a `CheckpointError`.
"""

from keras_transformer._backends import require_tensorflow

require_tensorflow("kt.pretrained")

from keras_transformer.pretrained.bart_checkpoint import CheckpointError  # noqa: E402
from keras_transformer.pretrained.family import (  # noqa: E402
    FAMILIES,
    CheckpointFamily,
    ImportedCheckpoint,
    import_checkpoint,
    load,
    model_type,
)
from keras_transformer.pretrained.m2m100 import M2M100Error, load_m2m100  # noqa: E402
from keras_transformer.pretrained.marian import MarianError, load_marian  # noqa: E402

LOADERS = FAMILIES  # the table's name before the families: model_type -> what reads it

__all__ = [
    "FAMILIES",
    "CheckpointError",
    "CheckpointFamily",
    "ImportedCheckpoint",
    "M2M100Error",
    "MarianError",
    "import_checkpoint",
    "load",
    "load_m2m100",
    "load_marian",
    "model_type",
]

"""Readers of published checkpoints, into this library's `Transformer` and tokenizers.

marian       OPUS-MT (Marian) models in Hugging Face transformers' format: `load_marian`
checkpoint   their directories read and checked (weights without torch)
tokenizer    `PieceVocabularyTokenizer`, SentencePiece pieces numbered by a vocabulary list
"""

from keras_transformer.backends import require_tensorflow

require_tensorflow("kt.pretrained")

from keras_transformer.pretrained.marian import load_marian

__all__ = ["load_marian"]

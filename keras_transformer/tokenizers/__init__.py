"""The in-graph tokenizers of imported models, beside keras-hub's `SentencePieceTokenizer`
(which a model trained here uses, `kt.text`).

pieces   `PieceVocabularyTokenizer`: SentencePiece pieces numbered by a vocabulary list, as
         OPUS-MT (Marian) models are made
nllb     `NllbTokenizer`: the same with NLLB-200's special tokens and language codes
m2m100   `M2M100Tokenizer`: NLLB's mechanism with M2M100's own rules (`__en__` language codes)

Each is registered with `keras.saving` (package "keras_transformer"), and `import
keras_transformer` imports this package, so a new process finds the tokenizer a saved
vocabulary names (`pieces.json`'s "tokenizer"). They run TensorFlow's and tensorflow-text's
ops, inside `tf.data` and a SavedModel's graph, whatever Keras's backend (as keras-hub's
tokenizers do).
"""

from keras_transformer._backends import require_tensorflow_package

require_tensorflow_package("kt.tokenizers")

from keras_transformer.tokenizers.m2m100 import M2M100Tokenizer  # noqa: E402
from keras_transformer.tokenizers.nllb import NllbTokenizer  # noqa: E402
from keras_transformer.tokenizers.pieces import PieceVocabularyTokenizer  # noqa: E402

__all__ = ["M2M100Tokenizer", "NllbTokenizer", "PieceVocabularyTokenizer"]

"""The translation model as keras-hub's task family: load a preset, `generate`, `fit` on
text, `save_to_preset`, export.

backbone.py       `TransformerBackbone`: the encoder-decoder (a keras-hub `Backbone`)
tokenizer.py      `TransformerTokenizer`: the source and target vocabularies (a `Tokenizer`)
preprocessor.py   `TransformerSeq2SeqLMPreprocessor`: text pairs to ids and labels
seq2seq_lm.py     `TransformerSeq2SeqLM`: the task (`from_preset`, `generate`, `fit`,
                  `save_to_preset`)
generation.py     what `generate` (and `kt.evaluation.Translator`) does around the search: the
                  inputs read, the one batching loop, the scores, keras-hub's samplers
checks.py         what `fit` and `evaluate` check of their text
presets.py        what `from_preset` loads: keras-hub presets, Marian checkpoints and
                  `trainers.train` model directories

The names follow keras-hub's `<Model><Role>` (as `BartSeq2SeqLM`): the model is the
Transformer of the paper, and no Keras or keras-hub name is taken. Each class is registered
with `keras.saving` (package "keras_transformer"), so keras-hub's own loaders find them once
`keras_transformer` is imported: `keras_hub.models.Seq2SeqLM.from_preset(directory)`
returns a `TransformerSeq2SeqLM`.

The task runs on TensorFlow and on JAX. Its text preprocessing (the tokenizers, the
`tf.data` pipeline `fit` builds from text) runs on the tensorflow and tensorflow-text
packages whatever Keras's backend, as keras-hub's does; the model, `generate`'s searches and
training run on the backend. Marian checkpoints (`kt.pretrained`) and the exports need
Keras's TensorFlow backend.
"""

from keras_transformer._backends import require_tensorflow_package

require_tensorflow_package("kt.models")

from keras_transformer.models.backbone import TransformerBackbone
from keras_transformer.models.preprocessor import TransformerSeq2SeqLMPreprocessor
from keras_transformer.models.seq2seq_lm import TransformerSeq2SeqLM
from keras_transformer.models.tokenizer import TransformerTokenizer

__all__ = [
    "TransformerBackbone",
    "TransformerSeq2SeqLM",
    "TransformerSeq2SeqLMPreprocessor",
    "TransformerTokenizer",
]

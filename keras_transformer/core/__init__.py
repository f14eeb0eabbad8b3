"""The light core: what the library and the light runtimes (CTranslate2's and LiteRT's, which
run without TensorFlow or Keras) share, in the standard library alone. Importing it (or
`keras_transformer.serving`) imports no TensorFlow, Keras or keras-hub.

settings.py      `DecodingSettings`: the one set of decoding settings every door takes
rules.py         the settings' rules, each written once: the prefixes (text, checks, ids),
                 source cutting, the output-length limit, the empty-input rule, the length
                 penalty
special_ids.py   the special token ids of every vocabulary and search
logs.py          TensorFlow's (and LiteRT's, SentencePiece's) start-up lines held to
                 `TF_CPP_MIN_LOG_LEVEL`
"""

from keras_transformer.core import logs, rules, settings, special_ids

__all__ = ["logs", "rules", "settings", "special_ids"]

"""The special token ids, the same in every vocabulary, model and search of this library
(written in `keras_transformer.core.special_ids`, light, and re-exported here): padding 0,
unknown 1, start of a target (BOS) 2, end of a sentence (EOS) 3."""

from keras_transformer.core.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID

__all__ = ["BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID"]

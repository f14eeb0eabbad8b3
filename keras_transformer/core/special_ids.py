"""The special token ids, the same in every vocabulary, model and search of this library:
padding 0, unknown 1, start of a target (BOS) 2, end of a sentence (EOS) 3. Imported models'
vocabularies are renumbered to them (`kt.pretrained`).

The one place they are written: `kt.config.PAD_ID`, `kt.text` and `kt.decoding` import them
from here.
"""

PAD_ID = 0
"""Padding, everywhere: in source and target ids, labels and vocabularies."""
UNK_ID = 1
"""A piece the vocabulary lacks."""
BOS_ID = 2
"""The first input of the decoder."""
EOS_ID = 3
"""The last token of every source and every translation."""

__all__ = ["BOS_ID", "EOS_ID", "PAD_ID", "UNK_ID"]

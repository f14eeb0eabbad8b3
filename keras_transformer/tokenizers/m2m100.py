"""M2M100's own tokenizer in the graph (`facebook/m2m100_418M` and `_1.2B`: transformers'
`M2M100Tokenizer`): NLLB's mechanism (`NllbTokenizer`: SentencePiece pieces numbered by a
list, special tokens and `__xx__` language codes split out of the text wherever they are) with
the rules of transformers' SentencePiece ("slow") tokenizer at the edges: a segment that ends
with whitespace gets no extra "▁", and decoding strips the text.

Text that transformers encodes with `src_lang="en"` is written here with its language code
first, `"__en__ Hello"`; the target language is a target prefix (`"__es__"`), as transformers'
`forced_bos_token_id`. `kt.pretrained.m2m100` makes the list (`vocab.json`'s ids).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.tokenizers.nllb import NllbTokenizer


@keras.saving.register_keras_serializable(package="keras_transformer")
class M2M100Tokenizer(NllbTokenizer):
    """SentencePiece pieces numbered by a list, with special tokens split out as transformers'
    `M2M100Tokenizer` splits them.

    Encoding: the text is split at the `special_tokens` strings (longest first), each one
    token; every other segment is cut by the SentencePiece model alone (which drops leading
    and trailing whitespace); each piece becomes its index in `pieces`, or `<unk>` (id 1)
    when the list lacks it. Decoding: ids -> pieces, the special ids and every special token
    left out (the language codes too, as `decode(..., skip_special_tokens=True)`), joined,
    "▁" read as a space, the text stripped.

    Args: those of `NllbTokenizer` (`proto`, `pieces`, `special_tokens`, `language_codes`,
        `lstrip_tokens`, `rstrip_tokens`).

    Examples:
        Skipped by the doctests: it needs an M2M100 checkpoint downloaded beforehand.

        >>> from keras_transformer.pretrained import m2m100
        >>> vocabularies = m2m100.load_vocabularies("m2m100_418M")  # doctest: +SKIP
        >>> ids = vocabularies.source.tokenize(["__en__ Hello world"])  # doctest: +SKIP

        `ids` hold `__en__`'s id, then the pieces'.
    """

    # NLLB's tokenizer (the `tokenizers` library's Metaspace) keeps a segment's trailing
    # whitespace as one more "▁"; SentencePiece alone, as here, drops it.
    trailing_whitespace_piece = False

    def _spaced(self, text):
        # transformers' M2M100Tokenizer strips the decoded text at both ends.
        return tf.strings.strip(text)


__all__ = ["M2M100Tokenizer"]

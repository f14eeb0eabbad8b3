"""NLLB-200's tokenizer in the graph: SentencePiece pieces numbered by a vocabulary list (with
fairseq's id offset, `kt.pretrained.m2m100` makes the list), the language codes and the other
special tokens split out of the text wherever they are, as transformers' `NllbTokenizer`
(the `tokenizers` library's, transformers 5) does.

Text that transformers' tokenizer would encode with `src_lang="fra_Latn"` is written here with
its language code first, `"fra_Latn Bonjour"`: the code is one token, the rest SentencePiece's
pieces, and the ids are the same (the source's EOS, as always, the data pipeline and the
searches add). The target language is not written into the text: the searches force it as the
first output token (`target_prefix`), as transformers' `forced_bos_token_id` does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import keras
import tensorflow as tf

from keras_transformer._ragged import concat_rows
from keras_transformer.tokenizers.pieces import (
    SPECIAL_PIECES,
    WORD_BOUNDARY,
    PieceVocabularyTokenizer,
)

# What the SentencePiece normalizer (nmt_nfkc) turns into a space: RE2's \s, vertical tab and
# Unicode's separators.
WHITESPACE = r"[\s\x0b\p{Z}]"


@keras.saving.register_keras_serializable(package="keras_transformer")
class NllbTokenizer(PieceVocabularyTokenizer):
    """SentencePiece pieces numbered by a list, with special tokens split out as transformers'
    `NllbTokenizer` splits them.

    Encoding: whitespace next to an `lstrip_tokens` (`rstrip_tokens`) token is dropped; the
    text is split at the `special_tokens` strings (longest first), each one token; every
    other segment is cut into pieces by the SentencePiece model, and a segment that ends
    with whitespace gets one more piece, "▁" (SentencePiece drops trailing whitespace;
    transformers' Metaspace pre-tokenizer keeps it as a "▁"); each piece becomes its index in
    `pieces`, or `<unk>` (id 1) when the list lacks it. Decoding: ids -> pieces, the special
    ids and every special token left out (the language codes too, as `decode(...,
    skip_special_tokens=True)`), joined, "▁" read as a space, the first one dropped.

    Args:
        proto: bytes (or their base64 text, as `get_config` gives). The serialized
            SentencePiece model that cuts the text.
        pieces: sequence of str. The vocabulary: `pieces[i]` is id i, starting with
            `SPECIAL_PIECES` (pad, unk, bos, eos), no piece twice.
        special_tokens: dict or None. Strings that are one token wherever they appear in the
            text, and their ids (the language codes among them). Defaults to None (none).
        language_codes: sequence of str. The special tokens that name a language, as
            `NllbTokenizer`'s `src_lang` and `tgt_lang` take them. Defaults to none.
        lstrip_tokens: sequence of str. Special tokens that take the whitespace before them
            (NLLB's `<mask>`). Defaults to none.
        rstrip_tokens: sequence of str. Special tokens that take the whitespace after them.
            Defaults to none.
        prefix_pattern: None. `PieceVocabularyTokenizer`'s; NLLB has none. Defaults to None.
        **kwargs: other `keras.layers.Layer` arguments (`name`...).

    Examples:
        Skipped by the doctests: it needs an NLLB-200 checkpoint downloaded beforehand.

        >>> from keras_transformer.pretrained import m2m100
        >>> vocabularies = m2m100.load_vocabularies("nllb-200-distilled-600M")  # doctest: +SKIP
        >>> ids = vocabularies.source.tokenize(["eng_Latn Hello world"])  # doctest: +SKIP

        `ids` hold the language code's id, then the pieces'.
    """

    # A segment that ends with whitespace gets one more "▁" (the `tokenizers` library's
    # Metaspace); `M2M100Tokenizer`, SentencePiece's own rule, sets it False.
    trailing_whitespace_piece = True

    def __init__(
        self,
        proto: bytes,
        pieces: Sequence[str],
        special_tokens: dict[str, int] | None = None,
        language_codes: Sequence[str] = (),
        lstrip_tokens: Sequence[str] = (),
        rstrip_tokens: Sequence[str] = (),
        prefix_pattern: str | None = None,
        **kwargs,
    ):
        super().__init__(
            proto, pieces, prefix_pattern=prefix_pattern, special_tokens=special_tokens, **kwargs
        )
        self.language_codes = [str(code) for code in language_codes]
        self.lstrip_tokens = [str(token) for token in lstrip_tokens]
        self.rstrip_tokens = [str(token) for token in rstrip_tokens]
        for name in ("language_codes", "lstrip_tokens", "rstrip_tokens"):
            unknown = [t for t in getattr(self, name) if t not in self.special_tokens]
            if unknown:
                raise ValueError(f"{name}: {unknown[0]!r} is not one of the special_tokens")
        for token, i in self.special_tokens.items():
            if not 0 <= i < len(self.pieces):
                size = len(self.pieces)
                raise ValueError(f"special_tokens[{token!r}]={i} is outside [0, {size})")
        skipped = set(range(len(SPECIAL_PIECES))) | set(self.special_tokens.values())
        # What each id decodes to: its piece, or nothing for the special ones.
        self._decoded_pieces = tf.constant(
            ["" if i in skipped else piece for i, piece in enumerate(self.pieces)]
        )

    def language_id(self, language: str) -> int:
        """The id of a language code ("spa_Latn"); ValueError naming the known ones."""
        if language not in self.language_codes:
            known = ", ".join(self.language_codes[:8])
            raise ValueError(
                f"language {language!r} is not one of this vocabulary's "
                f"{len(self.language_codes)} language codes ({known}, ...)"
            )
        return self.special_tokens[language]

    def split(self, texts) -> tf.RaggedTensor:
        """Strings `[batch]` -> pieces `[batch, (len)]` (see the class doc)."""
        import tensorflow_text

        texts = tf.convert_to_tensor(texts, tf.string)
        for token in self.lstrip_tokens:
            texts = tf.strings.regex_replace(texts, f"{WHITESPACE}+({re.escape(token)})", r"\1")
        for token in self.rstrip_tokens:
            texts = tf.strings.regex_replace(texts, f"({re.escape(token)}){WHITESPACE}+", r"\1")
        if not self.special_tokens:
            segments = tf.RaggedTensor.from_tensor(texts[:, None])
        else:
            # Longest first: of two tokens starting at one place, the longer is the token.
            tokens = sorted(self.special_tokens, key=lambda t: (-len(t), t))
            special = "|".join(re.escape(token) for token in tokens)
            segments = tensorflow_text.regex_split(texts, special, special)  # (batch, (segs))
        flat = segments.flat_values
        if self.special_tokens:
            is_special = tf.strings.regex_full_match(flat, special)
        else:
            is_special = tf.zeros_like(flat, tf.bool)
        specials = tf.RaggedTensor.from_row_lengths(
            tf.boolean_mask(flat, is_special), tf.cast(is_special, tf.int64)
        )  # (segments, (0 or 1))
        plain = tf.where(is_special, tf.constant(""), flat)
        trailing = ~is_special & tf.strings.regex_full_match(plain, f"(?s).*{WHITESPACE}")
        trailing &= self.trailing_whitespace_piece
        marks = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(tf.cast(trailing, tf.int32))], WORD_BOUNDARY),
            tf.cast(trailing, tf.int64),
        )  # (segments, (0 or 1)): the "▁" of trailing whitespace
        pieces = concat_rows(concat_rows(specials, self._segmenter.tokenize(plain)), marks)
        return tf.RaggedTensor.from_row_splits(pieces, segments.row_splits).merge_dims(1, 2)

    def detokenize(self, ids) -> tf.Tensor:
        """Ids `[batch, len]` (0-padded; or `[len]`) -> strings `[batch]` (or one string)."""
        ids = tf.convert_to_tensor(ids)
        if ids.shape.rank == 1:
            return self.detokenize(ids[None])[0]
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor()
        text = tf.strings.reduce_join(tf.gather(self._decoded_pieces, tf.cast(ids, tf.int32)), 1)
        return self._spaced(tf.strings.regex_replace(text, WORD_BOUNDARY, " "))

    def _spaced(self, text):
        """Decoded text, word boundaries already spaces, as the tokenizer's own decoding
        leaves it: here without the first word's boundary."""
        return tf.strings.regex_replace(text, "^ ", "")

    def get_config(self):
        return {
            **super().get_config(),
            "language_codes": self.language_codes,
            "lstrip_tokens": self.lstrip_tokens,
            "rstrip_tokens": self.rstrip_tokens,
        }

    def piece_rules(self) -> dict:
        """What `kt.text.Vocabularies` writes beside the piece lists (pieces.json) to make
        this tokenizer again: its class and the arguments the lists do not hold."""
        return {
            "tokenizer": keras.saving.get_registered_name(type(self)),
            "language_codes": self.language_codes,
            "lstrip_tokens": self.lstrip_tokens,
            "rstrip_tokens": self.rstrip_tokens,
        }


__all__ = ["NllbTokenizer"]

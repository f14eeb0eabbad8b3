"""A tokenizer whose ids come from a vocabulary list rather than from its SentencePiece model:
text -> SentencePiece pieces -> ids by the list, and back. OPUS-MT (Marian) models are made
so: `source.spm` and `target.spm` cut the text, `vocab.json` numbers the pieces.

It has the methods of keras-hub's `SentencePieceTokenizer` that this library uses
(`tokenize`, `detokenize`, `vocabulary_size`, `id_to_token`, `get_vocabulary`, `proto`), so
the data pipeline, the decoders and both exports take it unchanged; like keras-hub's, it runs
tensorflow-text's SentencePiece op inside `tf.data` and inside a SavedModel graph.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence

import keras
import tensorflow as tf

from keras_transformer import _logs
from keras_transformer import _workarounds as workarounds
from keras_transformer._ragged import concat_rows
from keras_transformer.special_ids import BOS_ID, EOS_ID, PAD_ID, UNK_ID

# The special ids' pieces, at this library's ids (pad 0, unk 1, bos 2, eos 3).
SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")
WORD_BOUNDARY = "\u2581"  # SentencePiece's mark of a word's start: a space in the text


@keras.saving.register_keras_serializable(package="keras_transformer")
class PieceVocabularyTokenizer(keras.layers.Layer):
    """SentencePiece segmentation numbered by a separate vocabulary list.

    Encoding, as transformers' `MarianTokenizer` does: the text is first split at the
    `special_tokens` strings (a literal "</s>" in the text is EOS there); in each other
    segment, a leading match of `prefix_pattern` (the `>>xx<<` target language of
    multilingual OPUS-MT models) stays one token and the rest is cut into pieces by the
    SentencePiece model; each piece becomes its index in `pieces`, or `<unk>` (id 1) when
    the list lacks it. Decoding: ids -> pieces, the special ids (pad, unk, bos, eos) left out,
    joined, "▁" read as a space, and stripped, as `decode(skip_special_tokens=True)`
    does (a piece the SentencePiece model lacks comes out as written).

    Args:
        proto: bytes (or their base64 text, as `get_config` gives). The serialized
            SentencePiece model that cuts the text.
        pieces: sequence of str. The vocabulary: `pieces[i]` is id i. Its first four entries
            must be `SPECIAL_PIECES` (this library's special ids), and no piece may repeat.
        prefix_pattern: str or None. An RE2 pattern; a segment starting with a match keeps
            that match as one token before the SentencePiece pieces. Defaults to None.
        special_tokens: dict or None. Strings that are one token wherever they appear in the
            text, and their ids. Defaults to None (none).
        **kwargs: other `keras.layers.Layer` arguments (`name`...).

    Examples:
        Skipped by the doctests: it needs an OPUS-MT checkpoint downloaded beforehand.

        >>> from keras_transformer.pretrained import marian
        >>> vocabularies = marian.load_vocabularies("opus-mt-en-es")  # doctest: +SKIP
        >>> ids = vocabularies.source.tokenize([">>es<< Hello world"])  # doctest: +SKIP

        `ids` are ragged, without EOS.
    """

    def __init__(
        self,
        proto: bytes,
        pieces: Sequence[str],
        prefix_pattern: str | None = None,
        special_tokens: dict[str, int] | None = None,
        **kwargs,
    ):
        kwargs.setdefault("trainable", False)
        kwargs.setdefault("dtype", "int32")
        super().__init__(**kwargs)
        pieces = [str(piece) for piece in pieces]
        if tuple(pieces[: len(SPECIAL_PIECES)]) != SPECIAL_PIECES:
            raise ValueError(
                f"pieces must start with {list(SPECIAL_PIECES)} (pad, unk, bos, eos); "
                f"they start with {pieces[: len(SPECIAL_PIECES)]}"
            )
        seen = set()
        for index, piece in enumerate(pieces):
            if piece in seen:
                raise ValueError(f"pieces[{index}]={piece!r} repeats an earlier piece")
            seen.add(piece)
        import tensorflow_text

        self.proto = base64.b64decode(proto) if isinstance(proto, str) else bytes(proto)
        self.pieces = pieces
        self.prefix_pattern = prefix_pattern
        self.special_tokens = {str(k): int(v) for k, v in (special_tokens or {}).items()}
        with _logs.native_logs():  # the op logs loading a model without a normalization table
            self._segmenter = tensorflow_text.SentencepieceTokenizer(self.proto, out_type=tf.string)
            workarounds.keep_sentencepiece_model(self._segmenter, self.proto)  # survives reseeding
        keys = list(pieces) + list(self.special_tokens)
        values = list(range(len(pieces))) + list(self.special_tokens.values())
        # A special token's own id wins over its place in the list.
        table = dict(zip(keys, values, strict=True))
        self._piece_ids = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(table)), tf.constant(list(table.values()), tf.int32)
            ),
            default_value=UNK_ID,
        )
        self._id_pieces = tf.constant(pieces)  # (vocab,)
        self.built = True

    def vocabulary_size(self) -> int:
        return len(self.pieces)

    def get_vocabulary(self) -> list[str]:
        return list(self.pieces)

    def id_to_token(self, id: int) -> str:
        if not 0 <= id < len(self.pieces):
            raise ValueError(f"id={id} is outside the vocabulary [0, {len(self.pieces)})")
        return self.pieces[id]

    def token_to_id(self, token: str) -> int:
        if token in self.special_tokens:
            return self.special_tokens[token]
        return self.pieces.index(token) if token in self.pieces else UNK_ID

    def split(self, texts) -> tf.RaggedTensor:
        """Strings `[batch]` -> pieces `[batch, (len)]` (see the class doc)."""
        texts = tf.convert_to_tensor(texts, tf.string)
        if not self.special_tokens:
            return self._split_segments(texts)
        import tensorflow_text

        special = "|".join(re.escape(token) for token in self.special_tokens)
        segments = tensorflow_text.regex_split(texts, special, special)  # (batch, (segments))
        flat = segments.flat_values
        is_special = tf.strings.regex_full_match(flat, special)
        specials = tf.RaggedTensor.from_row_lengths(
            tf.boolean_mask(flat, is_special), tf.cast(is_special, tf.int64)
        )  # (segments, (0 or 1))
        plain = self._split_segments(tf.where(is_special, tf.constant(""), flat))
        pieces = concat_rows(specials, plain)  # (segments, (len))
        return tf.RaggedTensor.from_row_splits(pieces, segments.row_splits).merge_dims(1, 2)

    def _split_segments(self, texts) -> tf.RaggedTensor:
        """Strings without special tokens -> the prefix token, then SentencePiece's pieces."""
        if self.prefix_pattern is None:
            return self._segmenter.tokenize(texts)
        rest = tf.strings.regex_replace(
            texts, f"^(?s:{self.prefix_pattern})", "", replace_global=False
        )
        prefix_length = tf.strings.length(texts) - tf.strings.length(rest)  # bytes
        has_prefix = prefix_length > 0  # (batch,)
        prefixes = tf.strings.substr(texts, tf.zeros_like(prefix_length), prefix_length)
        prefixes = tf.RaggedTensor.from_row_lengths(
            tf.boolean_mask(prefixes, has_prefix), tf.cast(has_prefix, tf.int64)
        )  # (batch, (0 or 1))
        return concat_rows(prefixes, self._segmenter.tokenize(rest))

    def tokenize(self, texts) -> tf.RaggedTensor:
        """Strings `[batch]` (or one string) -> int32 ids `[batch, (len)]` (or `[len]`),
        without EOS."""
        texts = tf.convert_to_tensor(texts, tf.string)
        if texts.shape.rank == 0:
            return self.tokenize(texts[None])[0]
        return tf.ragged.map_flat_values(self._piece_ids.lookup, self.split(texts))

    def detokenize(self, ids) -> tf.Tensor:
        """Ids `[batch, len]` (0-padded; or `[len]`) -> strings `[batch]` (or one string)."""
        ids = tf.convert_to_tensor(ids)
        if ids.shape.rank == 1:
            return self.detokenize(ids[None])[0]
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor()
        ids = tf.cast(ids, tf.int32)
        special = (ids == PAD_ID) | (ids == UNK_ID) | (ids == BOS_ID) | (ids == EOS_ID)
        pieces = tf.ragged.boolean_mask(tf.gather(self._id_pieces, ids), ~special)
        text = tf.strings.reduce_join(pieces, axis=1)
        return tf.strings.strip(tf.strings.regex_replace(text, WORD_BOUNDARY, " "))

    def call(self, inputs):
        return self.tokenize(inputs)

    def get_config(self):
        return {
            **super().get_config(),
            "proto": base64.b64encode(self.proto).decode("ascii"),
            "pieces": self.pieces,
            "prefix_pattern": self.prefix_pattern,
            "special_tokens": self.special_tokens,
        }


__all__ = ["PieceVocabularyTokenizer"]

"""The LiteRT file's text, in ops a device runs: the source text cut into ids and the ids
given back as text (`kt.export.litert` writes the file; the module doc there says where the
file's text differs from the SavedModel's).

- tokenization: tensorflow-text's `FastSentencepieceTokenizer` over the source vocabulary's
  SentencePiece model (a unigram one), or SentencePiece's BPE cut in builtin ops
  (`kt.export.litert_bpe`, NLLB-200's), cut to `max_length - 1` tokens, then EOS
  (`source_ids`, `bpe_source_ids`);
- detokenization: each id's text from a table in the file (`piece_surfaces`,
  `surface_tables`), joined by tensorflow-text's `NgramsStringJoin` over the whole row
  (`translations`).
"""

from __future__ import annotations

import re

import tensorflow as tf

from keras_transformer.special_ids import EOS_ID, PAD_ID

WORD_BOUNDARY = "\u2581"  # SentencePiece's mark of a word's start
UNK_SURFACE = " \u2047 "  # SentencePiece's text for <unk>


def source_ids(tokenizer, text, max_length: int, ours=None):
    """Strings `[batch]` -> int32 ids `[batch, len]`: the pieces cut to `max_length - 1`,
    then EOS, 0-padded (as the preprocessor's `source_ids`, with builtin ops). `ours`, if
    given, maps SentencePiece's ids to the vocabulary's (`our_ids`)."""
    tokens = tokenizer.tokenize(text)  # (batch, (len))
    lengths = tf.cast(tf.minimum(tokens.row_lengths(), max_length - 1), tf.int32)[:, None]
    dense = tf.cast(tokens.to_tensor(), tf.int32)[:, : max_length - 1]
    if ours is not None:
        dense = tf.gather(ours, dense)  # padding maps too: masked below
    dense = tf.pad(dense, [[0, 0], [0, 1]])
    column = tf.range(tf.shape(dense)[1])[None, :]  # (1, len)
    return tf.where(column == lengths, EOS_ID, tf.where(column < lengths, dense, PAD_ID))


def bpe_source_ids(cut, text, code, max_length: int, ours=None, trailing=None):
    """Strings `[batch]` -> int32 ids `[batch, len]` as the library's NLLB tokenizer and
    preprocessor lay them out: the source language code (`code`, int32 `[batch]`, -1 for
    none, -2 for an unknown one), the text's BPE pieces (`kt.export.litert_bpe`), the piece
    `trailing` if the text ends with whitespace, cut to `max_length - 1`, then EOS,
    0-padded. A blank text, or an unknown code, gives EOS alone."""
    pieces, blank, spaced = cut(text)  # (batch, len), -1 after the end
    ids = pieces
    if ours is not None:
        ids = tf.where(pieces >= 0, tf.gather(ours, tf.maximum(pieces, 0)), -1)
    skip = blank | (code == -2)
    ids = tf.where(skip[:, None], -1, ids)
    none = tf.fill([tf.shape(ids)[0], 1], -1)
    with_code = tf.concat([tf.where(skip, -1, code)[:, None], ids], 1)
    ids = tf.where((code >= 0)[:, None], with_code, tf.concat([ids, none], 1))
    if trailing is not None:
        ids = tf.concat([ids, none], 1)
        lengths = tf.reduce_sum(tf.cast(ids >= 0, tf.int32), axis=1, keepdims=True)
        column = tf.range(tf.shape(ids)[1])[None, :]
        ids = tf.where((column == lengths) & (spaced & ~skip)[:, None], trailing, ids)
    ids = tf.concat([ids[:, : max_length - 1], none], 1)
    lengths = tf.reduce_sum(tf.cast(ids >= 0, tf.int32), axis=1, keepdims=True)
    column = tf.range(tf.shape(ids)[1])[None, :]
    return tf.where(column == lengths, EOS_ID, tf.where(column < lengths, ids, PAD_ID))


def piece_surfaces(
    pieces: list[str], *, unk: str = UNK_SURFACE, byte_pieces: bool = True, silent=()
) -> tuple[list[bytes], list[bool]]:
    """The text of each id as SentencePiece decodes it, in two parts: `(texts, spaces)`,
    each `[vocab]`: the text after the word-boundary mark a piece starts with, and whether
    it starts with one (a space inside a text; nothing as its first piece). Special ids
    give b"", `<unk>` gives `unk` (SentencePiece's " ⁇ "; "" for a piece vocabulary, which
    leaves it out), a byte piece `<0xNN>` its byte (with `byte_pieces`); the ids of `silent`
    (NLLB-200's language codes and other special tokens) give b"" too."""
    silent = set(silent)

    def surface(i: int, piece: str) -> tuple[bytes, bool]:
        if piece in ("<pad>", "<s>", "</s>") or i in silent:
            return b"", False
        if piece == "<unk>":
            return unk.encode(), False
        byte = re.fullmatch(r"<0x([0-9A-F]{2})>", piece) if byte_pieces else None
        if byte:
            return bytes([int(byte.group(1), 16)]), False
        space = piece.startswith(WORD_BOUNDARY)
        return piece[space:].replace(WORD_BOUNDARY, " ").encode(), space

    surfaces = [surface(i, piece) for i, piece in enumerate(pieces)]
    texts, spaces = zip(*surfaces, strict=True) if pieces else ((), ())
    return list(texts), list(spaces)


def translations(surfaces, ids, source_ids, max_length: int):
    """Ids `[batch, out_len]` (EOS-terminated, 0-padded) -> strings `[batch]`: each id's text
    (`surface_tables`: the texts then "" and " ", the spaces, and whether an id shows
    anything), after its space (none before the first that shows), joined; "" where the
    source holds nothing but EOS."""
    import tensorflow_text

    texts, spaces, shown = surfaces
    vocab = tf.shape(spaces)[0]
    empty = tf.math.count_nonzero(source_ids, axis=1) <= 1  # (batch,)
    ids = tf.where(empty[:, None], PAD_ID, ids)
    ids = tf.reshape(tf.pad(ids, [[0, 0], [0, max_length - tf.shape(ids)[1]]]), [-1, max_length])
    is_text = tf.cast(tf.gather(shown, ids), tf.int32) > 0  # (batch, max_length)
    first = tf.argmax(tf.cast(is_text, tf.int32), axis=1, output_type=tf.int32)[:, None]
    column = tf.range(max_length)[None, :]
    space = tf.cast(tf.gather(spaces, ids), tf.int32) * tf.cast(column != first, tf.int32)
    # Each position's space ("" or " ": texts' last two) then its text.
    order = tf.reshape(tf.stack([vocab + space, ids], axis=2), [-1, 2 * max_length])
    joined = tensorflow_text.ngrams(
        tf.gather(texts, order),
        2 * max_length,
        reduction_type=tensorflow_text.Reduction.STRING_JOIN,
        string_separator="",
    )  # (batch, 1): one window, the whole row
    return tf.reshape(joined, [-1])


def surface_tables(texts: list[bytes], spaces: list[bool]):
    """`piece_surfaces`' parts as the constants `translations` reads: the texts then ""
    and " ", the spaces as int8 (a byte an id), and whether each id shows anything (a text
    or a space), int8."""
    shown = [int(bool(text) or space) for text, space in zip(texts, spaces, strict=True)]
    return (
        tf.constant([*texts, b"", b" "]),
        tf.constant([int(s) for s in spaces], tf.int8),
        tf.constant(shown, tf.int8),
    )


def our_ids(tokenizer) -> list[int]:
    """SentencePiece id -> the id of its piece in a piece vocabulary (`<unk>` where the
    list lacks it), for `PieceVocabularyTokenizer`s (OPUS-MT)."""
    import sentencepiece

    model = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.proto)
    return [tokenizer.token_to_id(model.id_to_piece(i)) for i in range(model.get_piece_size())]


def model_type(proto: bytes) -> str:
    """A SentencePiece model's type: "UNIGRAM", "BPE", "WORD" or "CHAR"."""
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(proto)
    return sentencepiece_model_pb2.TrainerSpec.ModelType.Name(model.trainer_spec.model_type)


def longest_piece(proto: bytes) -> int:
    """The characters of a SentencePiece model's longest piece."""
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(proto)
    return max(len(piece.piece) for piece in model.pieces)


def is_nllb(tokenizer) -> bool:
    """Whether a tokenizer is NLLB-200's (not M2M100's, which decodes otherwise)."""
    from keras_transformer.tokenizers.nllb import NllbTokenizer

    return type(tokenizer) is NllbTokenizer


def trailing_piece(tokenizer) -> bool:
    """Whether a tokenizer gives trailing whitespace a piece of its own (NLLB-200's)."""
    return is_nllb(tokenizer) and tokenizer.trailing_whitespace_piece


__all__ = [
    "UNK_SURFACE",
    "WORD_BOUNDARY",
    "bpe_source_ids",
    "is_nllb",
    "longest_piece",
    "model_type",
    "our_ids",
    "piece_surfaces",
    "source_ids",
    "surface_tables",
    "trailing_piece",
    "translations",
]

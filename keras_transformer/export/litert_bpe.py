"""SentencePiece's BPE cut in LiteRT's builtin ops, for the LiteRT file of a model whose
source SentencePiece model is BPE (NLLB-200's): tensorflow-text's
`FastSentencepieceTokenizer` cuts every model as unigram, so it cannot cut a BPE model.

Two parts, both built once at export time from the BPE model:

1. The characters: a second SentencePiece model, unigram, whose pieces are the BPE model's
   single characters (its normalizer the same: the precompiled charsmap, the dummy prefix,
   the whitespace rules). `FastSentencepieceTokenizer` over it has one cut, a piece a
   character, and normalizes the text as SentencePiece does; a run of characters the model
   lacks is one `<unk>`, as SentencePiece's BPE leaves it. Whether a text ends with
   whitespace (a piece of its own, "▁", in the library's NLLB tokenizer, where the normalizer
   drops it) is read from its last bytes (`ends_with_space`).
2. The merges, as SentencePiece's `bpe_model.cc` makes them: while two neighbouring symbols
   make a piece, the pair whose piece scores highest is merged (ties: the leftmost). A
   `tf.while_loop` merges one pair a row a turn; the pairs are looked up in a hash table of
   int32 constants, `(left id, right id) -> merged id`, open addressing with `probes`
   slots read by `gather` (`merge_table`).

A word's pieces never hold a word boundary but at their start, so no merge crosses a word:
cutting the characters at `max_chars` changes none of the first tokens that fit the model.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

# The UTF-8 ends of what the library's NLLB tokenizer takes for trailing whitespace (RE2's
# `[\s\x0b\p{Z}]`): \t \n \v \f \r, space, U+00A0, U+1680, U+2000-U+200A, U+2028,
# U+2029, U+202F, U+205F, U+3000.
_SPACE_BYTES = [(b,) for b in b"\t\n\x0b\x0c\r "] + [
    tuple(chr(c).encode())
    for c in [0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
]
_NO = -1  # no symbol (padding), no merge


def character_model(proto: bytes) -> tuple[bytes, list[int]]:
    """The unigram model of the BPE model's characters (part 1 of the module doc), and its
    ids' ids in the BPE model.

    Raises:
        ValueError: the model is not BPE, or has pieces the file's cut does not make
            (user-defined or unused pieces, byte fallback, no dummy prefix, a piece of a
            character that is not a piece).
    """
    from sentencepiece import sentencepiece_model_pb2 as pb

    model = pb.ModelProto()
    model.ParseFromString(proto)
    kinds = pb.ModelProto.SentencePiece
    if model.trainer_spec.model_type != pb.TrainerSpec.BPE:
        raise ValueError("character_model reads a BPE SentencePiece model")
    odd = [p.piece for p in model.pieces if p.type in (kinds.USER_DEFINED, kinds.UNUSED)]
    if odd or model.trainer_spec.byte_fallback or not model.normalizer_spec.add_dummy_prefix:
        raise ValueError(
            "the source BPE SentencePiece model has user-defined or unused pieces, byte "
            f"fallback or no dummy prefix ({odd[:3]}): the LiteRT file's cut does not make them"
        )
    single = {p.piece for p in model.pieces if p.type == kinds.NORMAL and len(p.piece) == 1}
    odd = [p.piece for p in model.pieces if p.type == kinds.NORMAL and not set(p.piece) <= single]
    if odd:  # SentencePiece's BPE trainer makes none: its pieces are made of its characters
        raise ValueError(
            f"the source BPE SentencePiece model has pieces of characters it lacks ({odd[:3]}): "
            "the LiteRT file's cut does not make them"
        )
    characters = pb.ModelProto()
    characters.CopyFrom(model)
    characters.trainer_spec.model_type = pb.TrainerSpec.UNIGRAM
    del characters.pieces[:]
    ids = []
    for i, piece in enumerate(model.pieces):
        if piece.type == kinds.NORMAL and len(piece.piece) != 1:
            continue
        kept = characters.pieces.add()
        kept.CopyFrom(piece)
        kept.score = 0.0  # one cut: every piece is one character
        ids.append(i)
    return characters.SerializeToString(), ids


def merge_table(proto: bytes, load: float = 0.5) -> dict:
    """The merges of a BPE model as int32 arrays (part 2 of the module doc): `left`,
    `right`, `merged` `[slots]` (-1 where empty), `rank` `[vocab]` (0 for the highest score,
    equal scores equal ranks), `probes` (slots a lookup reads) and the hash's multipliers."""
    import sentencepiece

    model = sentencepiece.SentencePieceProcessor(model_proto=proto)
    size = model.get_piece_size()
    normal = [
        i
        for i in range(size)
        if not (model.is_control(i) or model.is_unknown(i) or model.is_unused(i))
    ]
    ids = {model.id_to_piece(i): i for i in normal}
    pairs = [
        (ids[piece[:k]], ids[piece[k:]], i)
        for piece, i in ids.items()
        for k in range(1, len(piece))
        if piece[:k] in ids and piece[k:] in ids
    ]
    scores = np.array([model.get_score(i) for i in range(size)], np.float64)
    rank = np.searchsorted(np.unique(-scores), -scores).astype(np.int32)
    slots = 1 << max(4, int(np.ceil(np.log2(max(len(pairs), 1) / load))))
    # Multipliers small enough that the hash stays inside int32: id * m < 2**30.
    largest = (2**30) // max(size, 1)
    best = None
    for left_m, right_m in ((31, 1), (1021, 7), (4093, 131), (2039, 3), (509, 17)):
        left_m, right_m = min(left_m, largest), min(right_m, largest)
        table = _fill(pairs, slots, left_m, right_m)
        if table is not None and (best is None or table["probes"] < best["probes"]):
            best = table
    return {**best, "rank": rank, "slots": slots}


def _fill(pairs, slots: int, left_m: int, right_m: int) -> dict | None:
    """Linear probing from `(left * left_m + right * right_m) % slots`."""
    left = np.full(slots, _NO, np.int32)
    right = np.full(slots, _NO, np.int32)
    merged = np.full(slots, _NO, np.int32)
    probes = 1
    for a, b, c in pairs:
        start = (a * left_m + b * right_m) % slots
        for step in range(slots):
            slot = (start + step) % slots
            if merged[slot] == _NO:
                left[slot], right[slot], merged[slot] = a, b, c
                probes = max(probes, step + 1)
                break
    return {
        "left": left,
        "right": right,
        "merged": merged,
        "probes": probes,
        "multipliers": (left_m, right_m),
    }


class BpeCut:
    """SentencePiece's BPE cut of strings in the graph, of builtin ops and
    `FastSentencepieceTokenizer` (see the module doc).

    Args:
        proto: bytes. The serialized BPE SentencePiece model.
        max_chars: int. Characters a text is cut to before the merges.
    """

    def __init__(self, proto: bytes, max_chars: int):
        import sentencepiece
        import tensorflow_text

        characters, ids = character_model(proto)
        self.max_chars = max_chars
        self._tokenizer = tensorflow_text.FastSentencepieceTokenizer(characters)
        self._ids = tf.constant(ids, tf.int32)  # character model id -> BPE id
        self.merge = Merges(proto)
        model = sentencepiece.SentencePieceProcessor(model_proto=proto)
        self.boundary_id = model.piece_to_id("\u2581")

    def __call__(self, text):
        """Strings `[batch]` -> `(ids, blank, trailing)`: the BPE model's ids int32
        `[batch, len]` (-1 after each row's end), whether a text is blank (the normalizer
        leaves nothing), and whether it ends with whitespace (`ends_with_space`)."""
        characters = self._tokenizer.tokenize(text)  # (batch, (chars))
        lengths = tf.cast(characters.row_lengths(), tf.int32)
        dense = tf.cast(characters.to_tensor(-1), tf.int32)[:, : self.max_chars]
        ids = tf.gather(self._ids, tf.maximum(dense, 0))
        column = tf.range(tf.shape(dense)[1])[None, :]
        symbols = tf.where(column < lengths[:, None], ids, _NO)  # (batch, chars)
        return self.merge(symbols), lengths == 0, ends_with_space(text)


class Merges:
    """The merges of a BPE SentencePiece model in builtin ops (part 2 of the module doc).

    Args:
        proto: bytes. The serialized BPE SentencePiece model.

    Call arguments:
        symbols: int32 `[batch, len]`. BPE ids, -1 after each row's end.

    Returns:
        int32 `[batch, len]`: the symbols merged until no pair makes a piece, -1 after.
    """

    def __init__(self, proto: bytes):
        table = merge_table(proto)
        self._left = tf.constant(table["left"])
        self._right = tf.constant(table["right"])
        self._merged = tf.constant(table["merged"])
        self._rank = tf.constant(table["rank"])
        self._probes = table["probes"]
        self._multipliers = table["multipliers"]
        self._slots = table["slots"]

    def __call__(self, symbols):
        """BPE ids `[batch, len]` (-1 after the end) merged until no pair makes a piece."""
        width = tf.shape(symbols)[1]
        column = tf.range(width)[None, :]
        none = tf.constant(2**31 - 1, tf.int32)

        def body(symbols, _):
            merged = self._lookup(symbols[:, :-1], symbols[:, 1:])  # (batch, len - 1)
            rank = tf.where(merged >= 0, tf.gather(self._rank, tf.maximum(merged, 0)), none)
            best = tf.reduce_min(rank, axis=1, keepdims=True)  # (batch, 1)
            at = tf.reduce_min(tf.where(rank == best, column[:, :-1], width), 1, keepdims=True)
            value = tf.reduce_max(tf.where(column[:, :-1] == at, merged, _NO), 1, keepdims=True)
            shifted = tf.concat([symbols[:, 1:], tf.fill([tf.shape(symbols)[0], 1], _NO)], 1)
            merging = best < none  # (batch, 1)
            step = tf.where(column < at, symbols, tf.where(column == at, value, shifted))
            return tf.where(merging, step, symbols), tf.reduce_any(merging)

        symbols, _ = tf.while_loop(
            lambda symbols, going: going,
            body,
            (symbols, tf.shape(symbols)[1] > 1),
            shape_invariants=(tf.TensorShape([None, None]), tf.TensorShape([])),
        )
        return symbols

    def _lookup(self, left, right):
        """The merged id of each pair `(left, right)`, or -1."""
        left_m, right_m = self._multipliers
        start = tf.math.floormod(left * left_m + right * right_m, self._slots)
        left, right = tf.expand_dims(left, -1), tf.expand_dims(right, -1)  # (batch, len, 1)
        slots = tf.math.floormod(tf.expand_dims(start, -1) + tf.range(self._probes), self._slots)
        found = (tf.gather(self._left, slots) == left) & (tf.gather(self._right, slots) == right)
        found &= left >= 0
        return tf.reduce_max(tf.where(found, tf.gather(self._merged, slots), _NO), axis=-1)


def ends_with_space(text):
    """Strings `[batch]` -> bool `[batch]`: whether each ends with whitespace (`_SPACE_BYTES`),
    read from its last bytes (tensorflow-text's `ByteSplitter`)."""
    import tensorflow_text

    split = tensorflow_text.ByteSplitter().split(text)  # (batch, (bytes)) uint8
    flat = tf.concat([[-1], tf.cast(split.flat_values, tf.int32)], 0)  # -1: before any
    ends = tf.cast(split.row_splits[1:], tf.int32)  # (batch,)
    lengths = ends - tf.cast(split.row_splits[:-1], tf.int32)

    def byte(k):  # the k-th byte from the end, or -1
        return tf.where(lengths >= k, tf.gather(flat, tf.maximum(ends - k + 1, 0)), -1)

    last = [byte(k) for k in (1, 2, 3)]
    found = tf.zeros_like(lengths, tf.bool)
    for pattern in _SPACE_BYTES:
        match = tf.ones_like(found)
        for k, value in enumerate(reversed(pattern)):
            match &= last[k] == value
        found |= match
    return found


__all__ = ["BpeCut", "Merges", "character_model", "ends_with_space", "merge_table"]

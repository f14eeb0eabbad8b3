"""SentencePiece's BPE cut of UTF-8 bytes in LiteRT's builtin ops, for the builtin-ops LiteRT
file of a model whose source SentencePiece model is BPE (NLLB-200's): what
`kt.export.litert_bpe.BpeCut` does with tensorflow-text's ops, with none.

1. The normalizer (`kt.export.litert_charsmap`): the precompiled charsmap's rules (NFKC and
   nmt_nfkc's), then the whitespace rules, spaces as "▁".
2. The characters: each character's code point looked up in a hash table of the model's
   pieces of one character (`character_table`: open addressing, `probes` slots read by
   `gather`); a character the model lacks is `<unk>`, and a run of them one `<unk>`, as
   SentencePiece's `Encode` merges them; the characters cut to `max_chars`, as the text
   file cuts them.
3. The merges of `kt.export.litert_bpe.Merges`.

Whether the text ends with whitespace (NLLB's tokenizer gives it a piece of its own) is read
from its last bytes (`ends_with_space`), as the text file reads it.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_transformer.export import litert_bpe, litert_charsmap

_NO = -1
WORD_BOUNDARY = 0x2581  # "▁"


def character_table(proto: bytes, load: float = 0.5) -> dict:
    """The BPE model's pieces of one character as an open-addressing hash table of int32
    arrays: `keys` (code points, -1 where empty), `ids` `[slots]`, `probes` (the slots a
    lookup reads), `multiplier` (the hash: `key * multiplier mod slots`), `slots`."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    model = pb.ModelProto()
    model.ParseFromString(proto)
    normal = pb.ModelProto.SentencePiece.NORMAL
    pairs = [
        (ord(p.piece), i)
        for i, p in enumerate(model.pieces)
        if p.type == normal and len(p.piece) == 1
    ]
    slots = 1 << max(4, int(np.ceil(np.log2(max(len(pairs), 1) / load))))
    best = None
    for multiplier in (1, 7, 31, 97, 1021):
        keys = np.full(slots, _NO, np.int64)
        ids = np.full(slots, _NO, np.int64)
        probes = 1
        for key, i in pairs:
            start = key * multiplier % slots
            for step in range(slots):
                slot = (start + step) % slots
                if keys[slot] == _NO:
                    keys[slot], ids[slot] = key, i
                    probes = max(probes, step + 1)
                    break
        if best is None or probes < best["probes"]:
            best = {"keys": keys, "ids": ids, "probes": probes, "multiplier": multiplier}
    # The hash stays inside int32: code point * multiplier < 2**31.
    if 0x10FFFF * best["multiplier"] >= 2**31:
        raise ValueError(f"multiplier {best['multiplier']} overflows int32")
    return {
        **best,
        "keys": best["keys"].astype(np.int32),
        "ids": best["ids"].astype(np.int32),
        "slots": slots,
    }


def check_model(proto: bytes) -> None:
    """Raises ValueError naming what `BpeBytesCut` does not cut as SentencePiece does: what
    `litert_bpe.character_model` refuses, and the normalizer's (`litert_charsmap.check_spec`)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    litert_bpe.character_model(proto)
    model = pb.ModelProto()
    model.ParseFromString(proto)
    if model.trainer_spec.treat_whitespace_as_suffix:
        raise ValueError(
            "the source SentencePiece model marks words with a trailing '▁': the builtin-ops "
            "LiteRT file's cut marks them with a leading one"
        )
    litert_charsmap.check_spec(model.normalizer_spec)


class BpeBytesCut:
    """SentencePiece's BPE cut of UTF-8 bytes in builtin ops (the module doc).

    Args:
        proto: bytes. The serialized BPE SentencePiece model (`check_model`'s rules).
        max_chars: int. Characters a text is cut to before the merges.

    Call arguments:
        data: int32 `[batch, N]`. UTF-8 bytes, 0-padded.

    Returns:
        `(ids, blank, trailing)`: the BPE model's ids int32 `[batch, len]` (-1 after each
        row's end), whether a text is blank (the normalizer leaves nothing), and whether it
        ends with whitespace (`ends_with_space`): `litert_bpe.BpeCut`'s, of bytes.
    """

    def __init__(self, proto: bytes, max_chars: int):
        import sentencepiece
        from sentencepiece import sentencepiece_model_pb2 as pb

        check_model(proto)
        model = pb.ModelProto()
        model.ParseFromString(proto)
        self.spec = model.normalizer_spec
        self.max_chars = max_chars
        self.charsmap = litert_charsmap.Charsmap(self.spec.precompiled_charsmap)
        self.merge = litert_bpe.Merges(proto)
        table = character_table(proto)
        self._keys = tf.constant(table["keys"])
        self._ids = tf.constant(table["ids"])
        self._probes, self._slots = table["probes"], table["slots"]
        self._multiplier = table["multiplier"]
        self.unk_id = sentencepiece.SentencePieceProcessor(model_proto=proto).unk_id()

    def __call__(self, data):
        data = tf.cast(data, tf.int32)
        # A character is at most 4 bytes: the normalized text's first `max_chars` whole.
        normalized = self.charsmap(data, 4 * (self.max_chars + 1))
        spaced = litert_charsmap.whitespace(normalized, self.spec)  # (batch, W), 0-padded
        points = litert_charsmap.code_points(spaced)  # -1 but where a character starts
        points = tf.where(points == litert_charsmap.SPACE, WORD_BOUNDARY, points)
        ids = self.lookup(points)
        ids = tf.where(points >= 0, tf.where(ids >= 0, ids, self.unk_id), _NO)
        width = tf.shape(ids)[1]
        ids = litert_charsmap.compact(ids, ids >= 0, width)  # the characters, in order
        previous = tf.pad(ids[:, :-1], [[0, 0], [1, 0]], constant_values=_NO)
        keep = (ids >= 0) & ~((ids == self.unk_id) & (previous == self.unk_id))
        ids = litert_charsmap.compact(ids, keep, width)[:, : self.max_chars]
        lengths = tf.reduce_sum(tf.cast(ids >= 0, tf.int32), axis=1)
        ids = ids[:, : tf.maximum(tf.reduce_max(lengths), 1)]  # the merges follow the text
        return self.merge(ids), lengths == 0, ends_with_space(data)

    def lookup(self, points):
        """The BPE id of each code point's piece, or -1 (none, or a point of -1)."""
        start = tf.math.floormod(tf.maximum(points, 0) * self._multiplier, self._slots)
        slots = tf.math.floormod(start[..., None] + tf.range(self._probes), self._slots)
        found = (tf.gather(self._keys, slots) == points[..., None]) & (points[..., None] >= 0)
        return tf.reduce_max(tf.where(found, tf.gather(self._ids, slots), _NO), axis=-1)


def ends_with_space(data):
    """UTF-8 bytes `[batch, N]`, 0-padded -> bool `[batch]`: whether each text ends with
    whitespace (`litert_bpe`'s list: what the library's NLLB tokenizer takes for it)."""
    live = tf.cumsum(tf.cast(data <= 0, tf.int32), axis=1) == 0
    lengths = tf.reduce_sum(tf.cast(live, tf.int32), axis=1)  # (batch,)

    def byte(k):  # the k-th byte from the end, or -1
        at = tf.maximum(lengths - k, 0)[:, None]
        return tf.where(lengths >= k, tf.gather(data, at, batch_dims=1)[:, 0], -1)

    last = [byte(k) for k in (1, 2, 3)]
    found = tf.zeros_like(lengths, tf.bool)
    for pattern in litert_bpe._SPACE_BYTES:
        match = tf.ones_like(found)
        for k, value in enumerate(reversed(pattern)):
            match &= last[k] == value
        found |= match
    return found


__all__ = ["WORD_BOUNDARY", "BpeBytesCut", "character_table", "check_model", "ends_with_space"]

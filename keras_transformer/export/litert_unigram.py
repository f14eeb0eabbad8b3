"""SentencePiece's unigram cut in LiteRT's builtin ops, over UTF-8 bytes, for the builtin-ops
LiteRT file (`kt.export.litert_builtin`), as `unigram_model.cc`'s Viterbi makes it: the
identity normalizer's whitespace rules (leading, trailing and repeated spaces dropped, a space
before the text, each space "▁"); each piece that starts at a byte, found in a hash table of
the pieces (two hashes and the length name one slot, its piece then checked symbol for
symbol); a character no piece of one character covers is an unknown node (the lowest piece
score less 10), which byte fallback gives as its bytes' pieces; a `tf.while_loop` over the
byte positions keeps the best path to each (ties: the earliest start, as SentencePiece's
strict comparison), and a second walks it back. tensorflow-text's `FastSentencepieceTokenizer`
does this in a custom op that the stock runtimes lack.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_transformer.core import rules
from keras_transformer.special_ids import EOS_ID, PAD_ID

SPACE = 256  # the symbol of "▁" in the cut: one symbol, where UTF-8 spends three bytes
# The pieces' two hashes: h * multiplier + symbol + 1, mod a prime, below 2**31 at each step.
HASHES = ((257, 8355667), (263, 8165231))
_NONE = -1
_LOW = -1e30  # the score of no path
UNK_PENALTY = 10.0  # SentencePiece's kUnkPenalty: an unknown character scores min - 10


def _proto(proto: bytes):
    from sentencepiece import sentencepiece_model_pb2 as pb

    model = pb.ModelProto()
    model.ParseFromString(proto)
    return model


def check_model(proto: bytes) -> None:
    """Raises ValueError naming what `UnigramCut` does not cut as SentencePiece does: a model
    that is not unigram, a normalizer with a character map, user-defined pieces, whitespace
    rules other than the defaults'."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    model = _proto(proto)
    kind = pb.TrainerSpec.ModelType.Name(model.trainer_spec.model_type)
    if kind != "UNIGRAM":
        raise ValueError(
            f"the source SentencePiece model is {kind.lower()}: a builtin-ops LiteRT file "
            "cuts unigram models (ops='text' cuts BPE ones)"
        )
    spec = model.normalizer_spec
    if spec.precompiled_charsmap or spec.name not in ("identity", ""):
        raise ValueError(
            f"the source SentencePiece model's normalizer is {spec.name!r}: a builtin-ops "
            "LiteRT file applies the identity normalizer only (ops='text' applies the others)"
        )
    if not spec.escape_whitespaces or model.trainer_spec.treat_whitespace_as_suffix:
        raise ValueError(
            "the source SentencePiece model does not mark words with a leading '▁': a "
            "builtin-ops LiteRT file cuts models that do"
        )
    kinds = pb.ModelProto.SentencePiece
    odd = [p.piece for p in model.pieces if p.type == kinds.USER_DEFINED]
    if odd:
        raise ValueError(
            f"the source SentencePiece model has user-defined pieces ({odd[:3]}): a "
            "builtin-ops LiteRT file does not cut them"
        )


def _symbols(piece: str) -> list[int]:
    """A piece's symbols: its UTF-8 bytes, "▁" as `SPACE`."""
    out = []
    for character in piece:
        out += [SPACE] if character == "\u2581" else list(character.encode())
    return out


def piece_table(proto: bytes, load: float = 0.25) -> dict:
    """The normal pieces of a SentencePiece model as arrays, placed by their hash with
    linear probing: `first`, `second` (the piece's two hashes, `_hashes`; -1 where empty),
    `lengths`, `ids` (-1 where empty), `scores` `[slots]` and `symbols` `[slots, longest]`
    (-1 after a piece's end); `probes`, the slots a lookup reads; `spread`, the multiplier
    that spreads the first hash over the slots (of a few, the one with the fewest probes);
    `longest`, the symbols of the longest piece.

    Raises:
        ValueError: two pieces of one length share both hashes (the lookup would find one).
    """
    from sentencepiece import sentencepiece_model_pb2 as pb

    model = _proto(proto)
    normal = [
        (i, _symbols(p.piece), p.score)
        for i, p in enumerate(model.pieces)
        if p.type == pb.ModelProto.SentencePiece.NORMAL
    ]
    keys = [(*_hashes(symbols), len(symbols)) for _, symbols, _ in normal]
    if len(set(keys)) < len(keys):
        raise ValueError("two pieces share their hashes: a builtin-ops file cannot cut them")
    longest = max(len(symbols) for _, symbols, _ in normal)
    slots = _prime_from(int(len(normal) / load))
    best = None
    for spread in (97, 12345, 104729, 40503, 65537):
        spread = spread % slots
        starts = [(first % slots) * spread % slots for first, _, _ in keys]
        placed = _placed(starts, slots)
        if best is None or max(placed[1]) < best[2]:
            best = (spread, placed[0], max(placed[1]))
    spread, where, probes = best
    table = {
        "first": np.full(slots, _NONE, np.int32),
        "second": np.full(slots, _NONE, np.int32),
        "lengths": np.zeros(slots, np.int32),
        "ids": np.full(slots, _NONE, np.int32),
        "scores": np.full(slots, _LOW, np.float32),
        "symbols": np.full((slots, longest), _NONE, np.int32),
    }
    for slot, (i, symbols, score), (first, second, length) in zip(where, normal, keys, strict=True):
        table["first"][slot], table["second"][slot] = first, second
        table["lengths"][slot], table["ids"][slot], table["scores"][slot] = length, i, score
        table["symbols"][slot, :length] = symbols
    return {**table, "probes": probes, "spread": spread, "longest": longest, "slots": slots}


def _placed(starts: list[int], slots: int) -> tuple[list[int], list[int]]:
    """Linear probing from each start: each key's slot, and the slots each probe read."""
    taken = np.zeros(slots, bool)
    where, steps = [], []
    for start in starts:
        step = 0
        while taken[(start + step) % slots]:
            step += 1
        taken[(start + step) % slots] = True
        where.append((start + step) % slots)
        steps.append(step + 1)
    return where, steps


def _prime_from(number: int) -> int:
    def prime(n):
        return n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))

    while not prime(number):
        number += 1
    return number


def _hashes(symbols) -> tuple[int, int]:
    """A piece's two polynomial hashes (`HASHES`), each inside int32 at every step."""
    out = []
    for multiplier, modulus in HASHES:
        h = 0
        for symbol in symbols:
            h = (h * multiplier + symbol + 1) % modulus
        out.append(h)
    return tuple(out)


class UnigramCut:
    """SentencePiece's unigram cut of UTF-8 bytes in LiteRT's builtin ops (the module doc).

    Args:
        proto: bytes. The serialized unigram SentencePiece model (`check_model`'s rules).
        max_length: int. The model's `max_length`: the pieces are cut to `max_length - 1`,
            then EOS.

    Call arguments:
        data: int32 `[batch, N]`. UTF-8 bytes, 0-padded.

    Returns:
        int32 `[batch, len]`: the pieces' ids, cut, then EOS, 0-padded (a blank text is EOS
        alone), as `TransformerSeq2SeqLMPreprocessor.source_ids` lays them out.
    """

    def __init__(self, proto: bytes, max_length: int):
        check_model(proto)
        model = _proto(proto)
        self.max_length = max_length
        table = piece_table(proto)
        self.longest, self.probes, self.slots = table["longest"], table["probes"], table["slots"]
        self.spread = table["spread"]
        self._first = tf.constant(table["first"])
        self._second = tf.constant(table["second"])
        self._symbols = tf.constant(table["symbols"])
        self._lengths = tf.constant(table["lengths"])
        self._ids = tf.constant(table["ids"])
        self._scores = tf.constant(table["scores"])
        normal = [p.score for p in model.pieces if p.type == 1]
        self.unk_score = float(np.float32(min(normal)) - np.float32(UNK_PENALTY))
        self.byte_fallback = model.trainer_spec.byte_fallback
        self.unk_id = model.trainer_spec.unk_id
        byte_ids = {p.piece: i for i, p in enumerate(model.pieces) if p.type == 6}
        self._byte_ids = tf.constant(
            [byte_ids.get(f"<0x{b:02X}>", self.unk_id) for b in range(256)], tf.int32
        )
        self.spec = model.normalizer_spec

    def __call__(self, data):
        symbols = self.normalize(tf.cast(data, tf.int32))  # (batch, L), -1 after the end
        pieces, scores = self.lattice(symbols)  # (batch, L, K): a piece from i, k + 1 long
        ends = self.viterbi(symbols, pieces, scores)
        return self.ids(symbols, *ends)

    def normalize(self, data):
        """Bytes `[batch, N]` -> symbols `[batch, L]` (-1 after the end; L the longest row's
        symbols): the identity normalizer's whitespace rules, spaces as `SPACE`, one before
        a text that is not blank."""
        batch, width = tf.shape(data)[0], tf.shape(data)[1]
        valid = data > 0
        space = data == 32
        word = valid & ~space  # (batch, N)
        keep = valid
        if self.spec.remove_extra_whitespaces:
            words = tf.cumsum(tf.cast(word, tf.int32), axis=1)  # up to and with i
            before = tf.pad(words[:, :-1], [[0, 0], [1, 0]])
            after = words[:, -1:] - words
            previous = tf.pad(word[:, :-1], [[0, 0], [1, 0]])
            keep = word | (space & previous & (before > 0) & (after > 0))
        symbols = tf.where(space, SPACE, data)
        if self.spec.add_dummy_prefix:
            first = tf.reduce_any(keep, axis=1, keepdims=True)  # not blank
            symbols = tf.concat([tf.fill([batch, 1], SPACE), symbols], 1)
            keep = tf.concat([first, keep], 1)
        else:
            symbols = tf.pad(symbols, [[0, 0], [0, 1]])
            keep = tf.pad(keep, [[0, 0], [0, 1]])
        # Only as many columns as the longest row keeps (one for a blank batch): the
        # lattice's work follows the text, not the input's width.
        used = tf.maximum(tf.reduce_max(tf.reduce_sum(tf.cast(keep, tf.int32), axis=1)), 1)
        return compact(symbols, keep, width + 1)[:, :used]

    def lattice(self, symbols):
        """Each piece that starts at each position: ids and scores `[batch, L, longest]`
        (-1 and `_LOW` where none; at k, the piece of k + 1 symbols), with the unknown
        node (id -2, `unk_score`) where no piece of one character starts. A window's slot
        is the one whose two hashes and length are the window's (unique: `piece_table`),
        its piece then checked symbol for symbol."""
        longest = self.longest
        width = tf.shape(symbols)[1]
        padded = tf.pad(symbols, [[0, 0], [0, longest]], constant_values=_NONE)
        # windows[:, i, k] = symbols[:, i + k]
        windows = tf.stack([padded[:, k : k + width] for k in range(longest)], axis=2)
        hashes = []
        for multiplier, modulus in HASHES:
            h, each = tf.zeros_like(symbols), []
            for k in range(longest):
                h = tf.math.floormod(h * multiplier + windows[:, :, k] + 1, modulus)
                each.append(h)
            hashes.append(tf.stack(each, axis=2))  # (batch, L, K): the first k + 1 symbols
        first, second = hashes
        start = tf.math.floormod(tf.math.floormod(first, self.slots) * self.spread, self.slots)
        slots = tf.math.floormod(start[..., None] + tf.range(self.probes), self.slots)  # +P
        lengths = tf.range(1, longest + 1)[None, None, :, None]
        hit = (
            (tf.gather(self._first, slots) == first[..., None])
            & (tf.gather(self._second, slots) == second[..., None])
            & (tf.gather(self._lengths, slots) == lengths)
        )  # (batch, L, K, P): one at most
        found = tf.reduce_any(hit, axis=-1)
        slot = tf.gather(
            slots,
            tf.argmax(tf.cast(hit, tf.int32), -1, output_type=tf.int32)[..., None],
            batch_dims=3,
        )[..., 0]  # (batch, L, K)
        wanted = tf.where(
            tf.range(longest)[None, :] < tf.range(1, longest + 1)[:, None],  # k's first k + 1
            windows[:, :, None, :],
            _NONE,
        )  # (batch, L, K, K)
        same = tf.reduce_all(tf.gather(self._symbols, slot) == wanted, axis=-1)
        found &= same
        ids = tf.where(found, tf.gather(self._ids, slot), _NONE)
        scores = tf.where(found, tf.gather(self._scores, slot), _LOW)
        # An unknown character: its UTF-8 length from its first byte, SentencePiece's rule.
        lead = symbols
        size = tf.where(lead >= 0xF0, 4, tf.where(lead >= 0xE0, 3, tf.where(lead >= 0xC0, 2, 1)))
        size = tf.where(lead == SPACE, 1, size)
        single = tf.gather(ids, size[..., None] - 1, batch_dims=2)[..., 0]
        unknown = (single == _NONE) & (symbols >= 0)  # (batch, L)
        at = (tf.range(1, longest + 1)[None, None, :] == size[..., None]) & unknown[..., None]
        ids = tf.where(at, -2, ids)
        scores = tf.where(at, tf.constant(self.unk_score, tf.float32), scores)
        return ids, scores

    def viterbi(self, symbols, pieces, scores):
        """The best path's nodes: `(ends, unknown)`, bool `[batch, L + 1]`, where a node ends
        and which positions an unknown node covers, and `chosen` int32 `[batch, L + 1]`,
        the piece of the node that ends at each position."""
        longest = self.longest
        batch, width = tf.shape(symbols)[0], tf.shape(symbols)[1]
        lengths = tf.reduce_sum(tf.cast(symbols >= 0, tf.int32), axis=1)  # (batch,)
        steps = tf.range(longest, 0, -1)  # k descending: ties go to the earliest start
        column = tf.range(width + 1)[None, :]
        # By end: into[:, j, m] = the node from j - steps[m] to j.
        starts = tf.range(width + 1)[:, None] - steps[None, :]  # (L + 1, K)
        flat = tf.maximum(starts, 0) * longest + (steps - 1)[None, :]
        reachable = starts >= 0
        into_scores = tf.reshape(scores, [batch, -1])
        into_scores = tf.where(reachable, tf.gather(into_scores, flat, axis=1), _LOW)
        into_ids = tf.where(reachable, tf.gather(tf.reshape(pieces, [batch, -1]), flat, axis=1), -1)
        into_scores = tf.where(into_ids == _NONE, _LOW, into_scores)
        best = tf.where(column == 0, 0.0, tf.fill([batch, width + 1], _LOW))
        back = tf.zeros([batch, width + 1], tf.int32)
        chosen = tf.fill([batch, width + 1], _NONE)

        def step(j, best, back, chosen):
            previous = tf.gather(best, tf.maximum(j - steps, 0), axis=1)  # (batch, K)
            candidates = previous + into_scores[:, j, :]
            m = tf.argmax(candidates, axis=1, output_type=tf.int32)  # the first best
            value = tf.reduce_max(candidates, axis=1)
            here = column == j
            best = tf.where(here, value[:, None], best)
            back = tf.where(here, tf.gather(steps, m)[:, None], back)
            piece = tf.gather(into_ids[:, j, :], m[:, None], batch_dims=1)  # (batch, 1)
            chosen = tf.where(here, piece, chosen)
            return j + 1, best, back, chosen

        _, best, back, chosen = tf.while_loop(
            lambda j, *_: j <= tf.reduce_max(lengths),
            step,
            (tf.constant(1), best, back, chosen),
        )

        def walk(j, ends, unknown):
            k = tf.gather(back, j[:, None], batch_dims=1)[:, 0]  # (batch,)
            piece = tf.gather(chosen, j[:, None], batch_dims=1)[:, 0]
            live = j > 0
            ends |= (column == j[:, None]) & live[:, None]
            span = (column >= (j - k)[:, None]) & (column < j[:, None])
            unknown |= span & (live & (piece == -2))[:, None]
            return tf.where(live, j - k, 0), ends, unknown

        none = tf.zeros([batch, width + 1], tf.bool)
        _, ends, unknown = tf.while_loop(
            lambda j, *_: tf.reduce_any(j > 0), walk, (lengths, none, none)
        )
        return ends, unknown, chosen

    def ids(self, symbols, ends, unknown, chosen):
        """The path's ids in order, cut to `max_length - 1`, then EOS, 0-padded."""
        width = tf.shape(symbols)[1]
        # A piece's id at its last symbol; an unknown node's bytes' pieces at each byte (or
        # `<unk>` at its end, without byte fallback).
        at_end = tf.where(ends[:, 1:], chosen[:, 1:], _NONE)  # (batch, L): ends at i + 1
        if self.byte_fallback:
            bytes_ = tf.gather(self._byte_ids, tf.clip_by_value(symbols, 0, 255))
            tokens = tf.where(unknown[:, :-1], bytes_, at_end)
        else:
            tokens = tf.where(at_end == -2, self.unk_id, at_end)
        keep = tokens >= 0
        ids = compact(tokens, keep, width)
        kept = rules.kept_source_tokens(self.max_length)
        count = tf.minimum(tf.reduce_sum(tf.cast(keep, tf.int32), axis=1), kept)
        longest = tf.reduce_max(count) + 1
        ids = tf.pad(ids, [[0, 0], [0, 1]])[:, :longest]
        column = tf.range(longest)[None, :]
        count = count[:, None]
        return tf.where(column == count, EOS_ID, tf.where(column < count, ids, PAD_ID))


def compact(values, keep, width):
    """The kept values of each row `[batch, n]` moved to its start, in order, -1 after:
    `[batch, width]` (at least as many as a row keeps)."""
    batch = tf.shape(values)[0]
    keep = tf.cast(keep, tf.int32)
    position = tf.cumsum(keep, axis=1) - 1
    position = tf.where(keep > 0, position, width)  # the dropped ones: one column past
    rows = tf.broadcast_to(tf.range(batch)[:, None], tf.shape(values))
    indices = tf.stack([rows, position], axis=-1)
    placed = tf.scatter_nd(indices, (values + 1) * keep, tf.stack([batch, width + 1]))
    return placed[:, :width] - 1


__all__ = ["HASHES", "SPACE", "UnigramCut", "check_model", "compact", "piece_table"]

"""SentencePiece's normalizer in LiteRT's builtin ops, over UTF-8 bytes: the rules of a
model's precompiled character map (`normalizer_spec.precompiled_charsmap`: NFKC, and
"nmt_nfkc"'s rules over it, as NLLB-200's model holds them), then the whitespace rules, for
the builtin-ops LiteRT file's cut (`kt.export.litert_bpe_bytes`).

The map is a table of byte sequences: each rule maps a key (one or more characters' UTF-8
bytes, e.g. "ﬁ" -> "fi", "A" + U+0300 -> "À", U+200B -> "") to its value. SentencePiece
stores it as a double-array trie (Darts-clone) over the keys' bytes and a blob of the values,
and `normalizer.cc`'s `NormalizePrefix` applies it from the text's start: the longest key
that starts there is replaced by its value; where none starts, one UTF-8 character is copied
(an invalid byte becomes U+FFFD). The file holds the same trie as int32 arrays and applies it
in three parts, with no loop:

1. The longest key at every byte (`Charsmap.matches`): the trie walked from each byte at
   once, a step a byte, as long as the longest key; the trie's XOR of a node and a byte is
   a gather from a 256 x 256 table of bytes' XORs.
2. Which bytes the left-to-right scan starts a step at (`on_scan`): each byte's step goes to
   the byte after its key (or character); the steps reached from byte 0 are found by pointer
   doubling (log2 N rounds of a gather and a scatter).
3. The output: each step's value (or character) laid end to end (`compact`).

Then the whitespace rules of `normalizer.cc` (`whitespace`): spaces at the start and the end
and runs of spaces dropped (`remove_extra_whitespaces`), a space before a text that keeps
anything (`add_dummy_prefix`). SentencePiece drops a value's leading spaces after a space,
and trims spaces at the end: on this map (no value holds two spaces in a row), the same as
collapsing the runs of the whole output.

What it does not do (`check_spec` and `kt.export.litert_bpe_bytes.check_model` refuse it by
name): user-defined symbols (the normalizer's own prefix matcher), `treat_whitespace_as_suffix`,
a normalizer without `escape_whitespaces`, a value with a run of spaces. With
`remove_extra_whitespaces` off (NLLB's is on), a text the map turns into nothing gets no
space before it, where SentencePiece gives it one. The work follows the longest row's text,
not the input's width (`used_columns`).
"""

from __future__ import annotations

import math
import struct

import numpy as np
import tensorflow as tf

SPACE = 32


def trie(precompiled: bytes) -> tuple[np.ndarray, bytes]:
    """A precompiled charsmap -> its double array's units (uint32, as int64) and the blob
    of its values (NUL-terminated), as `normalizer.cc`'s `DecodePrecompiledCharsMap` reads
    it: a little-endian uint32 (the trie's bytes), the trie, the values."""
    if len(precompiled) < 4:
        raise ValueError("the precompiled charsmap is shorter than its header")
    (size,) = struct.unpack("<I", precompiled[:4])
    if size % 4 or 4 + size > len(precompiled):
        raise ValueError(f"the precompiled charsmap's trie ({size} bytes) does not fit it")
    units = np.frombuffer(precompiled[4 : 4 + size], "<u4").astype(np.int64)
    return units, precompiled[4 + size :]


# A Darts-clone unit's fields (darts.h's DoubleArrayUnit).
def _label(unit):
    return unit & ((1 << 31) | 0xFF)


def _has_leaf(unit):
    return (unit >> 8) & 1


def _value(unit):
    return unit & ((1 << 31) - 1)


def _offset(unit):
    return (unit >> 10) << ((unit & (1 << 9)) >> 6)


def rules(precompiled: bytes) -> dict[bytes, bytes]:
    """Every rule of a precompiled charsmap, key bytes -> value bytes (the trie walked
    whole): for tests, and to read what a model's normalizer does."""
    units, blob = trie(precompiled)
    label = _label(units)
    # A unit of a byte's label is the child of the nodes whose base is its index XOR it
    # (several: Darts-clone shares the units of equal subtrees).
    candidate = np.flatnonzero((label > 0) & (label < 256))
    parent = candidate ^ label[candidate]
    found = {}
    bases, keys = np.array([_offset(units[0])]), [b""]
    while len(bases):  # a level of the trie a turn
        order = np.argsort(bases, kind="stable")
        low = np.searchsorted(bases[order], parent, "left")
        high = np.searchsorted(bases[order], parent, "right")
        counts = high - low
        child = np.repeat(candidate, counts)
        first = np.repeat(np.cumsum(counts) - counts, counts)
        node = order[np.repeat(low, counts) + np.arange(counts.sum()) - first]
        below = child ^ _offset(units[child])
        keys = [
            keys[n] + bytes([b]) for n, b in zip(node.tolist(), label[child].tolist(), strict=True)
        ]
        for key, leaf, at in zip(
            keys, _has_leaf(units[child]).tolist(), below.tolist(), strict=True
        ):
            if leaf:
                start = int(_value(units[at]))
                found[key] = blob[start : blob.index(b"\0", start)]
        bases = below
    return found


def check_spec(spec) -> None:
    """Raises ValueError naming what `Charsmap` and `whitespace` do not do of a
    SentencePiece `NormalizerSpec` (the module doc)."""
    if not spec.escape_whitespaces:
        raise ValueError(
            "the source SentencePiece model does not escape whitespace as '▁': the "
            "builtin-ops LiteRT file's cut does not read it"
        )
    if spec.precompiled_charsmap and any(
        b"  " in value for value in rules(spec.precompiled_charsmap).values()
    ):
        raise ValueError(
            "the source SentencePiece model's normalizer maps a character to a run of "
            "spaces: the builtin-ops LiteRT file's normalizer does not keep it"
        )


class Charsmap:
    """A precompiled charsmap's rules applied to UTF-8 bytes in builtin ops (the module
    doc, parts 1 to 3).

    Args:
        precompiled: bytes. `normalizer_spec.precompiled_charsmap` (b"": no rule, each
            character copied, invalid bytes as U+FFFD).

    Call arguments:
        data: int32 `[batch, N]`. UTF-8 bytes, 0-padded.
        width: int. The output's bytes.

    Returns:
        int32 `[batch, width]`: the normalized bytes, 0-padded (cut at `width`).
    """

    def __init__(self, precompiled: bytes):
        units, blob = trie(precompiled) if precompiled else (np.zeros(1, np.int64), b"")
        found = rules(precompiled) if precompiled else {}
        self.longest_key = max((len(k) for k in found), default=0)
        self.longest_value = max((len(v) for v in found.values()), default=0)
        count = len(units)
        index = np.arange(count)
        label = np.where(units >> 31, -1, units & 0xFF)  # a value unit has no byte
        below = index ^ _offset(units)
        leaf = np.where(
            _has_leaf(units) > 0, _value(units[np.minimum(below, count - 1)]), -1
        )  # a key ends at the unit: its value's offset in the blob
        self.root = int(_offset(units[0]))
        self.units = count
        self._label = tf.constant(label.astype(np.int32))
        self._below = tf.constant(below.astype(np.int32))
        self._leaf = tf.constant(leaf.astype(np.int32))
        values = np.frombuffer(blob + b"\0", np.uint8).astype(np.int32)
        ends = np.flatnonzero(values == 0)  # each offset's value runs to the next NUL
        lengths = ends[np.searchsorted(ends, np.arange(len(values)))] - np.arange(len(values))
        self._blob = tf.constant(values)
        self._lengths = tf.constant(lengths.astype(np.int32))
        low = np.arange(256)
        self._xor = tf.constant((low[:, None] ^ low[None, :]).reshape(-1).astype(np.int32))

    def __call__(self, data, width: int):
        data = tf.cast(data, tf.int32)
        rounds = doubling_rounds(data.shape[1])  # of the input's width, known when traced
        data = used_columns(data)  # the work follows the text, not the input's width
        length, value = self.matches(data)
        size, valid = characters(data)
        rule = value >= 0
        step = tf.where(rule, length, size)  # (batch, N): bytes consumed from each byte
        on = on_scan(step, data > 0, rounds)
        value_length = tf.gather(self._lengths, tf.maximum(value, 0))
        emitted = tf.where(rule, value_length, tf.where(valid, size, 3))  # U+FFFD: 3 bytes
        emitted *= tf.cast(on, tf.int32)
        # Each byte's output, up to `longest` bytes: its value's, its character's, U+FFFD's.
        longest = max(self.longest_value, 4)
        k = tf.range(longest)[None, None, :]  # (1, 1, longest)
        from_blob = tf.gather(
            self._blob, tf.minimum(tf.maximum(value, 0)[..., None] + k, self._blob.shape[0] - 1)
        )
        padded = tf.pad(data, [[0, 0], [0, longest]])
        width_in = tf.shape(data)[1]
        from_text = tf.stack([padded[:, j : j + width_in] for j in range(longest)], axis=2)
        replacement = tf.constant([0xEF, 0xBF, 0xBD, *[0] * (longest - 3)], tf.int32)
        out = tf.where(
            rule[..., None], from_blob, tf.where(valid[..., None], from_text, replacement)
        )
        keep = k < emitted[..., None]  # (batch, N, longest)
        batch = tf.shape(data)[0]
        flat_keep = tf.reshape(keep, [batch, -1])
        placed = compact(tf.reshape(out, [batch, -1]), flat_keep, width)  # cut at `width`
        return used_columns(tf.maximum(placed, 0))

    def matches(self, data):
        """The longest key at each byte: `(length, value)`, int32 `[batch, N]`: its bytes
        and its value's offset in the blob (0 and -1 where no key starts)."""
        width = tf.shape(data)[1]
        padded = tf.pad(data, [[0, 0], [0, self.longest_key]])
        base = tf.fill(tf.shape(data), self.root)
        alive = tf.ones(tf.shape(data), tf.bool)
        length = tf.zeros(tf.shape(data), tf.int32)
        value = tf.fill(tf.shape(data), -1)
        for k in range(self.longest_key):
            byte = padded[:, k : k + width]
            low = tf.math.floormod(base, 256)
            child = base - low + tf.gather(self._xor, low * 256 + byte)  # base ^ byte
            alive &= (byte > 0) & (child < self.units)
            child = tf.where(alive, child, 0)
            alive &= tf.gather(self._label, child) == byte
            leaf = tf.gather(self._leaf, child)
            hit = alive & (leaf >= 0)
            length = tf.where(hit, k + 1, length)
            value = tf.where(hit, leaf, value)
            base = tf.gather(self._below, child)
        return length, value


def characters(data):
    """Each byte's UTF-8 character as `string_util::DecodeUTF8` reads it: `(size, valid)`,
    int32 and bool `[batch, N]`: the bytes of the character that starts there (1 where it
    is invalid: U+FFFD for one byte) and whether it is valid (the shortest form, not a
    surrogate, at most U+10FFFF)."""
    width = tf.shape(data)[1]
    padded = tf.pad(data, [[0, 0], [0, 3]])
    b = [padded[:, j : j + width] for j in range(4)]
    trail = [(x >= 0x80) & (x < 0xC0) for x in b]
    cp2 = (b[0] - 0xC0) * 64 + (b[1] - 0x80)
    cp3 = (b[0] - 0xE0) * 4096 + (b[1] - 0x80) * 64 + (b[2] - 0x80)
    cp4 = (b[0] - 0xF0) * 262144 + (b[1] - 0x80) * 4096 + (b[2] - 0x80) * 64 + (b[3] - 0x80)
    two = (b[0] >= 0xC0) & (b[0] < 0xE0) & trail[1] & (cp2 >= 0x80)
    three = (b[0] >= 0xE0) & (b[0] < 0xF0) & trail[1] & trail[2] & (cp3 >= 0x800)
    three &= (cp3 < 0xD800) | (cp3 >= 0xE000)
    four = (b[0] >= 0xF0) & (b[0] < 0xF8) & trail[1] & trail[2] & trail[3]
    four &= (cp4 >= 0x10000) & (cp4 <= 0x10FFFF)
    size = tf.where(two, 2, tf.where(three, 3, tf.where(four, 4, 1)))
    return size, (b[0] < 0x80) | two | three | four


def code_points(data):
    """Valid UTF-8 bytes `[batch, N]` -> each byte's code point where a character starts
    there, -1 elsewhere (continuation bytes, padding)."""
    width = tf.shape(data)[1]
    padded = tf.pad(data, [[0, 0], [0, 3]])
    b = [padded[:, j : j + width] for j in range(4)]
    cp = tf.where(
        b[0] < 0x80,
        b[0],
        tf.where(
            b[0] < 0xE0,
            (b[0] - 0xC0) * 64 + b[1] - 0x80,
            tf.where(
                b[0] < 0xF0,
                (b[0] - 0xE0) * 4096 + (b[1] - 0x80) * 64 + b[2] - 0x80,
                (b[0] - 0xF0) * 262144 + (b[1] - 0x80) * 4096 + (b[2] - 0x80) * 64 + b[3] - 0x80,
            ),
        ),
    )
    start = (b[0] > 0) & ((b[0] < 0x80) | (b[0] >= 0xC0))
    return tf.where(start, cp, -1)


def used_columns(data):
    """Bytes `[batch, N]` (0 ends a row) -> `[batch, n]`: each row up to its first 0, the
    columns of the longest row kept (at least one), the rest 0."""
    live = tf.cumsum(tf.cast(data <= 0, tf.int32), axis=1) == 0
    used = tf.maximum(tf.reduce_max(tf.reduce_sum(tf.cast(live, tf.int32), axis=1)), 1)
    return tf.where(live, data, 0)[:, :used]


def doubling_rounds(width: int) -> int:
    """The rounds of pointer doubling that reach every step of a scan over `width` bytes."""
    return max(1, math.ceil(math.log2(width + 1)))


def on_scan(step, live, rounds: int):
    """The bytes a left-to-right scan starts a step at: bool `[batch, N]`. `step` int32
    `[batch, N]`: the bytes a step from each byte consumes (>= 1); `live`: the text's
    bytes; `rounds`: `doubling_rounds` of N or more. Byte 0 starts one, and each step's
    byte leads to the next: the steps reached from byte 0, by pointer doubling over `next =
    i + step` (the end of the text a sink)."""
    batch, width = tf.shape(step)[0], tf.shape(step)[1]
    column = tf.range(width)[None, :]
    jump = tf.where(live, tf.minimum(column + step, width), width)
    jump = tf.concat([jump, tf.fill([batch, 1], width)], 1)  # (batch, N + 1): N the sink
    on = tf.cast(tf.range(width + 1)[None, :] == 0, tf.int32)
    on = tf.broadcast_to(on, [batch, width + 1])
    rows = tf.broadcast_to(tf.range(batch)[:, None], [batch, width + 1])
    for _ in range(rounds):
        # on[j] |= on[i] where jump[i] == j; then jump = jump∘jump.
        reached = tf.scatter_nd(tf.stack([rows, jump], -1), on, [batch, width + 1])
        on = tf.cast((on + reached) > 0, tf.int32)
        jump = tf.gather(jump, jump, batch_dims=1)
    return (on[:, :width] > 0) & live


def whitespace(data, spec):
    """Normalized bytes `[batch, N]` -> bytes `[batch, N + 1]`, 0-padded, under the
    normalizer's whitespace rules (`remove_extra_whitespaces`: spaces at the ends and in
    runs dropped; `add_dummy_prefix`: a space before a text that keeps anything)."""
    batch, width = tf.shape(data)[0], tf.shape(data)[1]
    valid = data > 0
    space = data == SPACE
    keep = valid
    if spec.remove_extra_whitespaces:
        word = valid & ~space
        words = tf.cumsum(tf.cast(word, tf.int32), axis=1)  # up to and with i
        before = tf.pad(words[:, :-1], [[0, 0], [1, 0]])
        after = words[:, -1:] - words
        previous = tf.pad(word[:, :-1], [[0, 0], [1, 0]])
        keep = word | (space & previous & (before > 0) & (after > 0))
    if spec.add_dummy_prefix:
        first = tf.reduce_any(keep, axis=1, keepdims=True)  # not blank
        data = tf.concat([tf.fill([batch, 1], SPACE), data], 1)
        keep = tf.concat([first, keep], 1)
    else:
        data = tf.pad(data, [[0, 0], [0, 1]])
        keep = tf.pad(keep, [[0, 0], [0, 1]])
    return tf.maximum(compact(data, keep, width + 1), 0)


def compact(values, keep, width):
    """The kept values of each row `[batch, n]` moved to its start, in order, -1 after:
    `[batch, width]` (kept values past `width` dropped)."""
    from keras_transformer.export.litert_unigram import compact as placed

    keep = tf.cast(keep, tf.bool)
    keep &= tf.cumsum(tf.cast(keep, tf.int32), axis=1) <= width
    return placed(values, keep, width)


__all__ = [
    "Charsmap",
    "characters",
    "check_spec",
    "code_points",
    "compact",
    "doubling_rounds",
    "on_scan",
    "rules",
    "trie",
    "used_columns",
    "whitespace",
]

"""Parallel pairs, and the rules every corpus reader applies to them (`keras_transformer.corpus`
states them): each side stripped, a pair with an empty side dropped and counted, a corpus with
no pair left an error. In Python for reading and scanning, and in the graph (`_strip_batch`,
`_both_non_empty`) for `tf.data`, so that both read the same pairs.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import random
import sys
from collections.abc import Iterable, Iterator, Sequence

import tensorflow as tf

# The functions tf.data traces have no Python control flow: AutoGraph's conversion only costs
# time (keras_transformer.data says more).
plain = tf.autograph.experimental.do_not_convert

_READ_BATCH = 4096  # lines a tf.data element holds while files are read


class CorpusError(ValueError):
    """A corpus that cannot be read as parallel text; the message names the file (and line)."""


@dataclasses.dataclass(frozen=True, repr=False)
class ParallelCorpus:
    """Aligned source and target sentences, held in memory as Python strings.

    Args:
        sources: sequence of str. Source sentences; stored as a tuple.
        targets: sequence of str. Target sentences, `targets[i]` translating `sources[i]`;
            stored as a tuple of the same length.
        origin: str. Where the pairs came from, for logs: "data/x.tsv (en -> es)" or
            "tfds:ted_hrlr_translate/pt_to_en:train (pt -> en)". Defaults to "".
        skipped_empty: int. Pairs the reader dropped because a side was empty after stripping
            whitespace. Defaults to 0.

    Examples:
        >>> from keras_transformer.corpus import ParallelCorpus
        >>> corpus = ParallelCorpus(["a house", "a dog"], ["una casa", "un perro"], "inline")
        >>> len(corpus), corpus.take(1).targets
        (2, ('una casa',))
    """

    sources: Sequence[str]
    targets: Sequence[str]
    origin: str = ""
    skipped_empty: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(self.sources))
        object.__setattr__(self, "targets", tuple(self.targets))
        if len(self.sources) != len(self.targets):
            raise ValueError(
                f"{len(self.sources)} sources but {len(self.targets)} targets; "
                "a parallel corpus needs one target per source"
            )

    def __len__(self) -> int:
        return len(self.sources)

    def __repr__(self) -> str:
        return (
            f"ParallelCorpus({len(self)} pairs from {self.origin or '?'}, "
            f"skipped_empty={self.skipped_empty})"
        )

    def take(self, n: int) -> ParallelCorpus:
        """The first `n` pairs (all of them if there are fewer), e.g. for a quick run.

        `skipped_empty` stays the count of the whole read.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"n={n!r} must be an int >= 0")
        if n >= len(self):
            return self
        return ParallelCorpus(
            self.sources[:n], self.targets[:n], f"{self.origin}, first {n}", self.skipped_empty
        )

    def to_dataset(self) -> tf.data.Dataset:
        """A `tf.data.Dataset` of `(source, target)` pairs, each a scalar `tf.string`."""
        return tf.data.Dataset.from_tensor_slices(
            (
                tf.constant(self.sources, dtype=tf.string, shape=[len(self)]),
                tf.constant(self.targets, dtype=tf.string, shape=[len(self)]),
            )
        )


def _collect(
    pairs: Iterable[tuple[str, str]], origin: str, where: str, count_label: str = "pairs"
) -> ParallelCorpus:
    """Strips each side, drops pairs with an empty side, and fails if nothing is left."""
    sources, targets, counts = [], [], _Counts()
    for source, target in _non_empty(pairs, counts):
        sources.append(source)
        targets.append(target)
    if not sources:
        raise CorpusError(f"{where}: all {counts.total} {count_label} are empty")
    return ParallelCorpus(sources, targets, origin, skipped_empty=counts.total - len(sources))


@dataclasses.dataclass
class _Counts:
    total: int = 0


def _non_empty(pairs: Iterable[tuple[str, str]], counts: _Counts) -> Iterator[tuple[str, str]]:
    """Each pair stripped, those with an empty side dropped; `counts.total` counts them all."""
    for source, target in pairs:
        counts.total += 1
        source, target = source.strip(), target.strip()
        if source and target:
            yield source, target


def _utf8(raw: bytes, where: str) -> str:
    """`raw` decoded as UTF-8, or a CorpusError naming `where` and the 1-based byte column."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CorpusError(
            f"{where}: invalid UTF-8 at byte {error.start + 1} (0x{raw[error.start]:02x})"
        ) from None


@dataclasses.dataclass(frozen=True)
class CorpusScan:
    """What one streaming pass over a corpus found.

    Args:
        pairs: int. Non-empty pairs (within the limit, if one was given).
        skipped_empty: int. Pairs dropped because a side was empty after stripping.
        sample: `ParallelCorpus`. Up to `sample_size` of the pairs, drawn uniformly (reservoir
            sampling, seeded): all of them, in corpus order, when the corpus is that small.
    """

    pairs: int
    skipped_empty: int
    sample: ParallelCorpus


def _scan(
    pairs: Iterable[tuple[str, str]],
    origin: str,
    where: str,
    *,
    sample_size: int,
    seed: int,
    limit: int | None,
    check_rest: bool = False,
    count_label: str = "pairs",
) -> CorpusScan:
    """One pass: strip, drop empty pairs, stop counting at `limit` (and reading too, unless
    `check_rest`: reading validates), keep a reservoir sample."""
    counts, sample, kept = _Counts(), [], 0
    rng = random.Random(seed)
    for pair in _non_empty(pairs, counts):
        if limit is not None and kept >= limit:
            counts.total -= 1  # read one past the limit: not part of the corpus
            if check_rest:
                collections.deque(pairs, maxlen=0)
            break
        if kept < sample_size:
            sample.append(pair)
        else:
            slot = rng.randrange(kept + 1)
            if slot < sample_size:
                sample[slot] = pair
        kept += 1
    if not kept:
        raise CorpusError(f"{where}: all {counts.total} {count_label} are empty")
    sources, targets = (zip(*sample, strict=True)) if sample else ((), ())
    label = f"{origin}, sample of {len(sample)}" if len(sample) < kept else origin
    return CorpusScan(kept, counts.total - kept, ParallelCorpus(sources, targets, label))


class _Streamed:
    """What `CorpusFiles` and `TfdsSplit` share: reading into memory and scanning, both from
    `raw_pairs()`; `where` names the corpus in errors, `count_label` what it counts."""

    count_label = "pairs"
    checks_past_limit = True  # what tf.data reads past a limit must pass the checks too

    def read(self) -> ParallelCorpus:
        """The whole corpus in memory, stripped, empty pairs dropped and counted."""
        with contextlib.closing(self.raw_pairs()) as pairs:
            return _collect(pairs, self.origin, self.where, self.count_label)

    def scan(self, *, sample_size: int = 0, seed: int = 0, limit: int | None = None):
        """One streaming pass: the checks of the module doc, counts, a bounded sample.

        Args:
            sample_size: int. Pairs to keep in `CorpusScan.sample` (at most). Defaults to 0.
            seed: int. Seed of the sampling. Defaults to 0.
            limit: int or None. Only the first `limit` non-empty pairs count. Files are still
                checked to their end (`to_dataset` reads them in blocks, past the limit), so a
                bad line anywhere fails here, as without a limit. Defaults to None.

        Returns:
            A `CorpusScan`. Raises `CorpusError` as `read()` does.
        """
        with contextlib.closing(self.raw_pairs()) as pairs:
            return _scan(
                pairs,
                self.origin,
                self.where,
                sample_size=sample_size,
                seed=seed,
                limit=limit,
                check_rest=self.checks_past_limit,
                count_label=self.count_label,
            )


@functools.cache
def _strip_pattern() -> str:
    """An RE2 pattern of leading or trailing characters that Python's `str.strip()` removes
    (Unicode whitespace), so that the graph strips exactly as the Python readers do."""
    spaces = [code for code in range(sys.maxunicode + 1) if chr(code).isspace()]
    ranges = []
    for code in spaces:
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    members = "".join(
        f"\\x{{{low:x}}}" + (f"-\\x{{{high:x}}}" if high > low else "") for low, high in ranges
    )
    return f"^[{members}]+|[{members}]+$"


@plain
def _strip_batch(sources, targets):
    pattern = _strip_pattern()
    return (
        tf.strings.regex_replace(sources, pattern, ""),
        tf.strings.regex_replace(targets, pattern, ""),
    )


@plain
def _both_non_empty(source, target):
    return tf.logical_and(tf.strings.length(source) > 0, tf.strings.length(target) > 0)


__all__ = ["CorpusError", "CorpusScan", "ParallelCorpus"]

"""Parallel-corpus readers: TSV columns, a pair of aligned text files, or a TFDS dataset.

Each reader returns a `ParallelCorpus` of stripped (source, target) sentence strings, or raises
`CorpusError` naming the file and line. Rules that users rely on:
- Files ending in `.xz`, `.gz` or `.bz2` are decompressed transparently; other files are read
  as they are. Every line is decoded as UTF-8 by the reader, so an invalid byte gives
  `PATH:LINE: invalid UTF-8 at byte COL (0xNN)` (line and byte column 1-based).
- Lines end at "\\n"; a trailing "\\r" (Windows line ends) and a UTF-8 byte-order mark at the
  start of the file are dropped. Every sentence is stripped of surrounding whitespace.
- TSV: the first line is the header, fields are separated by tabs, with no quoting (as
  `csv.QUOTE_NONE`), and columns are chosen by name. Every row must have exactly as many fields
  as the header; blank lines may end the file (they are not rows), not come between rows.
- Text pair: one sentence a line in each file; both files must have the same number of lines.
- TFDS: a dataset already prepared in `data_dir` (nothing is downloaded);
  `tensorflow-datasets` is an optional dependency, imported only when TFDS is read.
- A pair with an empty side (after stripping) is skipped and counted in `skipped_empty`; it is
  not an error. A corpus with no pair left is.
- Validation happens entirely while reading: the readers write nothing, so a bad corpus fails
  before any output exists.

Two ways to read, with the same rules:
- `read_tsv`, `read_text_pair`, `read_tfds` read a corpus into memory (`ParallelCorpus`):
  dev and test sets, examples, small corpora.
- `tsv_files` and `text_files` (giving `CorpusFiles`) and `TfdsSplit` describe a corpus
  without reading it, for training corpora of any size: `scan()` streams over it once (the
  checks above, counts, and a bounded sample to learn a vocabulary from) and `to_dataset()`
  reads it through `tf.data` from the files, so neither Python nor the graph ever holds it
  whole. TSV files may be a glob pattern matching several files, which workers then share
  out by file. (`read_tsv` and the others are these, read whole: `read()`.)
"""

from __future__ import annotations

from keras_transformer._backends import require_tensorflow

require_tensorflow("kt.corpus")

import bz2
import collections
import contextlib
import dataclasses
import functools
import glob
import gzip
import itertools
import lzma
import os
import random
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence

import tensorflow as tf

# The functions tf.data traces have no Python control flow: AutoGraph's conversion only costs
# time (keras_transformer.data says more).
plain = tf.autograph.experimental.do_not_convert

_OPENERS = {".xz": lzma.open, ".gz": gzip.open, ".bz2": bz2.open}


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


def _lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """(1-based line number, decoded line without its line end) for each line of `path`."""
    name = os.fspath(path)
    opener = _OPENERS.get(os.path.splitext(name)[1].lower(), open)
    try:
        with opener(name, "rb") as file:
            for number, raw in enumerate(file, start=1):
                raw = raw.removesuffix(b"\n").removesuffix(b"\r")
                line = _utf8(raw, f"{name}:{number}")
                yield number, line.removeprefix("\ufeff") if number == 1 else line
    except FileNotFoundError:
        raise CorpusError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise CorpusError(f"{name}: is a directory, expected a file") from None
    except (OSError, EOFError, lzma.LZMAError) as error:
        # Corrupt or truncated compressed data, or an unreadable file.
        raise CorpusError(f"{name}: cannot read: {error}") from None


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


def read_tsv(path: str | os.PathLike, source_column: str, target_column: str) -> ParallelCorpus:
    """Reads two columns of a tab-separated file with a header line.

    Args:
        path: str or path. The TSV file, optionally `.xz`/`.gz`/`.bz2`-compressed.
        source_column: str. Header name of the source column, e.g. "en".
        target_column: str. Header name of the target column, e.g. "es".

    Returns:
        A `ParallelCorpus` with origin "PATH (SOURCE -> TARGET)".

    Raises:
        CorpusError: the file is missing, empty or not UTF-8, a column is not in the header,
            a row has the wrong number of fields, or no non-empty pair is left.

    Examples:
        `read_tsv("data/bible-en-es/dev.tsv.xz", "en", "es")` reads the bundled corpus's dev
        split; here a small file is written first:

        >>> import pathlib, tempfile
        >>> from keras_transformer.corpus import read_tsv
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "pairs.tsv"
        >>> _ = path.write_text("en\\tes\\na house\\tuna casa\\na dog\\tun perro\\n", "utf-8")
        >>> pairs = read_tsv(path, "en", "es")
        >>> len(pairs), pairs.targets[0], pairs.origin
        (2, 'una casa', '.../pairs.tsv (en -> es)')
    """
    name = os.fspath(path)
    origin = f"{name} ({source_column} -> {target_column})"
    return CorpusFiles("tsv", ((name,),), source_column, target_column, origin).read()


def _tsv_header(
    name: str, lines: Iterator[tuple[int, str]], source_column: str, target_column: str
) -> tuple[list[int], int]:
    """(indices of the two columns, number of fields) from the header line."""
    first = next(lines, None)
    if first is None:
        raise CorpusError(f"{name}: empty file, expected a header line")
    header = [field.strip() for field in first[1].split("\t")]
    columns = []
    for column in (source_column, target_column):
        if column not in header:
            raise CorpusError(
                f"{name}:1: no column {column!r}; the header has: {', '.join(header)}"
            )
        if header.count(column) > 1:
            raise CorpusError(f"{name}:1: column {column!r} appears {header.count(column)} times")
        columns.append(header.index(column))
    return columns, len(header)


def _tsv_rows(
    name: str, lines: Iterator[tuple[int, str]], columns: list[int], width: int
) -> Iterator[tuple[str, str]]:
    """The two fields of each row after the header, each row checked for `width` fields.
    Blank lines (whitespace alone, not a row of `width` fields) may end the file, as an
    editor or `echo >>` leaves them; one between rows is an error."""
    blank = None  # the first of the blank lines since the last row
    for number, line in lines:
        fields = line.split("\t")
        if len(fields) != width and not line.strip():
            blank = blank or number
            continue
        if blank is not None:
            raise CorpusError(
                f"{name}:{blank}: an empty line, but the header has {width} fields (blank "
                "lines may end the file, not come between rows)"
            )
        if len(fields) != width:
            found = f"{len(fields)} field" + "s" * (len(fields) > 1)
            raise CorpusError(f"{name}:{number}: {found}, but the header has {width} fields")
        yield fields[columns[0]], fields[columns[1]]


def read_text_pair(
    source_path: str | os.PathLike, target_path: str | os.PathLike
) -> ParallelCorpus:
    """Reads two aligned text files, one sentence a line, line i of one translating line i of
    the other (the `train.en` / `train.de` layout of WMT and OpenNMT).

    Args:
        source_path: str or path. Source sentences, optionally `.xz`/`.gz`/`.bz2`-compressed.
        target_path: str or path. Target sentences, likewise.

    Returns:
        A `ParallelCorpus` with origin "SOURCE_PATH -> TARGET_PATH".

    Raises:
        CorpusError: a file is missing, empty or not UTF-8, the line counts differ, or no
            non-empty pair is left.

    Examples:
        >>> import pathlib, tempfile
        >>> from keras_transformer.corpus import read_text_pair
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / "train.en").write_text("a house\\na dog\\n", "utf-8")
        >>> _ = (folder / "train.es").write_text("una casa\\nun perro\\n", "utf-8")
        >>> pairs = read_text_pair(folder / "train.en", folder / "train.es")
        >>> list(zip(pairs.sources, pairs.targets))
        [('a house', 'una casa'), ('a dog', 'un perro')]
    """
    source_name, target_name = os.fspath(source_path), os.fspath(target_path)
    origin = f"{source_name} -> {target_name}"
    return CorpusFiles("text", ((source_name, target_name),), origin=origin).read()


def read_tfds(
    name: str,
    split: str,
    source_language: str,
    target_language: str,
    data_dir: str | None = None,
) -> ParallelCorpus:
    """Reads a prepared TensorFlow Datasets translation dataset, without downloading anything.

    The translation datasets yield dicts keyed by language code: `wmt14_translate/de-en` has
    "de" and "en", `ted_hrlr_translate/pt_to_en` has "pt" and "en". Needs the optional
    dependency `tensorflow-datasets`, and the dataset prepared in `data_dir` beforehand
    (`tfds build NAME --data_dir DIR` on a machine with internet).

    Args:
        name: str. The TFDS name with its config, e.g. "ted_hrlr_translate/pt_to_en".
        split: str. A TFDS split, e.g. "train", "validation" or "train[:10%]".
        source_language: str. Key of the source sentences, e.g. "pt".
        target_language: str. Key of the target sentences, e.g. "en".
        data_dir: str or None. Where the dataset was prepared. Defaults to None (TFDS's
            default, `$TFDS_DATA_DIR` or `~/tensorflow_datasets`).

    Returns:
        A `ParallelCorpus` with origin "tfds:NAME:SPLIT (SOURCE -> TARGET)".

    Raises:
        CorpusError: tensorflow-datasets is missing, the dataset is unknown or not prepared,
            a language is not a key of its examples, or no non-empty pair is left.

    Examples:
        Skipped by the doctests: it needs the dataset prepared beforehand (`tfds build`), which
        needs the internet.

        >>> from keras_transformer.corpus import read_tfds
        >>> pairs = read_tfds("ted_hrlr_translate/pt_to_en", "train", "pt", "en")  # doctest: +SKIP
    """
    return TfdsSplit(name, split, source_language, target_language, data_dir).read()


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


@dataclasses.dataclass(frozen=True)
class TfdsSplit(_Streamed):
    """A prepared TFDS translation split to stream (arguments and rules as `read_tfds`):
    `scan()` iterates it once in Python, `to_dataset()` is TFDS's own `tf.data` reader."""

    name: str
    split: str
    source_language: str
    target_language: str
    data_dir: str | None = None
    count_label = "examples"
    checks_past_limit = False  # TFDS's reader takes the first examples alone

    @property
    def where(self) -> str:
        return f"tfds:{self.name}:{self.split}"

    @property
    def origin(self) -> str:
        return f"{self.where} ({self.source_language} -> {self.target_language})"

    def raw_pairs(self) -> Iterator[tuple[str, str]]:
        """Every (source, target) example, decoded (a CorpusError names a bad one)."""
        pairs = self._pairs().batch(1024)  # first: it explains a missing tensorflow-datasets
        import tensorflow_datasets as tfds

        number = 0
        for sources, targets in tfds.as_numpy(pairs):
            for source, target in zip(sources, targets, strict=True):
                number += 1
                example = f"{self.where}: example {number}"
                yield (
                    _utf8(source, f"{example} {self.source_language!r}"),
                    _utf8(target, f"{example} {self.target_language!r}"),
                )
        if not number:
            raise CorpusError(f"{self.where}: the split has no examples")

    def to_dataset(self, *, shard=None, limit=None) -> tf.data.Dataset:
        """As `CorpusFiles.to_dataset`; a shard is every num_shards-th example."""
        pairs = self._pairs().batch(_READ_BATCH).map(_strip_batch).unbatch()
        pairs = pairs.filter(_both_non_empty)
        if limit is not None:
            pairs = pairs.take(limit)
        return pairs if shard is None else pairs.shard(*shard)

    def _pairs(self) -> tf.data.Dataset:
        """TFDS's dataset of (source, target) strings, checked."""
        where = self.where
        try:
            import tensorflow_datasets as tfds
        except ImportError:
            raise CorpusError(
                f"{where}: reading TFDS datasets needs tensorflow-datasets; "
                "pip install tensorflow-datasets"
            ) from None
        try:
            dataset = tfds.load(self.name, split=self.split, data_dir=self.data_dir, download=False)
        except tfds.core.DatasetNotFoundError:
            raise CorpusError(f"{where}: TFDS has no dataset named {self.name!r}") from None
        except AssertionError:
            directory = self.data_dir or tfds.core.constants.DATA_DIR
            raise CorpusError(
                f"{where}: the dataset is not prepared in {directory}; on a machine with "
                f"internet run `tfds build {self.name} --data_dir DIR`, then copy DIR here and "
                "pass it as data_dir"
            ) from None
        except ValueError as error:  # An unknown split or config.
            raise CorpusError(f"{where}: {error}") from None
        spec = dataset.element_spec
        keys = sorted(spec) if isinstance(spec, dict) else []
        source, target = self.source_language, self.target_language
        for language in (source, target):
            if language not in keys:
                raise CorpusError(
                    f"{where}: examples have no key {language!r}; "
                    f"the dataset has: {', '.join(keys) or 'no named features'}"
                )
            if spec[language].dtype != tf.string or spec[language].shape.rank != 0:
                raise CorpusError(f"{where}: {language!r} is {spec[language]}, not a sentence")
        return dataset.map(plain(lambda example: (example[source], example[target])))


def _utf8(raw: bytes, where: str) -> str:
    """`raw` decoded as UTF-8, or a CorpusError naming `where` and the 1-based byte column."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CorpusError(
            f"{where}: invalid UTF-8 at byte {error.start + 1} (0x{raw[error.start]:02x})"
        ) from None


# Streaming: a corpus described, scanned once in Python, and read through tf.data.

_READ_BATCH = 4096  # lines a tf.data element holds while files are read


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


@dataclasses.dataclass(frozen=True)
class CorpusFiles(_Streamed):
    """A parallel corpus in files, never held whole: `scan()` streams it once in Python,
    `to_dataset()` reads it through `tf.data`. Made by `tsv_files` or `text_files`.

    Args:
        kind: "tsv" or "text".
        units: tuple of file tuples: `(path,)` per TSV file, `(source path, target path)` per
            text pair. Read in this order.
        source_column: str. The TSV column of the source ("" for text pairs).
        target_column: str. The TSV column of the target ("" for text pairs).
        origin: str. For logs.
    """

    kind: str
    units: tuple[tuple[str, ...], ...]
    source_column: str = ""
    target_column: str = ""
    origin: str = ""

    def raw_pairs(self) -> Iterator[tuple[str, str]]:
        """Every (source, target) as read, validated, before stripping; in file order."""
        for unit in self.units:
            yield from self._unit_pairs(unit)

    @property
    def where(self) -> str:
        """A single TSV file names itself in errors; anything else by its origin."""
        return self.units[0][0] if len(self.units) == 1 and self.kind == "tsv" else self.origin

    def to_dataset(
        self, *, shard: tuple[int, int] | None = None, limit: int | None = None
    ) -> tf.data.Dataset:
        """The pairs as a `tf.data.Dataset` of scalar strings, read from the files.

        Stripped and with empty pairs dropped as `scan` does (scan first: the files are not
        validated here). Plain and `.gz` files are read by TensorFlow's own readers; `.xz`
        and `.bz2` ones, which TensorFlow cannot decompress, by a Python generator.

        Args:
            shard: (num_shards, index) or None. This worker's share: whole files when there
                are at least `num_shards` files, else every num_shards-th pair. Defaults to
                None.
            limit: int or None. The first `limit` pairs of the corpus (before sharding, which
                is then by pair). Defaults to None.
        """
        units = self.units
        by_file = shard is not None and limit is None and len(units) >= shard[0]
        if by_file:
            units = units[shard[1] :: shard[0]]
        datasets = [self._unit_dataset(unit) for unit in units]
        pairs = datasets[0]
        for dataset in datasets[1:]:
            pairs = pairs.concatenate(dataset)
        pairs = pairs.map(_strip_batch).unbatch().filter(_both_non_empty)
        if limit is not None:
            pairs = pairs.take(limit)
        if shard is not None and not by_file:
            pairs = pairs.shard(*shard)
        return pairs

    def _unit_pairs(self, unit: tuple[str, ...]) -> Iterator[tuple[str, str]]:
        if self.kind == "tsv":
            (path,) = unit
            with contextlib.closing(_lines(path)) as lines:
                columns, width = _tsv_header(path, lines, self.source_column, self.target_column)
                rows = 0
                for row in _tsv_rows(path, lines, columns, width):
                    rows += 1
                    yield row
            if not rows:
                raise CorpusError(f"{path}: no sentence pairs after the header")
            return
        source_path, target_path = unit
        with contextlib.closing(_lines(source_path)) as sources:
            with contextlib.closing(_lines(target_path)) as targets:
                counts = [0, 0]
                for left, right in itertools.zip_longest(sources, targets):
                    for side, item in enumerate((left, right)):
                        if item is not None:
                            counts[side] = item[0]
                    if left is not None and right is not None:
                        yield left[1], right[1]
        for name, count in zip(unit, counts, strict=True):
            if not count:
                raise CorpusError(f"{name}: empty file, expected one sentence a line")
        if counts[0] != counts[1]:
            raise CorpusError(
                f"{source_path} has {counts[0]} lines but {target_path} has {counts[1]}; "
                "parallel files must align line by line"
            )

    def _unit_dataset(self, unit: tuple[str, ...]) -> tf.data.Dataset:
        """Batches of raw (source, target) fields of one unit."""
        if all(_tf_readable(path) for path in unit):
            if self.kind == "tsv":
                (path,) = unit
                with contextlib.closing(_lines(path)) as lines:
                    columns, width = _tsv_header(
                        path, lines, self.source_column, self.target_column
                    )
                rows = _text_lines(path).skip(1).batch(_READ_BATCH)
                return rows.map(plain(lambda lines: _tsv_columns(lines, columns, width)))
            sources, targets = (_text_lines(path, drop_bom=True) for path in unit)
            return tf.data.Dataset.zip(sources, targets).batch(_READ_BATCH)
        return _generated_batches(lambda: self._unit_pairs(unit))


def tsv_files(pattern: str | os.PathLike, source_column: str, target_column: str) -> CorpusFiles:
    """A TSV corpus to stream: one file, or a glob pattern (`train-*.tsv.gz`) matching several,
    read in sorted order. Columns and rules as `read_tsv`.

    Raises:
        CorpusError: nothing matches the pattern.
    """
    name = os.fspath(pattern)
    paths = _matching(name)
    origin = f"{name} ({source_column} -> {target_column})"
    return CorpusFiles("tsv", tuple((p,) for p in paths), source_column, target_column, origin)


def text_files(source_path: str | os.PathLike, target_path: str | os.PathLike) -> CorpusFiles:
    """Two aligned text files to stream (rules as `read_text_pair`), or two glob patterns
    (`train-*.en`, `train-*.de`) whose sorted matches pair up file by file.

    Raises:
        CorpusError: a file is missing, or the patterns match different numbers of files.
    """
    source_name, target_name = os.fspath(source_path), os.fspath(target_path)
    sources, targets = _matching(source_name), _matching(target_name)
    if len(sources) != len(targets):
        raise CorpusError(
            f"{source_name} matches {len(sources)} files but {target_name} matches "
            f"{len(targets)}; parallel files must pair up"
        )
    origin = f"{source_name} -> {target_name}"
    return CorpusFiles("text", tuple(zip(sources, targets, strict=True)), origin=origin)


def _matching(name: str) -> list[str]:
    if not glob.has_magic(name):
        if os.path.isdir(name):
            raise CorpusError(f"{name}: is a directory, expected a file")
        if not os.path.exists(name):
            raise CorpusError(f"{name}: no such file")
        return [name]
    paths = sorted(p for p in glob.glob(name) if os.path.isfile(p))
    if not paths:
        raise CorpusError(f"{name}: no file matches this pattern")
    return paths


def _tf_readable(path: str) -> bool:
    """Whether TensorFlow reads the file itself (plain or gzip)."""
    return os.path.splitext(path)[1].lower() not in (".xz", ".bz2")


def _text_lines(path: str, drop_bom: bool = False) -> tf.data.Dataset:
    gzipped = os.path.splitext(path)[1].lower() == ".gz"
    lines = tf.data.TextLineDataset(path, compression_type="GZIP" if gzipped else "")
    if not drop_bom:
        return lines
    first = lines.take(1).map(plain(lambda line: tf.strings.regex_replace(line, "^\ufeff", "")))
    return first.concatenate(lines.skip(1))


def _tsv_columns(lines, columns, width):
    # Every line was checked by scan(): those without `width` fields are the blank lines
    # that may end a file.
    tabs = tf.strings.length(tf.strings.regex_replace(lines, "[^\t]", ""))
    lines = tf.boolean_mask(lines, tf.equal(tabs, width - 1))
    fields = tf.strings.split(lines, "\t")  # (batch, (fields))
    starts = fields.row_starts()
    return tuple(tf.gather(fields.values, starts + column) for column in columns)


def _generated_batches(make_pairs: Callable[[], Iterator[tuple[str, str]]]):
    """Batches of pairs from a Python iterator (for files TensorFlow cannot read)."""

    def batches():
        with contextlib.closing(make_pairs()) as pairs:
            while chunk := list(itertools.islice(pairs, _READ_BATCH)):
                sources, targets = zip(*chunk, strict=True)
                yield list(sources), list(targets)

    spec = tf.TensorSpec([None], tf.string)
    return tf.data.Dataset.from_generator(batches, output_signature=(spec, spec))


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


__all__ = [
    "CorpusError",
    "CorpusFiles",
    "CorpusScan",
    "ParallelCorpus",
    "TfdsSplit",
    "read_text_pair",
    "read_tfds",
    "read_tsv",
    "text_files",
    "tsv_files",
]

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
  as the header.
- Text pair: one sentence a line in each file; both files must have the same number of lines.
- TFDS: a dataset already prepared in `data_dir` (nothing is downloaded), read into memory;
  `tensorflow-datasets` is an optional dependency, imported only by `read_tfds`.
- A pair with an empty side (after stripping) is skipped and counted in `skipped_empty`; it is
  not an error. A corpus with no pair left is.
- Validation happens entirely while reading, into memory: the readers write nothing, so a bad
  corpus fails before any output exists.
"""

from __future__ import annotations

import bz2
import contextlib
import dataclasses
import gzip
import lzma
import os
from collections.abc import Iterable, Iterator, Sequence

import tensorflow as tf

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

    Example:
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
    sources, targets, total = [], [], 0
    for source, target in pairs:
        total += 1
        source, target = source.strip(), target.strip()
        if source and target:
            sources.append(source)
            targets.append(target)
    if not sources:
        raise CorpusError(f"{where}: all {total} {count_label} are empty")
    return ParallelCorpus(sources, targets, origin, skipped_empty=total - len(sources))


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

    Example:
    >>> dev = read_tsv("data/bible-en-es/dev.tsv.xz", "en", "es")  # doctest: +SKIP
    >>> len(dev), dev.origin  # doctest: +SKIP
    (316, 'data/bible-en-es/dev.tsv.xz (en -> es)')
    """
    name = os.fspath(path)
    with contextlib.closing(_lines(path)) as lines:
        pairs = _tsv_pairs(name, lines, source_column, target_column)
    if not pairs:
        raise CorpusError(f"{name}: no sentence pairs after the header")
    return _collect(pairs, f"{name} ({source_column} -> {target_column})", name)


def _tsv_pairs(
    name: str, lines: Iterator[tuple[int, str]], source_column: str, target_column: str
) -> list[tuple[str, str]]:
    """The (source, target) fields of every row, checked against the header."""
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

    pairs = []
    for number, line in lines:
        fields = line.split("\t")
        if len(fields) != len(header):
            found = (
                "an empty line" if not line else f"{len(fields)} field" + "s" * (len(fields) > 1)
            )
            raise CorpusError(f"{name}:{number}: {found}, but the header has {len(header)} fields")
        pairs.append((fields[columns[0]], fields[columns[1]]))
    return pairs


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

    Example:
    >>> pairs = read_text_pair("newstest2014.en", "newstest2014.de")  # doctest: +SKIP
    """
    source_name, target_name = os.fspath(source_path), os.fspath(target_path)
    sides = []
    for name, path in ((source_name, source_path), (target_name, target_path)):
        lines = [line for _, line in _lines(path)]
        if not lines:
            raise CorpusError(f"{name}: empty file, expected one sentence a line")
        sides.append(lines)
    if len(sides[0]) != len(sides[1]):
        raise CorpusError(
            f"{source_name} has {len(sides[0])} lines but {target_name} has {len(sides[1])}; "
            "parallel files must align line by line"
        )
    origin = f"{source_name} -> {target_name}"
    return _collect(zip(*sides, strict=True), origin, origin)


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

    Example:
    >>> pairs = read_tfds("ted_hrlr_translate/pt_to_en", "train", "pt", "en")  # doctest: +SKIP
    """
    where = f"tfds:{name}:{split}"
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise CorpusError(
            f"{where}: reading TFDS datasets needs tensorflow-datasets; "
            "pip install tensorflow-datasets"
        ) from None
    try:
        dataset = tfds.load(name, split=split, data_dir=data_dir, download=False)
    except tfds.core.DatasetNotFoundError:
        raise CorpusError(f"{where}: TFDS has no dataset named {name!r}") from None
    except AssertionError:
        directory = data_dir or tfds.core.constants.DATA_DIR
        raise CorpusError(
            f"{where}: the dataset is not prepared in {directory}; on a machine with internet "
            f"run `tfds build {name} --data_dir DIR`, then copy DIR here and pass it as "
            "data_dir"
        ) from None
    except ValueError as error:  # An unknown split or config.
        raise CorpusError(f"{where}: {error}") from None
    spec = dataset.element_spec
    keys = sorted(spec) if isinstance(spec, dict) else []
    for language in (source_language, target_language):
        if language not in keys:
            raise CorpusError(
                f"{where}: examples have no key {language!r}; "
                f"the dataset has: {', '.join(keys) or 'no named features'}"
            )
        if spec[language].dtype != tf.string or spec[language].shape.rank != 0:
            raise CorpusError(f"{where}: {language!r} is {spec[language]}, not a sentence")
    pairs = dataset.map(lambda example: (example[source_language], example[target_language]))
    sources, targets = [], []
    for source_batch, target_batch in tfds.as_numpy(pairs.batch(1024)):
        for source, target in zip(source_batch, target_batch, strict=True):
            example = f"{where}: example {len(sources) + 1}"
            sources.append(_utf8(source, f"{example} {source_language!r}"))
            targets.append(_utf8(target, f"{example} {target_language!r}"))
    if not sources:
        raise CorpusError(f"{where}: the split has no examples")
    origin = f"{where} ({source_language} -> {target_language})"
    return _collect(zip(sources, targets, strict=True), origin, where, count_label="examples")


def _utf8(raw: bytes, where: str) -> str:
    """`raw` decoded as UTF-8, or a CorpusError naming `where` and the 1-based byte column."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CorpusError(
            f"{where}: invalid UTF-8 at byte {error.start + 1} (0x{raw[error.start]:02x})"
        ) from None

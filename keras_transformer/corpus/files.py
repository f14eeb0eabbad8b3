"""The two file formats of a parallel corpus: TSV columns, and a pair of aligned text files.

`read_tsv` and `read_text_pair` read one into memory; `tsv_files` and `text_files` describe
one (`CorpusFiles`) to scan once in Python and stream through `tf.data`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
from collections.abc import Iterator

import tensorflow as tf

from keras_transformer.corpus._lines import (
    _generated_batches,
    _lines,
    _matching,
    _text_lines,
    _tf_readable,
)
from keras_transformer.corpus.pairs import (
    _READ_BATCH,
    CorpusError,
    ParallelCorpus,
    _both_non_empty,
    _Streamed,
    _strip_batch,
    plain,
)


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


def _tsv_columns(lines, columns, width):
    # Every line was checked by scan(): those without `width` fields are the blank lines
    # that may end a file.
    tabs = tf.strings.length(tf.strings.regex_replace(lines, "[^\t]", ""))
    lines = tf.boolean_mask(lines, tf.equal(tabs, width - 1))
    fields = tf.strings.split(lines, "\t")  # (batch, (fields))
    starts = fields.row_starts()
    return tuple(tf.gather(fields.values, starts + column) for column in columns)


__all__ = ["CorpusFiles", "read_text_pair", "read_tsv", "text_files", "tsv_files"]

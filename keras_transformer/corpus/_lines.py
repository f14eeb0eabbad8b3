"""The lines of a corpus file, in Python and through `tf.data`: compressed files (`.xz`, `.gz`,
`.bz2`) decompressed, each line decoded as UTF-8 and its line end dropped, a byte-order mark at
the start dropped; and the files a glob pattern names.
"""

from __future__ import annotations

import bz2
import contextlib
import glob
import gzip
import itertools
import lzma
import os
from collections.abc import Callable, Iterator

import tensorflow as tf

from keras_transformer.corpus.pairs import _READ_BATCH, CorpusError, _utf8, plain

_OPENERS = {".xz": lzma.open, ".gz": gzip.open, ".bz2": bz2.open}


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


def _generated_batches(make_pairs: Callable[[], Iterator[tuple[str, str]]]):
    """Batches of pairs from a Python iterator (for files TensorFlow cannot read)."""

    def batches():
        with contextlib.closing(make_pairs()) as pairs:
            while chunk := list(itertools.islice(pairs, _READ_BATCH)):
                sources, targets = zip(*chunk, strict=True)
                yield list(sources), list(targets)

    spec = tf.TensorSpec([None], tf.string)
    return tf.data.Dataset.from_generator(batches, output_signature=(spec, spec))

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

The modules, one concept each:
pairs.py   `ParallelCorpus`, `CorpusScan`, `CorpusError`: the pairs and the rules above
files.py   the TSV and text-pair formats: `read_tsv`, `read_text_pair`, `tsv_files`,
           `text_files` (`CorpusFiles`)
tfds.py    `read_tfds`, `TfdsSplit`
_lines.py  a file's lines (decompressed, decoded) in Python and through `tf.data`
"""

from keras_transformer._backends import require_tensorflow

require_tensorflow("kt.corpus")

from keras_transformer.corpus.files import (  # noqa: E402
    CorpusFiles,
    read_text_pair,
    read_tsv,
    text_files,
    tsv_files,
)
from keras_transformer.corpus.pairs import CorpusError, CorpusScan, ParallelCorpus  # noqa: E402
from keras_transformer.corpus.tfds import TfdsSplit, read_tfds  # noqa: E402

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

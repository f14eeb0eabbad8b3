"""Tests of the parallel-corpus readers: the bundled corpus, TSV, text pairs, TFDS (mocked,
offline), and every error naming its file and line."""

import bz2
import gzip
import lzma
import re
import sys
from pathlib import Path

import pytest

from keras_transformer.corpus import (
    CorpusError,
    ParallelCorpus,
    read_text_pair,
    read_tfds,
    read_tsv,
)

DEV = Path(__file__).resolve().parent.parent / "data" / "bible-en-es" / "dev.tsv.xz"
OPENERS = {".xz": lzma.open, ".gz": gzip.open, ".bz2": bz2.open}


def write(path: Path, data: bytes) -> Path:
    """Writes `data` to `path`, compressed as its suffix says."""
    with OPENERS.get(path.suffix, open)(path, "wb") as file:
        file.write(data)
    return path


def at(path: Path, line: int | None = None) -> str:
    """The start of an error message about `path` (and `line`), as a regex."""
    return re.escape(f"{path}:{line}:" if line else f"{path}:")


TSV = b"id\ten\tes\n1\ta house\tuna casa\n2\tthe dog\tel perro\n"


# The bundled corpus.


def test_bundled_dev_split():
    dev = read_tsv(DEV, "en", "es")
    assert len(dev) == 316 and dev.skipped_empty == 0
    assert dev.origin == f"{DEV} (en -> es)"
    assert dev.sources[0].startswith("Now in the days of Ahasuerus (this is Ahasuerus who")
    assert dev.targets[0].startswith("Y ACONTECIÓ en los días de Assuero")
    assert dev.sources[1].startswith("in those days, when the King Ahasuerus sat on the throne")
    assert all(s == s.strip() and s for s in dev.sources + dev.targets)
    kjv = read_tsv(DEV, "en_kjv", "es")
    assert kjv.targets == dev.targets and kjv.sources[0].startswith("Now it came to pass")


# Reading.


@pytest.mark.parametrize("suffix", ["", ".gz", ".xz", ".bz2"])
def test_read_tsv_plain_and_compressed(tmp_path, suffix):
    path = write(tmp_path / f"pairs.tsv{suffix}", TSV)
    corpus = read_tsv(path, "en", "es")
    assert corpus.sources == ("a house", "the dog")
    assert corpus.targets == ("una casa", "el perro")
    assert corpus.origin == f"{path} (en -> es)"
    assert read_tsv(str(path), "es", "id").sources == ("una casa", "el perro")


def test_read_tsv_strips_whitespace_crlf_and_bom(tmp_path):
    data = "\ufeffen \t es\r\n  a house \t\u00a0una casa \r\nthe dog\tel perro".encode()
    corpus = read_tsv(write(tmp_path / "pairs.tsv", data), "en", "es")
    assert corpus.sources == ("a house", "the dog")
    assert corpus.targets == ("una casa", "el perro")


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_read_text_pair(tmp_path, suffix):
    source = write(tmp_path / f"train.en{suffix}", b"a house\n  the dog \r\nthree\n")
    target = write(tmp_path / f"train.es{suffix}", "una casa\nel perro\ntrés".encode())
    corpus = read_text_pair(source, target)
    assert corpus.sources == ("a house", "the dog", "three")
    assert corpus.targets == ("una casa", "el perro", "trés")
    assert corpus.origin == f"{source} -> {target}" and corpus.skipped_empty == 0


def test_empty_pairs_are_skipped_and_counted(tmp_path):
    tsv = b"en\tes\na\tuna\n\t\n  \tdos\nthree\t \nfour\tcuatro\n"
    corpus = read_tsv(write(tmp_path / "pairs.tsv", tsv), "en", "es")
    assert corpus.sources == ("a", "four") and corpus.skipped_empty == 3
    source = write(tmp_path / "x.en", b"a\n\nc\n \n")
    target = write(tmp_path / "x.es", b"una\ndos\n\ncuatro\n")
    corpus = read_text_pair(source, target)
    assert corpus.targets == ("una",) and corpus.skipped_empty == 3


def test_take(tmp_path):
    corpus = read_tsv(write(tmp_path / "pairs.tsv", TSV), "en", "es")
    first = corpus.take(1)
    assert first.sources == ("a house",) and first.targets == ("una casa",)
    assert first.origin.startswith(corpus.origin) and len(first) == 1
    assert corpus.take(2) == corpus and corpus.take(100) == corpus
    assert len(corpus.take(0)) == 0
    with pytest.raises(ValueError, match=r"n=-1"):
        corpus.take(-1)


def test_to_dataset_yields_the_same_strings():
    dev = read_tsv(DEV, "en", "es").take(20)
    dataset = dev.to_dataset()
    assert [spec.shape.rank for spec in dataset.element_spec] == [0, 0]
    assert [spec.dtype.name for spec in dataset.element_spec] == ["string", "string"]
    pairs = [(s.decode(), t.decode()) for s, t in dataset.as_numpy_iterator()]
    assert pairs == list(zip(dev.sources, dev.targets, strict=True))
    assert list(dev.take(0).to_dataset()) == []


def test_parallel_corpus_stores_tuples_and_checks_lengths():
    corpus = ParallelCorpus(["a"], ["b"], "inline")
    assert corpus.sources == ("a",) and hash(corpus) == hash(
        ParallelCorpus(("a",), ("b",), "inline")
    )
    assert "1 pairs from inline" in repr(corpus)
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        ParallelCorpus(["a", "b"], ["c"])


# TSV errors: each names the file, and the line where there is one.


HEADER = b"id\ten\tes\n"
TSV_ERRORS = {
    "empty file": (b"", "en", None, "empty file, expected a header line"),
    "missing column": (TSV, "fr", 1, "no column 'fr'; the header has: id, en, es"),
    "duplicated column": (b"en\ten\tes\n", "en", 1, "column 'en' appears 2 times"),
    "short row": (HEADER + b"1\ta\tb\n2\tc\n", "en", 3, "2 fields, but the header has 3"),
    "long row": (HEADER + b"1\ta\tb\tc\n", "en", 2, "4 fields, but the header has 3"),
    "empty line": (HEADER + b"1\ta\tb\n\n2\tc\td\n", "en", 3, "an empty line, but the header"),
    "blank lines": (
        HEADER + b"1\ta\tb\n \r\n\n2\tc\td\n",
        "en",
        3,
        "an empty line, but the header has 3 fields (blank lines may end the file, not come "
        "between rows)",
    ),
    "no rows": (HEADER, "en", None, "no sentence pairs after the header"),
    "all empty": (HEADER + b"1\t\tb\n2\t \t \n", "en", None, "all 2 pairs are empty"),
    "bad UTF-8": (HEADER + b"1\ta\tb\n2\tcaf\xe9\tb\n", "en", 3, "invalid UTF-8 at byte 6 (0xe9)"),
}


@pytest.mark.parametrize("case", TSV_ERRORS)
def test_read_tsv_errors(tmp_path, case):
    data, source_column, line, message = TSV_ERRORS[case]
    path = write(tmp_path / "bad.tsv", data)
    with pytest.raises(CorpusError, match=at(path, line) + " " + re.escape(message)):
        read_tsv(path, source_column, "es")


def test_read_tsv_missing_file_and_compressed_errors(tmp_path):
    missing = tmp_path / "nowhere.tsv.xz"
    with pytest.raises(CorpusError, match=at(missing) + " no such file"):
        read_tsv(missing, "en", "es")
    bad = write(tmp_path / "bad.tsv.gz", b"en\tes\na\tb\nc\t\xff\n")
    with pytest.raises(CorpusError, match=at(bad, 3) + r" invalid UTF-8 at byte 3 \(0xff\)"):
        read_tsv(bad, "en", "es")
    corrupt = tmp_path / "corrupt.tsv.xz"
    corrupt.write_bytes(lzma.compress(TSV)[:-20])
    with pytest.raises(CorpusError, match=at(corrupt) + " cannot read"):
        read_tsv(corrupt, "en", "es")
    with pytest.raises(CorpusError, match=at(tmp_path) + " is a directory"):
        read_tsv(tmp_path, "en", "es")


# Text-pair errors.


def test_read_text_pair_errors(tmp_path):
    source = write(tmp_path / "x.en", b"a\nb\nc\n")
    missing = tmp_path / "x.fr"
    with pytest.raises(CorpusError, match=at(missing) + " no such file"):
        read_text_pair(source, missing)
    empty = write(tmp_path / "empty.es", b"")
    with pytest.raises(CorpusError, match=at(empty) + " empty file"):
        read_text_pair(source, empty)
    short = write(tmp_path / "short.es", b"una\ndos\n")
    expected = f"{source} has 3 lines but {short} has 2; parallel files must align line by line"
    with pytest.raises(CorpusError, match=re.escape(expected)):
        read_text_pair(source, short)
    bad = write(tmp_path / "bad.es.xz", b"una\nd\xc3os\ntres\n")
    with pytest.raises(CorpusError, match=at(bad, 2) + r" invalid UTF-8 at byte 2 \(0xc3\)"):
        read_text_pair(source, bad)
    blank = write(tmp_path / "blank.es", b"\n \n\t\n")
    with pytest.raises(CorpusError, match=re.escape(f"{source} -> {blank}: all 3 pairs are empty")):
        read_text_pair(source, blank)


def test_readers_write_nothing(tmp_path):
    write(tmp_path / "x.en", b"a\nb\n")
    write(tmp_path / "x.es", b"a\n")
    write(tmp_path / "bad.tsv", b"en\tes\na\n")
    before = sorted(tmp_path.iterdir())
    for read in (
        lambda: read_text_pair(tmp_path / "x.en", tmp_path / "x.es"),
        lambda: read_tsv(tmp_path / "bad.tsv", "en", "es"),
    ):
        with pytest.raises(CorpusError):
            read()
    assert sorted(tmp_path.iterdir()) == before


# TFDS, offline: mock_data fakes examples from the dataset's features (no metadata download).


@pytest.fixture
def tfds():
    return pytest.importorskip("tensorflow_datasets")


TED = "ted_hrlr_translate/pt_to_en"


def test_read_tfds_mocked(tfds, tmp_path):
    with tfds.testing.mock_data(num_examples=12, policy=tfds.testing.MockPolicy.USE_CODE):
        corpus = read_tfds(TED, "train", "pt", "en", data_dir=str(tmp_path))
        raw = tfds.load(TED, split="train", data_dir=str(tmp_path), download=False)
        expected = [
            (ex["pt"].decode().strip(), ex["en"].decode().strip()) for ex in raw.as_numpy_iterator()
        ]
    kept = [pair for pair in expected if all(pair)]
    assert len(expected) == 12 and len(kept) > 0
    assert list(zip(corpus.sources, corpus.targets, strict=True)) == kept
    assert corpus.skipped_empty == 12 - len(kept)
    assert all(isinstance(s, str) and s for s in corpus.sources + corpus.targets)
    assert corpus.origin == f"tfds:{TED}:train (pt -> en)"


def test_read_tfds_missing_language(tfds, tmp_path):
    with tfds.testing.mock_data(num_examples=2, policy=tfds.testing.MockPolicy.USE_CODE):
        with pytest.raises(
            CorpusError,
            match=re.escape(
                f"tfds:{TED}:train: examples have no key 'de'; the dataset has: en, pt"
            ),
        ):
            read_tfds(TED, "train", "pt", "de", data_dir=str(tmp_path))


def test_read_tfds_not_prepared_unknown_or_not_installed(tfds, tmp_path, monkeypatch):
    with pytest.raises(
        CorpusError,
        match=rf"not prepared in {re.escape(str(tmp_path))}.*tfds build {TED} --data_dir",
    ):
        read_tfds(TED, "train", "pt", "en", data_dir=str(tmp_path))
    with pytest.raises(CorpusError, match="TFDS has no dataset named 'no_such_corpus'"):
        read_tfds("no_such_corpus", "train", "pt", "en", data_dir=str(tmp_path))
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
    with pytest.raises(CorpusError, match="pip install tensorflow-datasets"):
        read_tfds(TED, "train", "pt", "en")

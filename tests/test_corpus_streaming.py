"""Streamed corpora (`tsv_files`, `text_files`, `TfdsSplit`): the same pairs, counts and
errors as the in-memory readers, read through tf.data; sampling, limits and sharding."""

import pytest

from keras_transformer import corpus
from keras_transformer.corpus import CorpusError, read_text_pair, read_tfds, read_tsv
from tests.test_corpus import DEV, TED, at, write

# Odd whitespace (no-break and ideographic spaces, CRLF, a BOM), empty pairs, and a line whose
# only content is whitespace that Python's str.strip removes but ASCII stripping would not.
ODD_TSV = (
    "\ufeffen\tes\r\n"
    "  a house \t\u00a0una casa \r\n"
    "\t\n"
    "the dog\tel perro\n"
    "\u3000\tnada\n"
    "\u2003three\u2003\ttres\u0085\n"
    "four\tcuatro"
).encode()
EXPECTED = [("a house", "una casa"), ("the dog", "el perro"), ("three", "tres"), ("four", "cuatro")]


def pairs_of(pairs: corpus.ParallelCorpus):
    return list(zip(pairs.sources, pairs.targets, strict=True))


def streamed(dataset):
    return [(s.decode(), t.decode()) for s, t in dataset.as_numpy_iterator()]


@pytest.mark.parametrize("suffix", ["", ".gz", ".xz", ".bz2"])
def test_tsv_files_give_what_read_tsv_gives(tmp_path, suffix):
    path = write(tmp_path / f"odd.tsv{suffix}", ODD_TSV)
    in_memory = read_tsv(path, "en", "es")
    assert list(zip(in_memory.sources, in_memory.targets, strict=True)) == EXPECTED
    files = corpus.tsv_files(path, "en", "es")
    scan = files.scan(sample_size=100)
    assert (scan.pairs, scan.skipped_empty) == (4, 2) == (len(in_memory), in_memory.skipped_empty)
    assert pairs_of(scan.sample) == pairs_of(in_memory)  # a small corpus: all, in order
    assert files.origin == in_memory.origin
    assert streamed(files.to_dataset()) == EXPECTED


@pytest.mark.parametrize("suffix", ["", ".gz", ".xz"])
def test_text_files_give_what_read_text_pair_gives(tmp_path, suffix):
    source = write(tmp_path / f"x.en{suffix}", "\ufeff a\n\nc \r\n\u3000\nd".encode())
    target = write(tmp_path / f"x.es{suffix}", "\ufeffuna\ndos\nTRES\ncuatro\ncinco\n".encode())
    in_memory = read_text_pair(source, target)
    files = corpus.text_files(source, target)
    scan = files.scan(sample_size=10)
    assert pairs_of(scan.sample) == pairs_of(in_memory)
    assert scan.skipped_empty == in_memory.skipped_empty == 2
    assert streamed(files.to_dataset()) == [("a", "una"), ("c", "TRES"), ("d", "cinco")]


def test_the_bundled_dev_split_streams_as_it_reads():
    in_memory = read_tsv(DEV, "en", "es")
    pairs = streamed(corpus.tsv_files(DEV, "en", "es").to_dataset())
    assert pairs == list(zip(in_memory.sources, in_memory.targets, strict=True))


def test_scan_reports_errors_with_file_and_line(tmp_path):
    bad = write(tmp_path / "bad.tsv", b"en\tes\na\tuna\nb\tdos\textra\n")
    with pytest.raises(CorpusError, match=at(bad, 3) + " 3 fields, but the header has 2"):
        corpus.tsv_files(bad, "en", "es").scan()
    utf8 = write(tmp_path / "bytes.tsv.gz", b"en\tes\na\tuna\nb\td\xffos\n")
    with pytest.raises(CorpusError, match=at(utf8, 3) + r" invalid UTF-8 at byte 4 \(0xff\)"):
        corpus.tsv_files(utf8, "en", "es").scan()
    with pytest.raises(CorpusError, match="no column 'de'"):
        corpus.tsv_files(DEV, "en", "de").scan()
    header_only = write(tmp_path / "header.tsv", b"en\tes\n")
    with pytest.raises(CorpusError, match=at(header_only) + " no sentence pairs after the header"):
        corpus.tsv_files(header_only, "en", "es").scan()
    empty = write(tmp_path / "empty.tsv", b"en\tes\n\t\n \t \n")
    with pytest.raises(CorpusError, match="all 2 pairs are empty"):
        corpus.tsv_files(empty, "en", "es").scan()
    with pytest.raises(CorpusError, match="no such file"):
        corpus.tsv_files(tmp_path / "missing.tsv", "en", "es")
    with pytest.raises(CorpusError, match="no file matches this pattern"):
        corpus.tsv_files(tmp_path / "nothing-*.tsv", "en", "es")


@pytest.mark.parametrize("longer", ["source", "target"])
def test_text_files_must_align(tmp_path, longer):
    three, two = b"a\nb\nc\n", b"x\ny\n"
    source = write(tmp_path / "t.en", three if longer == "source" else two)
    target = write(tmp_path / "t.es", two if longer == "source" else three)
    lines = (3, 2) if longer == "source" else (2, 3)
    message = f"{source} has {lines[0]} lines but {target} has {lines[1]}"
    with pytest.raises(CorpusError, match=message):
        corpus.text_files(source, target).scan()
    empty = write(tmp_path / "e.es", b"")
    with pytest.raises(CorpusError, match=at(empty) + " empty file"):
        corpus.text_files(source, empty).scan()


def _numbered(tmp_path, name, first, count):
    rows = "".join(f"s{i}\tt{i}\n" for i in range(first, first + count))
    return write(tmp_path / name, f"en\tes\n{rows}".encode())


def test_reservoir_sample_is_bounded_uniform_and_seeded(tmp_path):
    path = _numbered(tmp_path, "n.tsv", 0, 5000)
    files = corpus.tsv_files(path, "en", "es")
    first, again, other = (files.scan(sample_size=500, seed=s) for s in (1, 1, 2))
    assert first.pairs == 5000 and len(first.sample) == 500
    assert first.sample == again.sample and first.sample.sources != other.sample.sources
    indices = [int(source[1:]) for source in first.sample.sources]
    assert len(set(indices)) == 500
    assert all(f"t{i}" == t for i, t in zip(indices, first.sample.targets, strict=True))
    # Uniform over the corpus: the mean index is near 2500 (sd of the mean about 65).
    assert abs(sum(indices) / 500 - 2500) < 300
    assert sum(i >= 4000 for i in indices) > 50  # late lines are sampled too
    assert "sample of 500" in first.sample.origin


def test_limit_counts_the_first_pairs(tmp_path):
    path = _numbered(tmp_path, "n.tsv", 0, 100)
    files = corpus.tsv_files(path, "en", "es")
    scan = files.scan(sample_size=1000, limit=30)
    assert scan.pairs == 30 and scan.sample.sources == tuple(f"s{i}" for i in range(30))
    assert streamed(files.to_dataset(limit=30)) == [(f"s{i}", f"t{i}") for i in range(30)]


def test_a_bad_line_past_the_limit_fails_the_scan_as_without_a_limit(tmp_path):
    """tf.data reads the files in blocks, past the limit: what it reads, the scan checks
    (a short last line would fail in to_dataset with an opaque InvalidArgumentError)."""
    path = _numbered(tmp_path, "n.tsv", 0, 100)
    path.write_bytes(path.read_bytes() + b"s100\n")
    files = corpus.tsv_files(path, "en", "es")
    for limit in (None, 30):
        with pytest.raises(corpus.CorpusError, match=r"n\.tsv:102: 1 field, but the header"):
            files.scan(sample_size=10, limit=limit)


@pytest.mark.parametrize("suffix", ["", ".gz", ".xz"])
def test_blank_lines_may_end_a_tsv_file(tmp_path, suffix):
    """As an editor or `echo >>` leaves them (empty, CRLF, spaces): not rows, so not errors,
    in the scan, in memory and through tf.data; between rows they still are (test_corpus)."""
    rows = "".join(f"s{i}\tt{i}\n" for i in range(5)).encode()
    path = write(tmp_path / f"n.tsv{suffix}", b"en\tes\n" + rows + b"\n\r\n  \n\n")
    expected = [(f"s{i}", f"t{i}") for i in range(5)]
    files = corpus.tsv_files(path, "en", "es")
    scan = files.scan(sample_size=10)
    assert (scan.pairs, scan.skipped_empty) == (5, 0)
    assert pairs_of(read_tsv(path, "en", "es")) == expected
    assert streamed(files.to_dataset()) == expected


def test_a_glob_reads_files_in_order_and_workers_share_them_by_file(tmp_path):
    for part in range(4):
        _numbered(tmp_path, f"part-{part}.tsv.gz", 10 * part, 10)
    files = corpus.tsv_files(tmp_path / "part-*.tsv.gz", "en", "es")
    assert len(files.units) == 4 and files.scan().pairs == 40
    everything = [(f"s{i}", f"t{i}") for i in range(40)]
    assert streamed(files.to_dataset()) == everything
    shares = [streamed(files.to_dataset(shard=(2, worker))) for worker in (0, 1)]
    assert shares[0] == everything[0:10] + everything[20:30]  # files 0 and 2
    assert shares[1] == everything[10:20] + everything[30:40]
    # More workers than files: every fifth pair.
    thirds = [streamed(files.to_dataset(shard=(5, worker))) for worker in range(5)]
    assert sorted(sum(thirds, [])) == sorted(everything)
    assert thirds[1] == everything[1::5]


def test_one_file_is_shared_by_pair(tmp_path):
    files = corpus.tsv_files(_numbered(tmp_path, "one.tsv", 0, 9), "en", "es")
    assert streamed(files.to_dataset(shard=(2, 1))) == [(f"s{i}", f"t{i}") for i in (1, 3, 5, 7)]


def test_tfds_split_streams_what_read_tfds_reads(tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=12, policy=tfds.testing.MockPolicy.USE_CODE):
        in_memory = read_tfds(TED, "train", "pt", "en", data_dir=str(tmp_path))
        split = corpus.TfdsSplit(TED, "train", "pt", "en", data_dir=str(tmp_path))
        scan = split.scan(sample_size=100)
        pairs = streamed(split.to_dataset())
    assert pairs_of(scan.sample) == pairs_of(in_memory)
    assert scan.skipped_empty == in_memory.skipped_empty
    assert pairs == list(zip(in_memory.sources, in_memory.targets, strict=True))


def test_text_file_patterns_pair_up_in_order(tmp_path):
    for part in range(2):
        write(tmp_path / f"part{part}.en", f"a{part}\nb{part}\n".encode())
        write(tmp_path / f"part{part}.es", f"x{part}\ny{part}\n".encode())
    files = corpus.text_files(tmp_path / "part*.en", tmp_path / "part*.es")
    assert streamed(files.to_dataset()) == [("a0", "x0"), ("b0", "y0"), ("a1", "x1"), ("b1", "y1")]
    assert streamed(files.to_dataset(shard=(2, 1))) == [("a1", "x1"), ("b1", "y1")]
    write(tmp_path / "part2.en", b"c\n")
    with pytest.raises(CorpusError, match="matches 3 files but .* matches 2"):
        corpus.text_files(tmp_path / "part*.en", tmp_path / "part*.es")

"""Serving under concurrent load (benchmarks/load.py): one loaded SavedModel (in
tests/test_export.py, on its export), and one CTranslate2 translator, shared by threads,
answer every request of a mixed pool (lengths, batch sizes, empty, blank, over-long and
invalid UTF-8 inputs, every text signature) as they answer it alone, without errors or
hangs. No timing is asserted: figures go in BENCHMARKS.md."""

import json
import threading

import keras
import numpy as np
import pytest

import keras_transformer as kt
from benchmarks import load
from keras_transformer import export
from tests import bible
from tests.test_benchmarks import PEER_FIELDS

MAX_LENGTH = 16  # an untrained model decodes to its length limit: keep it short
THREADS = 4
REQUESTS = 25  # each thread sends all of them, in its own order
MAX_BATCH = 4  # serving_xla compiles one program per batch bucket: 1, 2 and 4 here
TIMEOUT = 120  # seconds: a deadlock fails the test instead of hanging it


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(5)
    config = kt.TransformerConfig.preset(
        "tiny",
        vocab_size=bible.vocabularies().target.vocabulary_size(),
        max_length=MAX_LENGTH,
        d_model=32,
        num_heads=2,
        d_ff=64,
        num_encoder_layers=1,
        num_decoder_layers=1,
    )
    return kt.build_transformer(config)


@pytest.fixture(scope="module")
def verses():
    return list(bible.pairs("test", 200).sources)


def _mix(engines, verses, max_length=MAX_LENGTH, requests=REQUESTS):
    return load.request_mix(
        verses, list(engines), requests=requests, max_length=max_length, max_batch=MAX_BATCH
    )


def saved_model_mix(engines, max_length):
    """The pool for tests/test_export.py's SavedModel (its module fixture, exported once; its
    model is larger than this module's, so fewer requests: each kind still reaches each
    signature)."""
    return _mix(engines, list(bible.pairs("test", 200).sources), max_length, requests=15)


def serve_concurrently(engines, requests):
    """Answers the pool serially, then from THREADS threads at once: all equal, none lost."""
    expected = load.serial_answers(engines, requests)
    assert [e for e in expected if not isinstance(e, load.Answer)] == []
    for request, answer in zip(requests, expected, strict=True):
        for kind, texts, scores in zip(request.kinds, answer.texts, answer.scores, strict=True):
            if kind == "empty":  # nothing to translate: nothing comes back
                assert set(texts) == {""} and not scores.any()
    result = load.run_load(engines, requests, expected, threads=THREADS, timeout=TIMEOUT)
    assert result.hung == 0, f"{result.hung} thread(s) still running after {TIMEOUT} s"
    assert result.errors == []
    assert result.mismatches == []
    assert result.requests == THREADS * len(requests)
    assert result.rss_mb and result.rss_mb[-1][0] == result.requests


def test_the_mix_holds_every_kind_for_every_engine(verses):
    engines = ["a", "b", "c"]
    requests = _mix(engines, verses)
    assert {(r.engine, kind) for r in requests for kind in r.kinds} == {
        (e, k) for e in engines for k in load.KINDS
    }
    assert {len(r.inputs) for r in requests} == set(range(1, MAX_BATCH + 1))
    assert _mix(engines, verses) == requests  # seeded
    source = bible.vocabularies().source
    for request in requests:
        for kind, raw in zip(request.kinds, request.inputs, strict=True):
            if kind == "over-long":
                assert len(source.tokenize(raw.decode())) > MAX_LENGTH
            elif kind == "invalid UTF-8":
                with pytest.raises(UnicodeDecodeError):
                    raw.decode("utf-8")
            elif kind in ("empty", "blank"):
                assert raw.decode().strip() == ""
            else:
                assert raw.decode().strip()


def test_the_load_reports_mismatches_errors_and_hangs(verses):
    """The checker itself: a wrong answer, a raised error and a blocked call are each seen."""
    released, calls, lock = threading.Event(), [], threading.Lock()

    def echo(inputs):
        return load.Answer(
            tuple((raw.decode("utf-8", "replace"),) for raw in inputs),
            tuple(np.float32([1 + len(raw)]) for raw in inputs),
        )

    def flaky(inputs):  # calls in turn: right, a wrong text, an error, a score one ulp off
        with lock:
            calls.append(None)
            turn = len(calls) % 4
        answer = echo(inputs)
        if turn == 1:
            return answer._replace(texts=(("wrong",),) + answer.texts[1:])
        if turn == 2:
            raise RuntimeError("engine failed")
        if turn == 3:
            first = np.nextafter(answer.scores[0], np.float32(np.inf))
            return answer._replace(scores=(first,) + answer.scores[1:])
        return answer

    def blocked(inputs):
        released.wait()
        return echo(inputs)

    requests = _mix(["flaky"], verses)
    expected = load.serial_answers({"flaky": echo}, requests)
    result = load.run_load({"flaky": flaky}, requests, expected, threads=THREADS)
    assert result.mismatches and result.errors and not result.hung
    assert all("serial" in problem for problem in result.mismatches)
    assert all("engine failed" in error for error in result.errors)
    assert result.not_bit_identical > 0  # within 1e-5: counted, not a mismatch
    assert result.requests == THREADS * REQUESTS

    try:
        result = load.run_load({"flaky": blocked}, requests, expected, threads=2, timeout=0.5)
        assert result.hung == 2 and result.requests == 0
    finally:
        released.set()


@pytest.fixture(scope="module")
def ctranslate2_directory(model, tmp_path_factory):
    pytest.importorskip("ctranslate2")
    directory = tmp_path_factory.mktemp("ctranslate2") / "tiny"
    return export.export(model, directory, format="ctranslate2", vocabularies=bible.vocabularies())


def test_a_ctranslate2_translator_answers_threads_as_it_answers_alone(
    ctranslate2_directory, verses
):
    from keras_transformer.serving import CTranslate2Translator

    translator = CTranslate2Translator(ctranslate2_directory, threads=1)
    serve_concurrently(load.ctranslate2_engines(translator), _mix(load.CTRANSLATE2_ENGINES, verses))


def test_the_command_prints_the_benchmarks_schema_last(ctranslate2_directory, capsys):
    flags = [
        "--threads",
        "1",
        "2",
        "--requests",
        "12",
        "--max-batch",
        "3",
        "--rss-every",
        "5",
        "--ct2-threads",
        "1",
    ]
    assert load.main(["--ctranslate2", str(ctranslate2_directory), *flags]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    result = json.loads(out[-1])
    assert PEER_FIELDS <= set(result) and result["mode"] == "load" and result["ok"]
    assert [(row["engine"], row["threads"]) for row in result["rows"]] == [
        ("CTranslate2", 1),
        ("CTranslate2", 2),
    ]
    assert [row["requests"] for row in result["rows"]] == [12, 24]
    assert out[0].startswith("| engine | threads |")  # the Markdown table first

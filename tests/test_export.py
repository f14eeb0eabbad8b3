"""The TF Serving export: layout and manifest, atomic versions, the same translations as the
library, and a fresh process with only tensorflow and tensorflow_text serving bad input."""

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

import keras_transformer as kt
from keras_transformer import decoding, evaluation, export
from keras_transformer.export.savedmodel import decode_sorted_in_chunks, pad_to_bucket
from tests import bible, programs, ties
from tests.cli import run_main

MAX_LENGTH = 24
SENTENCES = ["In the beginning God created the heavens.", "Amen.", "And God said, Let there be"]


# The exact tests here hold the SavedModel's graphs (traced with kt.fast on) to the library's
# search (eager or traced, kt.fast off) on tiny_export's untrained model, whose seeded weights
# are the same on every CPU, though not the graphs' last bits: ids and texts (tokenized back)
# alike but where the two part at a choice within SCORE_TOLERANCE (`ties.rows_parted_at_ties`,
# the search's settings replayed), with a floor of rows alike in each test (all when written);
# scores of the rows alike to 1e-5 relative (1e-4 for XLA).
SETTINGS = decoding.DecodingSettings()  # the export's and the library's searches' defaults


def tokenized_back(texts) -> list[np.ndarray]:
    """Translations (str or bytes) as the ids the search gave (`ties.tokenized_back`)."""
    target = bible.vocabularies().target
    return [ties.tokenized_back(target, t.decode() if isinstance(t, bytes) else t) for t in texts]


def source_rows(texts) -> np.ndarray:
    """The source ids of `texts` as the SavedModel cuts them: `[batch, len]`."""
    if not len(texts):
        return np.zeros((0, 1), "int32")
    batches = kt.data.source_batches(texts, bible.vocabularies().source, max_length=MAX_LENGTH)
    return np.asarray(batches.get_single_element())


@pytest.fixture(scope="module")
def model(tiny_export):
    """The untrained tiny model of conftest's `tiny_export` (max_length MAX_LENGTH)."""
    return tiny_export[0]


@pytest.fixture(scope="module")
def traced_export(tiny_export):
    """The model exported with the defaults, as `trainers.export` traces it (speed switch
    on: the tests below hold its translations to the library's, traced with the switch off):
    (directory, version, the searches its tracing called, as (name, stopping) pairs)."""
    return tiny_export[1:]


@pytest.fixture(scope="module")
def exported(traced_export):
    return traced_export[:2]


@pytest.fixture(scope="module")
def loaded(exported):
    """The fixture's SavedModel, loaded once for the tests that call it (about 5 s a load)."""
    return tf.saved_model.load(str(exported[1]))


def test_layout_and_manifest(exported, model, loaded):
    directory, version = exported
    assert version == directory / "1"
    for name in ("saved_model.pb", "variables/variables.index", "assets.extra/shared.model"):
        assert (version / name).exists(), name
    manifest = json.loads((version / "assets.extra" / "manifest.json").read_text())
    assert manifest["note"] == "test" and manifest["package_version"] == kt.__version__
    assert manifest["model_config"] == model.config.to_dict()
    assert manifest["quantize"] == "float32" and "quantize_fallback" not in manifest
    assert manifest["decoding"] == {
        "beam_size": 4,
        "length_penalty": 0.6,
        "finish_rule": "tensor2tensor",
        "max_extra_length": 50,
        "max_input_tokens": MAX_LENGTH - 1,
        "stopping": "early",
        "target_prefix": None,
        "ranking": "gnmt",
        "n_best": 1,
        "source_prefix": None,
    }
    assert set(manifest["signatures"]) == {
        "serving_default",
        "serving_xla",
        "n_best",
        "translate_ids",
    }
    assert set(loaded.signatures) == set(manifest["signatures"])
    assert manifest["vocabulary"]["special_ids"] == {"pad": 0, "unk": 1, "bos": 2, "eos": 3}


def test_versions_are_never_overwritten_and_a_failed_export_leaves_them(
    exported, model, monkeypatch, tmp_path
):
    directory = tmp_path / "tiny"  # a copy: the session's export stays as it was made
    shutil.copytree(exported[0], directory)
    first = directory / "1"

    def rewrite(path, *args):
        """Writes the fixture's SavedModel again (tracing is the fixture's, tested above)."""
        shutil.copytree(first, path, ignore=shutil.ignore_patterns("assets.extra"))

    monkeypatch.setattr(export.savedmodel, "write_saved_model", rewrite)
    second = export.export(model, directory, vocabularies=bible.vocabularies())
    assert second.name == "2" and (second / "assets.extra" / export.MANIFEST).exists()
    with pytest.raises(FileExistsError, match=r"1 exists \(an earlier export\): overwrite=True"):
        export.export(model, directory, vocabularies=bible.vocabularies(), version=1)
    with pytest.raises(FileExistsError, match="versions are never overwritten"):  # the writer
        export.savedmodel.write(model, directory, vocabularies=bible.vocabularies(), version=1)

    def half_written(path, *args):
        """Writes part of a SavedModel, then fails, as a full disk would."""
        Path(path).mkdir()
        (Path(path) / "saved_model.pb").write_bytes(b"partial")
        raise OSError("No space left on device")

    monkeypatch.setattr(export.savedmodel, "write_saved_model", half_written)
    with pytest.raises(OSError, match="No space left"):
        export.export(model, directory, vocabularies=bible.vocabularies())
    assert sorted(p.name for p in directory.iterdir()) == ["1", "2"]  # no temporary left
    assert tf.saved_model.load(str(directory / "2")).signatures["serving_default"] is not None


@pytest.mark.exact
def test_endpoints_of_ones_own_are_written_beside_the_translation_ones(model, tmp_path):
    """`write_saved_model` takes any endpoints: here one of the user's (the source pieces and
    the encoder's output for text) beside `translation_endpoints`' greedy translate_ids."""
    vocabularies = bible.vocabularies()

    def encode(text):
        source_ids = vocabularies.source(text).to_tensor()
        memory, _ = model.encode(source_ids)
        return {"source_ids": source_ids, "memory": memory}

    greedy = export.translation_endpoints(model, vocabularies, beam_size=1)
    endpoints = {
        "encode": (encode, [tf.TensorSpec([None], tf.string, "text")]),
        "translate_ids": greedy["translate_ids"],
    }
    tokenizers = [vocabularies.source, vocabularies.target]
    export.write_saved_model(tmp_path / "custom", endpoints, model, tokenizers)
    loaded = tf.saved_model.load(str(tmp_path / "custom"))
    assert sorted(loaded.signatures) == ["encode", "translate_ids"]
    assert len(loaded.variables) == len(model.variables)
    encoded = loaded.signatures["encode"](text=tf.constant(SENTENCES[:2]))
    for row, sentence in zip(encoded["source_ids"].numpy().tolist(), SENTENCES[:2], strict=True):
        pieces = np.asarray(vocabularies.source.tokenize(sentence)).tolist()
        assert row == pieces + [0] * (len(row) - len(pieces))
    memory, _ = model.encode(encoded["source_ids"])
    np.testing.assert_allclose(encoded["memory"], memory, atol=1e-5)
    sources = tf.constant(source_rows(SENTENCES))
    ids = loaded.translate_ids(sources)["ids"]  # an attribute too
    expected, _ = decoding.translate_ids(model, sources, beam_size=1)
    assert len(ties.rows_parted_at_ties(model, sources, ids, expected)) <= 1  # greedy's rule


def test_every_signature_refuses_a_batch_of_another_shape(model, tmp_path):
    """Neither TF Serving nor a loaded SavedModel holds a request to its signature's shape: a
    `[2, 2]` (or scalar) `text`, `target_prefix` or `source_prefix`, or `[batch, 1, len]`
    ids, fails the request with INVALID_ARGUMENT naming the input and its shape, where
    `serving_default` answered a `[2, 2]` batch with four translations (issue 66)."""
    vocabularies = bible.vocabularies()
    endpoints = export.translation_endpoints(
        model, vocabularies, beam_size=1, prefix_signature=True
    )
    tokenizers = [vocabularies.source, vocabularies.target]
    export.write_saved_model(tmp_path / "every", endpoints, model, tokenizers)
    signatures = tf.saved_model.load(str(tmp_path / "every")).signatures
    square, scalar = tf.constant([["Amen.", "x"], ["y", "z"]]), tf.constant("Amen.")
    four = tf.constant(["Amen.", "x", "y", "z"])  # as many entries as `square`
    text_inputs = {
        "serving_default": ["text"],
        "serving_xla": ["text"],
        "n_best": ["text"],
        "serving_prefix": ["text", "target_prefix"],
        "serving_languages": ["text", "source_prefix", "target_prefix"],
    }
    for name, inputs in text_inputs.items():
        assert signatures[name](**dict.fromkeys(inputs, four))  # [batch]: translated
        for wrong in inputs:
            for bad, shape in ((square, r"\[2 2\]"), (scalar, r"\[\]")):
                request = {**dict.fromkeys(inputs, four), wrong: bad}
                refused = rf"{wrong} must be \[batch\]; got the shape\] {shape}"
                with pytest.raises(tf.errors.InvalidArgumentError, match=refused):
                    signatures[name](**request)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"must be \[batch, src_len\]"):
        signatures["translate_ids"](source_ids=tf.constant([[[5, 3]], [[6, 3]]], tf.int32))


@pytest.mark.exact
def test_serving_gives_the_library_translations(loaded, model):
    served = loaded.signatures["serving_default"](text=tf.constant(SENTENCES))
    vocabularies = bible.vocabularies()
    translations = evaluation.Translator(model, vocabularies, beam_size=4).translate(SENTENCES)
    source_ids = next(
        iter(kt.data.source_batches(SENTENCES, vocabularies.source, max_length=MAX_LENGTH))
    )
    ids, scores = decoding.beam_search(model, source_ids)
    by_ids = loaded.signatures["translate_ids"](source_ids=source_ids)
    parted = ties.rows_parted_at_ties(model, source_ids, by_ids["ids"], ids, SETTINGS)
    texts = served["translation"].numpy()
    parted += ties.rows_parted_at_ties(
        model, source_ids, tokenized_back(texts), tokenized_back(translations), SETTINGS
    )
    assert len(set(parted)) <= 1, parted
    alike = [row for row in range(len(SENTENCES)) if row not in parted]
    np.testing.assert_allclose(np.asarray(by_ids["score"])[alike], scores.numpy()[alike], rtol=1e-5)
    np.testing.assert_allclose(np.asarray(served["score"])[alike], scores.numpy()[alike], rtol=1e-5)


@pytest.mark.exact
def test_early_stopping_is_baked_into_every_signature(traced_export, loaded, model):
    """The export's default `stopping="early"` (the library's searches default to "exact")
    reaches every beam search the export traces, and the signatures decode as the library's
    early beam search. (On this random model, which does not end its hypotheses before the
    length limit, early and exact agree: tests/test_decoding.py shows where they differ.)"""
    _, version, calls = traced_export
    traced = [name for name, _ in calls]
    # One search for three signatures (serving_default, serving_xla's compiled call of it,
    # translate_ids), traced once, and n_best's own beam search, each a `DecodingPlan`'s.
    assert sorted(traced) == ["decode", "decode n_best=4"]
    assert {stopping for _, stopping in calls} == {"early"}
    manifest = json.loads((version / "assets.extra" / "manifest.json").read_text())
    assert manifest["decoding"]["stopping"] == "early"
    source_ids = next(
        iter(kt.data.source_batches(SENTENCES, bible.vocabularies().source, max_length=MAX_LENGTH))
    )
    served = loaded.signatures["translate_ids"](source_ids=source_ids)
    ids, scores = decoding.beam_search(model, source_ids, stopping="early")
    early = SETTINGS.replace(stopping="early")
    parted = ties.rows_parted_at_ties(model, source_ids, served["ids"], ids, early)
    assert len(parted) <= 1, parted
    alike = [row for row in range(len(SENTENCES)) if row not in parted]
    np.testing.assert_allclose(np.asarray(served["score"])[alike], scores.numpy()[alike], rtol=1e-5)


@pytest.mark.exact
def test_xla_signature_translates_as_the_stock_one(loaded, model):
    """`serving_xla` pads requests to shape buckets and compiles the search: same outputs,
    whatever the batch (an empty one included) and length (over-long inputs included), but
    where the two part at a tie (at most two of the 29 rows; none when written)."""
    requests = [
        SENTENCES,
        SENTENCES[:1],
        ["Amen.", "", "God " * 40, "Let there be light.", " ", "And the evening."],
        [],
        # More sentences than a chunk (8 for beam 4), mixed lengths: decoded sorted, in chunks.
        [" ".join(SENTENCES[i % 3].split()[: 1 + i % 7]) for i in range(19)],
    ]
    parted = 0
    for request in requests:
        text = tf.constant(request, tf.string, shape=[len(request)])
        stock = loaded.signatures["serving_default"](text=text)
        xla = loaded.signatures["serving_xla"](text=text)
        assert xla["translation"].shape == stock["translation"].shape == (len(request),)
        rows = ties.rows_parted_at_ties(
            model,
            source_rows(request),
            tokenized_back(xla["translation"].numpy()),
            tokenized_back(stock["translation"].numpy()),
            SETTINGS,
        )
        alike = [row for row in range(len(request)) if row not in rows]
        np.testing.assert_allclose(
            np.asarray(xla["score"])[alike], np.asarray(stock["score"])[alike], atol=1e-4
        )
        parted += len(rows)
    assert parted <= 2, parted


def test_threads_sharing_the_loaded_saved_model_get_its_serial_answers(loaded):
    """4 threads x 15 mixed requests (lengths, batches of 1-4, empty, blank, over-long,
    invalid UTF-8) over every text signature (8 x 200 in benchmarks/load.py)."""
    from benchmarks import load
    from tests.test_serving_load import saved_model_mix, serve_concurrently

    engines = load.saved_model_engines(loaded)
    assert set(engines) == {"serving_default", "serving_xla", "n_best"}
    serve_concurrently(engines, saved_model_mix(engines, MAX_LENGTH))


def test_requests_are_padded_to_buckets_with_the_last_sentence():
    """`serving_xla`'s shape buckets: padding rows repeat the last sentence (so they finish
    with it), padding columns are zeros up to a multiple of 16 (at most max_length), beyond
    the largest bucket the batch goes to its multiple, and an empty batch gets zero rows."""
    ids = tf.constant([[5, 6, 3], [7, 3, 0], [8, 9, 3]])
    padded = pad_to_bucket(ids, [1, 2, 4, 8], max_length=24)
    np.testing.assert_array_equal(padded[:, :3], tf.gather(ids, [0, 1, 2, 2]))
    np.testing.assert_array_equal(padded[:, 3:], tf.zeros([4, 13], tf.int32))
    assert (
        pad_to_bucket(ids[:1], [2, 4], max_length=24).numpy().tolist() == [[5, 6, 3] + [0] * 13] * 2
    )  # greedy's buckets start at 2 rows
    assert pad_to_bucket(ids, [1, 2], max_length=10).shape == (4, 10)
    empty = pad_to_bucket(tf.zeros([0, 1], tf.int32), [1, 2], max_length=24)
    np.testing.assert_array_equal(empty, tf.zeros([1, 16], tf.int32))


def test_chunks_decode_sorted_by_length_and_answer_in_the_request_order():
    """`serving_xla` decodes a request sorted by length, a chunk of sentences a call, each
    chunk cut to its own width; answers come back in the request's order, padded."""
    calls = []

    def search(part):  # answers each row's ids times 10, then EOS; its length as the score
        calls.append(part.numpy().tolist())
        ids = tf.concat([part * 10, tf.fill([tf.shape(part)[0], 1], 3)], axis=1)
        return ids, tf.cast(tf.math.count_nonzero(part, axis=1), tf.float32)

    source = tf.constant([[5, 6, 7, 3], [4, 3, 0, 0], [8, 9, 3, 0], [7, 3, 0, 0], [3, 0, 0, 0]])
    ids, score = decode_sorted_in_chunks(search, source, chunk=2, out_len=7)
    assert calls == [[[3, 0], [4, 3]], [[7, 3, 0], [8, 9, 3]], [[5, 6, 7, 3]]]
    np.testing.assert_array_equal(score, [4, 2, 3, 2, 1])
    np.testing.assert_array_equal(
        ids,
        [
            [50, 60, 70, 30, 3, 0, 0],
            [40, 30, 3, 0, 0, 0, 0],
            [80, 90, 30, 3, 0, 0, 0],
            [70, 30, 0, 3, 0, 0, 0],  # its chunk's width was 3
            [30, 0, 3, 0, 0, 0, 0],
        ],
    )
    empty_ids, empty_score = decode_sorted_in_chunks(
        search, tf.zeros([0, 4], tf.int32), chunk=2, out_len=7
    )
    assert empty_ids.shape == (0, 7) and empty_score.shape == (0,)


@pytest.mark.exact
def test_n_best_signature_returns_the_beam_best_first(loaded, model):
    """`n_best`'s first is `serving_default`'s best, but where either search (the 4-best's
    or the best's) parts at a tie (at most one sentence; none when written)."""
    best = loaded.signatures["serving_default"](text=tf.constant(SENTENCES + [" "]))
    n_best = loaded.signatures["n_best"](text=tf.constant(SENTENCES + [" "]))
    translations, scores = n_best["translations"].numpy(), n_best["scores"].numpy()
    assert translations.shape == scores.shape == (len(SENTENCES) + 1, 4)
    assert np.all(np.diff(scores[:-1], axis=1) <= 0) and np.all(scores[:-1] > -1e8)
    parted = ties.rows_parted_at_ties(
        model,
        source_rows(SENTENCES + [" "]),
        tokenized_back(translations[:, 0]),
        tokenized_back(best["translation"].numpy()),
        (SETTINGS, SETTINGS.replace(n_best=4)),
    )
    assert len(parted) <= 1, parted
    alike = [row for row in range(len(SENTENCES) + 1) if row not in parted]
    np.testing.assert_allclose(scores[alike, 0], best["score"].numpy()[alike], rtol=1e-5)
    assert list(translations[-1]) == [b""] * 4 and list(scores[-1]) == [0.0] * 4  # nothing in
    assert len({tuple(row) for row in translations[:-1]}) == len(SENTENCES)
    empty = loaded.signatures["n_best"](text=tf.constant([], tf.string))
    assert empty["translations"].shape == (0, 4)


@pytest.mark.exact
def test_translate_ids_cuts_over_long_rows_and_keeps_their_eos(loaded, model):
    """A row longer than max_length is translated as its first max_length - 1 ids and EOS,
    the rule for text; shorter rows of the same batch are untouched."""
    signature = loaded.signatures["translate_ids"]
    short = [5, 6, 7, 3]
    long = list(range(10, 10 + 3 * MAX_LENGTH)) + [3]
    batch = np.zeros((2, len(long)), "int32")
    batch[0, : len(short)], batch[1] = short, long
    expected_rows = np.zeros((2, MAX_LENGTH), "int32")
    expected_rows[0, : len(short)] = short
    expected_rows[1] = long[: MAX_LENGTH - 1] + [3]
    ids, scores = decoding.beam_search(model, expected_rows)
    served = signature(source_ids=tf.constant(batch))
    parted = ties.rows_parted_at_ties(model, expected_rows, served["ids"], ids, SETTINGS)
    assert len(parted) <= 1, parted
    alike = [row for row in range(2) if row not in parted]
    np.testing.assert_allclose(np.asarray(served["score"])[alike], scores.numpy()[alike], rtol=1e-5)
    # Without the EOS the search would have been given another input.
    no_eos, _ = decoding.beam_search(model, batch[:, :MAX_LENGTH])
    assert not np.array_equal(no_eos[1], ids[1])
    empty = signature(source_ids=tf.zeros([0, 5], tf.int32))
    assert empty["ids"].shape[0] == 0 and empty["score"].shape == (0,)


@pytest.mark.parametrize("bad_id", [-1, "vocabulary size"])
def test_translate_ids_rejects_ids_outside_the_vocabulary(loaded, model, bad_id):
    signature = loaded.signatures["translate_ids"]
    size = model.config.source_vocab
    bad = size if bad_id == "vocabulary size" else bad_id
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"in \[0, {size}\)"):
        signature(source_ids=tf.constant([[5, 6, 3], [7, bad, 3]], tf.int32))


SERVE_SCRIPT = """
import importlib.abc, json, sys

class Forbidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("keras_transformer", "keras_hub", "trainers"):
            raise ImportError(f"{name} must not be needed to serve")

sys.meta_path.insert(0, Forbidden())
sys.path = [p for p in sys.path if p not in ("", ".")]
import tensorflow as tf
import tensorflow_text  # noqa: F401

serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
batches = [
    ["A plain sentence.", "", "Amen."],
    [b"invalid \\xff\\xfe bytes \\xc3"],
    ["word " * 20000],
    ["\\x00\\x01\\x07 control \\u202e right-to-left \\ufeff", "🙂 漢字 Ünïcödé"],
    [],
]
results = []
for batch in batches:
    out = serve(text=tf.constant(batch, tf.string, shape=[len(batch)]))
    results.append({
        "inputs": len(batch),
        "translations": [t.decode("utf-8") for t in out["translation"].numpy()],
        "scores": [float(s) for s in out["score"].numpy()],
    })
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("keras_transformer", "keras_hub"))
print(json.dumps({"results": results, "loaded": loaded}))
"""


def test_a_fresh_process_with_only_tensorflow_serves_any_input(exported, tmp_path):
    _, version = exported
    script = tmp_path / "serve.py"
    script.write_text(SERVE_SCRIPT)
    result = programs.python(script, version, cwd=tmp_path, timeout=300)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["loaded"] == []
    for batch in report["results"]:
        assert len(batch["translations"]) == len(batch["scores"]) == batch["inputs"]
        assert all(np.isfinite(batch["scores"]))
    assert [batch["inputs"] for batch in report["results"]] == [3, 1, 1, 2, 0]
    first = report["results"][0]
    assert first["translations"][1] == "" and first["scores"][1] == 0.0  # the empty string


# Whatever a client may send: any Unicode (control characters, bidi marks, astral planes),
# arbitrary bytes (mostly invalid UTF-8), empty strings, and huge ones.
ANY_TEXT = st.one_of(
    st.text().map(lambda text: text.encode("utf-8")),
    st.text(st.characters(categories=["Cc", "Cf", "Zs", "Zl", "Zp"])).map(str.encode),
    st.binary(max_size=64),
    st.just(b""),
    st.builds(
        lambda text, n: (text * n).encode("utf-8"), st.text(min_size=1), st.integers(1, 4000)
    ),
)


@pytest.fixture(scope="module")
def serving(loaded):
    return loaded.signatures["serving_default"]


@settings(max_examples=40, deadline=None, print_blob=True)
@given(batch=st.lists(ANY_TEXT, max_size=6))
def test_the_signature_answers_any_batch_of_any_strings(serving, batch):
    out = serving(text=tf.constant(batch, tf.string, shape=[len(batch)]))
    translations, scores = out["translation"].numpy(), out["score"].numpy()
    assert translations.shape == scores.shape == (len(batch),)  # one output per input
    assert np.all(np.isfinite(scores))
    for source, translation in zip(batch, translations, strict=True):
        translation.decode("utf-8")  # always valid UTF-8
        if not source.strip(b" "):
            assert translation == b""  # nothing to translate: nothing comes back


def test_saved_model_cli_show_and_run(exported):
    _, version = exported
    saved_model_cli = Path(sys.executable).parent / "saved_model_cli"
    show = programs.run([saved_model_cli, "show", "--dir", version, "--all"], timeout=300)
    for expected in (
        "signature_def['serving_default']",
        "inputs['text']",
        "outputs['translation']",
        "outputs['score']",
        "signature_def['translate_ids']",
        "signature_def['n_best']",
        "signature_def['serving_xla']",
        "inputs['source_ids']",
    ):
        assert expected in show.stdout
    run = programs.program(
        "trainers.saved_model_cli", "run", "--dir", version, "--tag_set", "serve",
        "--signature_def", "serving_default", "--input_exprs", 'text=["Amen.", "God said."]',
        timeout=300,
    )  # fmt: skip
    assert "Result for output key translation" in run.stdout
    assert "Result for output key score" in run.stdout
    # TensorFlow's notice that the loader `run` calls is deprecated: written once, by Abseil's
    # handler, not a second time by TensorFlow's own (docs/guides/serving.md's step).
    notices = [line for line in run.stderr.splitlines() if "is deprecated" in line]
    assert len(notices) == 1 and "deprecation.py" in notices[0], run.stderr[-2000:]


THREADS_SEEN = """
import runpy, sys
sys.argv = ["trainers.translate", *sys.argv[1:]]
try:
    runpy.run_module("trainers.translate", run_name="__main__")
except SystemExit as exit:
    import tensorflow as tf
    pool = tf.config.threading
    intra, inter = pool.get_intra_op_parallelism_threads(), pool.get_inter_op_parallelism_threads()
    print("status:", exit.code, "threads:", intra, inter)
"""


def test_translate_cli_gives_a_saved_model_its_threads(exported):
    """`--threads N` on a SavedModel is TensorFlow's intra-op and inter-op pools, N threads
    each, set before TensorFlow starts (it was ignored: issue 66); the library's translator
    takes them too, and refuses them once TensorFlow runs with others."""
    directory, version = exported
    result = programs.snippet(
        THREADS_SEEN, "--model", directory, "--threads", "2", input="Amen.\n", timeout=300
    )
    *translations, seen = result.stdout.splitlines()
    assert len(translations) == 1 and seen == "status: 0 threads: 2 2", result.stderr[-3000:]
    started = tf.config.threading.get_intra_op_parallelism_threads()  # conftest's
    with pytest.raises(RuntimeError, match=f"^threads={started + 1}: TensorFlow has started"):
        kt.serving.SavedModelTranslator(version, threads=started + 1)
    with pytest.raises(ValueError, match="^threads=-1: a number of threads, 0 or more"):
        kt.serving.SavedModelTranslator(version, threads=-1)


@pytest.mark.exact
def test_translate_cli_batches_lines_and_survives_bad_bytes(exported, model, tmp_path):
    """One output line an input line: lines end at "\\n" only (a lone "\\r" stays inside its
    line, a CRLF's "\\r" is dropped, a UTF-8 byte order mark too), from a file as from
    stdin; with --errors replace, a line that is not UTF-8 is translated, with a warning.
    The same sentence in batches of other widths translates alike but where the two part at
    a tie (`ties.rows_parted_at_ties`; at most one of the 9 pairs, none when written)."""
    directory, _ = exported
    lines = (
        b"\xef\xbb\xbfAmen.\n\xff\xfe not UTF-8\n\nGod said.\r\nA fifth\rline.\nGod said.\nAmen.\n"
    )
    (tmp_path / "in.txt").write_bytes(lines)
    result = run_main(
        "trainers.translate",
        "--saved-model",
        directory,
        "--input",
        tmp_path / "in.txt",
        "--batch-size",
        "2",
        "--errors",
        "replace",
    )
    translations = result.stdout.split("\n")[:-1]
    assert len(translations) == 7
    # "God said." with and without "\\r", "Amen." with and without the mark: compared below.
    assert "translated 7 sentences in" in result.stderr  # and how fast, on stderr
    assert f"warning: --input {tmp_path / 'in.txt'}: 1 line not UTF-8 (the first: line 2)" in (
        result.stderr
    )
    piped = programs.program(
        "trainers.translate", "--saved-model", directory / "1", "--errors", "replace",
        input=lines, timeout=300,
    )  # fmt: skip
    assert "warning: stdin: 1 line not UTF-8 (the first: line 2)" in piped.stderr.decode()
    # Line by line (stdin's batches are wider), then the two pairs (in other batches of two).
    read = ["Amen.", "\ufffd\ufffd not UTF-8", "", "God said.", "A fifth\rline.", "God said."]
    mine = [*piped.stdout.decode().split("\n")[:-1], translations[3], translations[0]]
    other = [*translations, translations[5], translations[6]]
    assert len(mine) == len(other) == 9
    parted = ties.rows_parted_at_ties(
        model,
        source_rows([*read, "Amen.", "God said.", "Amen."]),
        tokenized_back(mine),
        tokenized_back(other),
        SETTINGS,
    )
    assert len(parted) <= 1, parted


LATIN1 = "Amen.\nGod said: café.\nAmen.\n".encode("latin-1")


def test_translate_cli_refuses_a_file_that_is_not_utf8_before_loading_the_model(tmp_path):
    """By default, input that is not UTF-8 is refused, naming the file and its first bad line
    (1-based), before any model loads; --output is left as it was."""
    (tmp_path / "latin1.txt").write_bytes(LATIN1)
    output = tmp_path / "out.txt"
    output.write_text("the translations of yesterday\n")
    result = programs.program(
        "trainers.translate", "--model", tmp_path, "--input", tmp_path / "latin1.txt",
        "--output", output, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"python -m trainers.translate: error: --input {tmp_path / 'latin1.txt'}: line 2 is "
        "not UTF-8 (byte 0xe9 at byte 14 of the line); convert the input to UTF-8 (e.g. iconv "
        "-f latin1 -t utf-8), or translate it with --errors replace (U+FFFD for bad bytes)"
    ]
    assert output.read_text() == "the translations of yesterday\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latin1.txt", "out.txt"]


def test_translate_cli_refuses_stdin_that_is_not_utf8_and_writes_no_output(exported, tmp_path):
    directory, _ = exported
    output = tmp_path / "out.txt"
    translate = ("trainers.translate", "--model", directory, "--output", output)
    result = run_main(*translate, stdin=LATIN1, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith(
        "python -m trainers.translate: error: stdin: line 2 is not UTF-8 (byte 0xe9"
    )
    assert list(tmp_path.iterdir()) == []  # neither the output nor a partial one
    # --output in folders the run makes: they go again with the failed run.
    nested = ("trainers.translate", "--model", directory, "--output", tmp_path / "a" / "b" / "o")
    assert run_main(*nested, stdin=LATIN1, check=False).returncode == 2
    assert list(tmp_path.iterdir()) == []
    replaced = run_main(*translate, "--errors", "replace", stdin=LATIN1)
    assert len(output.read_text().splitlines()) == 3
    assert "warning: stdin: 1 line not UTF-8 (the first: line 2)" in replaced.stderr


@pytest.mark.slow
def test_a_sigterm_leaves_no_partial_output_and_the_previous_file_intact(exported, tmp_path):
    """SIGTERM while translate writes --output: the hidden partial file is removed, the
    existing output stays as it was, and the process ends as SIGTERM ends it."""
    directory, _ = exported
    (tmp_path / "long.txt").write_text("In the beginning God created the heavens.\n" * 100_000)
    output = tmp_path / "out.txt"
    output.write_text("the translations of yesterday\n")
    process = programs.start(
        "-m", "trainers.translate", "--model", directory, "--input", tmp_path / "long.txt",
        "--output", output, "--batch-size", "4", stdout=subprocess.DEVNULL, text=False,
    )  # fmt: skip
    try:
        found = lambda: list(tmp_path.glob(".partial-*"))  # noqa: E731  (translating)
        programs.wait_until(found, process, 240, "a partial output")
        time.sleep(1.0)  # some batches written
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGTERM, process.stderr.read().decode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.txt", "out.txt"]
    assert output.read_text() == "the translations of yesterday\n"


# `python -m trainers.translate ARGS` with SIGINT turned into KeyboardInterrupt, as Python
# does for a program started from a terminal (a test run in the background would start it
# with SIGINT ignored).
AS_FROM_A_TERMINAL = (
    "import runpy, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "sys.argv = ['trainers.translate', *sys.argv[1:]]\n"
    "runpy.run_module('trainers.translate', run_name='__main__', alter_sys=True)\n"
)


@pytest.mark.slow
def test_ctrl_c_prints_one_line_exits_130_and_leaves_no_partial_output(exported, tmp_path):
    """Ctrl-C (SIGINT) while translate writes --output, reading a pipe that stays open: the
    line `interrupted` alone on stderr, exit status 130, the hidden partial file removed and
    the existing output as it was."""
    directory, _ = exported
    output = tmp_path / "out.txt"
    output.write_text("the translations of yesterday\n")
    process = programs.start(
        "-c", AS_FROM_A_TERMINAL, "--model", directory, "--output", output, "--batch-size", "1",
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=False,
    )  # fmt: skip
    try:
        process.stdin.write(b"Amen.\n")
        process.stdin.flush()
        # Its first line translated and written: it waits for the next one.
        found = lambda: any(p.stat().st_size for p in tmp_path.glob(".partial-*"))  # noqa: E731
        programs.wait_until(found, process, 240, "a partial output")
        process.send_signal(signal.SIGINT)
        process.wait(timeout=120)
    finally:
        process.kill()
        process.stdin.close()
    assert (process.returncode, process.stderr.read().decode()) == (130, "interrupted\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    assert output.read_text() == "the translations of yesterday\n"


def test_translate_runs_on_tensorflow_without_jax(exported):
    """`import tensorflow` imported JAX where it is installed (TensorFlow's LiteRT converter
    takes `jax.jit`), and JAX's garbage-collector callback is a place where Python ignores a
    Ctrl-C: 4 of 12 interrupted runs of a program exited 0. A program on TensorFlow keeps
    JAX out (`trainers.errors.program`), and translates as before."""
    assert importlib.util.find_spec("jax") is not None  # installed: TensorFlow would take it
    directory, _ = exported
    result, imported = programs.program_imports(
        "trainers.translate", "--model", directory,
        modules=("tensorflow", "jax"), input="Amen.\n", check=True, timeout=300,
    )  # fmt: skip
    assert imported == ["tensorflow"] and len(result.stdout.splitlines()) == 1, result.stderr


def test_translate_cli_n_best(exported):
    directory, _ = exported
    translate = ("trainers.translate", "--model", directory)
    result = run_main(*translate, "--n-best", "3", stdin=b"Amen.\nGod said.\n")
    lines = [line.split(" ||| ") for line in result.stdout.splitlines()]
    assert [line[0] for line in lines] == ["0", "0", "0", "1", "1", "1"]
    for first in (lines[:3], lines[3:]):
        scores = [float(line[2]) for line in first]
        assert scores == sorted(scores, reverse=True)
    run_main(*translate, "--n-best", "5", "--input", os.devnull)  # nothing asked of the model
    too_many = run_main(*translate, "--n-best", "5", stdin=b"Amen.\n", check=False)
    assert too_many.returncode == 2
    assert "--n-best 5: the SavedModel keeps 4 hypotheses" in too_many.stderr


def test_translate_cli_prefixes_the_sources_and_asks_for_the_prefix_signature(exported):
    """`--source-prefix` puts its text in front of each line here, before the SavedModel
    reads it (a line that starts with a language code keeps its own); `--target-prefix`
    needs the `serving_prefix` signature, which this export lacks (its vocabulary has no
    language codes), and a code the vocabulary lacks is refused by the flag's name."""
    directory, version = exported
    translate = ("trainers.translate", "--model", directory)
    by_hand = run_main(*translate, stdin=b"And God said.\nxxx_Zzzz Amen.\n\n")
    prefixed = run_main(
        *translate, "--source-prefix", "And", stdin=b"God said.\nxxx_Zzzz Amen.\n\n"
    )
    assert prefixed.stdout == by_hand.stdout
    plain = run_main(*translate, stdin=b"God said.\n").stdout.splitlines()
    assert prefixed.stdout.splitlines()[0] != plain[0]  # the prefix reaches the model
    # In a process of its own, as a user runs it: the program's way to the signature.
    no_signature = programs.program(
        "trainers.translate", "--model", directory, "--target-prefix", "And",
        input="Amen.\n", timeout=300, check=False,
    )  # fmt: skip
    assert (no_signature.returncode, no_signature.stdout) == (2, "")
    assert no_signature.stderr == (
        f"python -m trainers.translate: error: {version} has no serving_prefix signature, "
        "which takes --target-prefix; export it again with python -m trainers.export "
        "--prefix-signature (a target prefix a request), or --target-prefix TEXT (the export's "
        "own)\n"
    )
    refused = run_main(*translate, "--source-prefix", "eng_Latn", stdin=b"Amen.\n", check=False)
    assert refused.returncode == 2
    assert refused.stderr.startswith(
        "python -m trainers.translate: error: --source-prefix='eng_Latn': 'eng_Latn' looks like"
    )


def test_translate_cli_reports_a_missing_export(tmp_path):
    result = run_main("trainers.translate", "--saved-model", tmp_path, check=False)
    assert result.returncode == 2 and "no saved_model.pb, no version folder" in result.stderr


def test_translate_cli_says_how_to_export_a_training_run_directory(tmp_path):
    """`--model` naming a folder that holds no export names every format; a training
    run directory (model.keras, experiment.yaml) gets the command that exports it (it named
    neither LiteRT nor the export: issue 66); a folder holding a Keras model alone, such as an
    export's keras/ copy, no export command that would fail on it (a new user's trial). In a
    process of its own, as a user runs it."""
    run = tmp_path / "runs" / "demo"
    run.mkdir(parents=True)
    formats = (
        f"python -m trainers.translate: error: {run}: not an exported model: no SavedModel "
        "(no saved_model.pb, no version folder), no CTranslate2 model (model.bin and "
        "manifest.json), no LiteRT file (model.tflite) and no web site (index.html beside "
        "model.tflite) in it"
    )
    for name in (None, "model.keras", "experiment.yaml"):
        if name is not None:
            (run / name).write_text("")
        result = programs.program(
            "trainers.translate", "--model", run, input="", timeout=300, check=False
        )
        assert result.returncode == 2 and result.stderr.startswith(formats), result.stderr
        if name is None:
            assert result.stderr == f"{formats}\n"
            continue
        if name == "model.keras":  # a Keras model alone (an export's keras/ copy): no run
            assert result.stderr == (
                f"{formats}; it holds a Keras model (model.keras), which trainers.translate "
                "does not run: give --model the folder trainers.export wrote, or load this one "
                f"in Python with TransformerSeq2SeqLM.from_preset({str(run)!r})\n"
            )
            continue
        assert result.stderr == (
            f"{formats}; it is a training run directory (model.keras, experiment.yaml): "
            f"export it first, python -m trainers.export --model-dir {run} --out "
            "saved_models/demo (a SavedModel; --format ctranslate2 or --format litert or "
            "--format web for the others), then --model saved_models/demo\n"
        )


@pytest.mark.parametrize(
    "options, message",
    [
        (["--quantize", "int16"], "--quantize int16 applies to --format ctranslate2 only"),
        (
            ["--format", "litert", "--prefix-signature"],
            "--prefix-signature applies to --format savedmodel only",
        ),
        (
            ["--format", "ctranslate2", "--stopping", "early"],
            "--stopping applies to --format savedmodel and litert",
        ),
    ],
)
def test_export_cli_refuses_options_of_the_other_format(tmp_path, options, message):
    result = run_main(
        "trainers.export", "--model-dir", tmp_path, "--out", tmp_path / "out", *options, check=False
    )
    assert result.returncode == 2
    assert message in result.stderr


@pytest.mark.exact
def test_the_n_best_signature_returns_the_settings_n_best(model):
    """`n_best` above 1 in the settings is the n_best signature's count (every beam
    otherwise, as before); its hypotheses are the library's `decode` with that n_best."""
    vocabularies = bible.vocabularies()
    endpoints = export.translation_endpoints(model, vocabularies, beam_size=4, n_best=2)
    serve_n_best, _ = endpoints["n_best"]
    got = tf.function(serve_n_best)(tf.constant(SENTENCES[:3]))  # as the SavedModel traces it
    assert got["translations"].shape == got["scores"].shape == (3, 2)
    settings = kt.decoding.DecodingSettings(beam_size=4, n_best=2)
    source_ids = next(
        iter(kt.data.source_batches(SENTENCES[:3], vocabularies.source, max_length=MAX_LENGTH))
    )
    ids, scores = kt.decoding.decode(model, source_ids, settings)
    np.testing.assert_allclose(got["scores"].numpy(), scores.numpy(), rtol=1e-5)
    with pytest.raises(ValueError, match="n_best=5 must be between 1 and the beam size 4"):
        export.translation_endpoints(model, vocabularies, beam_size=4, n_best=5)


# Earlier exports of each format, as `trainers.export` writes them (the files a format is
# recognised by: `kt.serving.formats`).
EARLIER = {
    "savedmodel": {"1/saved_model.pb": "", "keras/manifest.json": "{}"},
    "ctranslate2": {
        "model.bin": "",
        "manifest.json": '{"format": "keras-transformer/ctranslate2"}',
    },
    "litert": {"model.tflite": "", "manifest.json": '{"format": "litert"}'},
}


def files_under(path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.mark.parametrize(
    "options, there, earlier",
    [
        ([], "savedmodel", "out/keras"),  # a new version is added, but keras/ holds one model
        (["--version", "1"], "savedmodel", "out/1"),
        (["--format", "ctranslate2"], "ctranslate2", "out"),
        (["--format", "litert"], "litert", "out"),
    ],
)
def test_export_cli_refuses_an_earlier_export_before_any_work(tmp_path, options, there, earlier):
    """An export already at --out is named, with --overwrite, before the model is loaded
    (the model directory here does not exist), and stays as it was."""
    out = tmp_path / "out"
    for name, text in EARLIER[there].items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    before = files_under(tmp_path)
    result = programs.program(
        "trainers.export", "--model-dir", tmp_path / "run", "--out", out, *options,
        timeout=300, check=False,
    )  # fmt: skip
    where = f"--out {out}" + ("" if earlier == "out" else f": {tmp_path / earlier}")
    assert result.returncode == 2 and result.stderr == (
        f"python -m trainers.export: error: {where} exists (an earlier export): --overwrite "
        "replaces it once the new export is complete, or give another --out\n"
    )
    assert files_under(tmp_path) == before


@pytest.mark.parametrize(
    "options, there",
    [
        ([], None),  # a folder of one's own
        (["--format", "ctranslate2"], None),
        (["--format", "litert"], None),
        ([], "litert"),  # another format's export: a SavedModel would mix into it
        (["--format", "litert"], "savedmodel"),
        (["--format", "ctranslate2"], "litert"),
    ],
)
def test_export_cli_never_replaces_what_is_not_an_earlier_export(tmp_path, options, there):
    """--overwrite replaces an earlier export of the format alone: a folder of one's own,
    or another format's export, at --out is refused by name, --overwrite or not, before the
    model is loaded, and nothing in it is lost."""
    out = tmp_path / "out"
    files = EARLIER[there] if there else {"thesis.txt": "mine", "sub/data.csv": "1,2"}
    for name, text in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    before = files_under(tmp_path)
    result = programs.program(
        "trainers.export", "--model-dir", tmp_path / "run", "--out", out, *options,
        "--overwrite", timeout=300, check=False,
    )  # fmt: skip
    title = {"ctranslate2": "CTranslate2 model", "litert": "LiteRT file"}
    format_title = title.get(options[1] if options else "", "SavedModel")
    assert result.returncode == 2 and result.stderr == (
        f"python -m trainers.export: error: --out {out} exists and holds no earlier "
        f"{format_title} export: an export never replaces it, --overwrite or not; give "
        "another --out\n"
    ), result.stderr
    assert files_under(tmp_path) == before

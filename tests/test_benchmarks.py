"""The benchmark scripts keep printing the peer's JSON schema, and the profile summary counts
each event's own time (no timing is asserted here: figures belong in BENCHMARKS.md)."""

import json
import sys
import time
from pathlib import Path

import pytest
from tensorflow.tsl.profiler.protobuf import xplane_pb2

import keras_transformer as kt
from benchmarks import compare, generate, peer, profile, run

# The fields benchmarks.compare reads, which every benchmark prints (benchmarks.peer's schema).
PEER_FIELDS = {
    "impl",
    "preset",
    "mode",
    "params",
    "batch_size",
    "src_len",
    "tgt_len",
    "jit_compile",
    "cache",
    "step_ms_median",
    "step_ms_min",
    "tokens_per_s",
    "sentences_per_s",
    "peak_rss_mb",
}
SMALL = ["--preset", "tiny", "--batch-size", "2", "--src-len", "6", "--tgt-len", "5"]


@pytest.mark.parametrize(
    "flags",
    [
        ["--mode", "train", "--steps", "2", "--warmup", "1"],
        ["--mode", "decode", "--steps", "1", "--beam-size", "2", "--jit-compile", "off"],
        ["--mode", "decode", "--steps", "1", "--shards", "2"],
    ],
    ids=["train", "decode", "decode-shards"],
)
def test_the_last_line_is_the_peer_schema(flags, capsys):
    run.main(SMALL + flags)
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert PEER_FIELDS <= set(result)
    assert result["impl"] == "keras_transformer" and result["mode"] == flags[1]
    assert result["tokens_per_s"] > 0 and result["step_ms_min"] <= result["step_ms_median"]
    # The benchmarked model: tiny with the peer's vocabulary, room for twice the lengths.
    config = kt.TransformerConfig.preset("tiny", vocab_size=run.PRESET_VOCAB["tiny"], max_length=12)
    assert result["params"] == config.parameter_count()


def test_the_generation_benchmark_prints_the_peer_schema(capsys):
    flags = ["--batch-size", "3", "--src-len", "4", "--tgt-len", "3", "--steps", "1"]
    generate.main(flags)
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert PEER_FIELDS <= set(result)
    assert result["mode"] == "generate-greedy" and result["cache"] is True
    # Every row generates all 3 tokens (no stop token): 9 a generation.
    assert result["tokens_per_s"] == pytest.approx(9e3 / result["step_ms_median"], rel=1e-2)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--shards", "0"], "--shards 0: must be >= 1"),
        (["--shards", "2", "--jit-compile", "off"], "it needs --jit-compile on"),
    ],
)
def test_bad_shards_are_refused(flags, message, capsys):
    with pytest.raises(SystemExit):
        run.main(SMALL + ["--mode", "decode"] + flags)
    assert message in capsys.readouterr().err


def test_self_times_subtract_nested_events():
    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    for key, name in enumerate(["fusion.1", "dot.7", "dot.9", "SlinkyThreadPool::Await"], 1):
        plane.event_metadata[key].name = name
    line = plane.lines.add(name="worker")
    for metadata_id, offset, duration in [(1, 0, 100), (2, 10, 30), (3, 50, 20), (4, 200, 50)]:
        line.events.add(metadata_id=metadata_id, offset_ps=offset, duration_ps=duration)
    device = space.planes.add(name="/device:GPU:0")  # not the host: ignored
    device.event_metadata[1].name = "fusion.2"
    device.lines.add(name="stream").events.add(metadata_id=1, offset_ps=0, duration_ps=999)

    totals = profile.self_times(space)
    # fusion.1 runs 100 with dot.7 (30) and dot.9 (20) inside it; waiting is not work.
    assert dict(totals) == {"fusion": 50, "dot": 50}


def test_the_corpus_benchmark_makes_a_corpus_and_times_its_pipeline(tmp_path, capsys):
    from benchmarks import corpus

    path = tmp_path / "corpus.tsv"
    corpus.main(["make", "--pairs", "2500", "--out", str(path)])
    made = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert made["pairs"] == 2500 and made["mode"] == "make"
    lines = path.read_text(encoding="utf-8").splitlines()
    assert {"en", "es"} <= set(lines[0].split("\t")) and len(lines) == 2501
    assert kt.corpus.tsv_files(path, "en", "es").scan().pairs == 2500
    corpus.main(
        ["pipeline", "--corpus", str(path), "--tokens-per-batch", "2000", "--batches", "3"]
        + ["--warmup", "1"]
    )
    timed = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert timed["tokens_per_s"] > 0 and timed["mode"] == "pipeline"


def test_latency_fit_splits_a_request_into_fixed_cost_and_cost_per_piece():
    from benchmarks import serve

    pieces = [3, 10, 21, 40]
    fixed, per_piece = serve.latency_fit([2.0 + 0.25 * n for n in pieces], pieces)
    assert fixed == pytest.approx(2.0) and per_piece == pytest.approx(0.25)
    with pytest.raises(ValueError, match="at least two output lengths"):
        serve.latency_fit([1.0, 1.2], [7, 7])


def test_the_litert_profile_gives_a_sample_to_the_first_kernel_on_its_stack():
    """benchmarks.litert_profile's attribution of perf's stacks (leaf first): a builtin
    kernel by its namespace, XNNPACK's ops by their microkernel, the WHILE kernel's copies,
    the interpreter's re-preparing, in the loop or outside it."""
    from benchmarks.litert_profile import kind

    while_eval = "tflite::ops::builtin::while_kernel::Eval_dynamic(TfLiteContext*, TfLiteNode*)"
    invoke = "tflite::Subgraph::Invoke()"
    xnnpack = "tflite::xnnpack::(anonymous namespace)::SubgraphInvoke(TfLiteContext*, TfLiteNode*)"
    stacks = {
        ("tflite::ops::builtin::topk_v2::(anonymous namespace)::TopK<float, int>", invoke,
         while_eval): (True, "TOPK_V2"),
        ("xnn_f32_gemm_minmax_ukernel_7x32__avx512f_broadcast", "xnn_compute_gemm", xnnpack,
         invoke, while_eval): (True, "FULLY_CONNECTED (XNNPACK)"),
        ("xnn_x32_packw_gemm_goi_ukernel_x32__avx512f_u4_prfm",
         "xnn_compute_batched_packw_gemm_goi", xnnpack, while_eval):
            (True, "BATCH_MATMUL: packing K, V (XNNPACK)"),
        ("__memmove_avx512_unaligned_erms", "tflite::ops::builtin::(anonymous namespace)::"
         "CopyTensorsData<std::vector<int>>", while_eval): (True, "WHILE: copying the loop state"),
        ("tflite::Subgraph::ResizeTensor(TfLiteContext*, TfLiteTensor*, TfLiteIntArray*)",
         "tflite::ops::builtin::reduce::PrepareMeanOrSum(TfLiteContext*, TfLiteNode*)",
         "tflite::Subgraph::PrepareOpsAndTensors()", invoke, while_eval):
            (True, "re-preparing (interpreter)"),
        ("xnn_f32_gemm_minmax_ukernel_1x32__avx512f_broadcast", xnnpack, invoke):
            (False, "FULLY_CONNECTED (XNNPACK)"),
        ("_PyEval_EvalFrameDefault", "cfunction_call"): (False, "other (interpreter, Python)"),
    }  # fmt: skip
    for frames, expected in stacks.items():
        assert kind(list(frames)) == expected, frames


def test_the_opus_shaped_checkpoint_imports_at_its_sizes(tmp_path):
    """benchmarks.opus_shaped writes a Marian checkpoint that the importer reads (here at a
    small size: OPUS-MT's own is written the same way)."""
    from benchmarks import opus_shaped
    from keras_transformer.pretrained import marian

    sizes = dict(d_model=16, heads=2, ffn=32, layers=1, vocab=2000, positions=64)
    opus_shaped.write(tmp_path / "opus", sizes)
    model, vocabularies = marian.load_marian(tmp_path / "opus")
    config = model.config
    assert (config.d_model, config.num_heads, config.d_ff, config.max_length) == (16, 2, 32, 64)
    assert config.target_vocab == vocabularies.target.vocabulary_size() == 2000 + 1
    assert config.activation == "silu" and config.output_bias
    # One language into one, as opus-mt-en-es: no >>es<< target tokens (LiteRT takes it).
    assert not [p for p in vocabularies.source.pieces if p.startswith(">>")]


def test_the_nllb_shaped_checkpoint_imports_and_its_memory_is_reported(tmp_path, capsys):
    """benchmarks.nllb_shaped writes a sharded M2M100 checkpoint that the importer reads (here
    at a small size), and benchmarks.import_memory reports the import's peak against the
    weights' size."""
    from benchmarks import import_memory, nllb_shaped

    sizes = dict(d_model=16, heads=2, ffn=32, layers=1, vocab=1500, positions=64)
    nllb_shaped.write(tmp_path / "nllb", sizes, shards=2)
    assert (tmp_path / "nllb" / "model.safetensors.index.json").exists()
    model, _ = kt.pretrained.load(tmp_path / "nllb")
    config = model.config
    assert (config.d_model, config.num_heads, config.d_ff, config.max_length) == (16, 2, 32, 64)
    assert config.target_vocab == 1500 + 1 and config.norm_first  # + our <s>: module doc
    import_memory.main([str(tmp_path / "nllb")])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["what"] == "kt.pretrained.load" and report["parameters"] == model.count_params()
    assert report["peak_rss_mb"] >= report["baseline_rss_mb"] > 0
    assert report["peak_over_weights"] > 1  # the weights are a few kB here
    import_memory.main([str(tmp_path / "nllb"), "--task"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["what"] == "TransformerSeq2SeqLM.from_preset"
    assert report["parameters"] == model.count_params()


@pytest.mark.parametrize(
    "flags",
    [["--mode", "generate", "--sentences", "3"], ["--mode", "fit", "--steps", "2"]],
    ids=["generate", "fit"],
)
def test_the_task_benchmark_compares_both_sides(flags, capsys):
    from benchmarks import task

    summary = task.main([*flags, "--runs", "1"])
    lines = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert lines[-1] == summary and [line["side"] for line in lines[:-1]] == ["today", "task"]
    assert lines[0]["tokens"] == lines[1]["tokens"] > 0  # the same work on both sides
    assert summary["ratio_task_over_today"] > 0


@pytest.mark.parametrize(
    "flags",
    [
        ["--mode", "train", "--steps", "2", "--warmup", "1"],
        ["--mode", "decode", "--steps", "1", "--jit-compile", "off"],
        ["--mode", "decode", "--steps", "1", "--cache", "off"],
    ],
    ids=["train", "decode", "decode-without-cache"],
)
def test_the_peer_prints_the_schema_for_the_same_sizes(flags, capsys):
    record = peer.main(SMALL + flags)
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == record
    assert PEER_FIELDS <= set(record) and record["impl"] == "keras_hub"
    assert record["tokens_per_s"] > 0
    # The same preset as benchmarks.run's: d_model 128, 4 heads, d_ff 512, 2 + 2 layers.
    assert peer.SIZES["tiny"] == (128, 4, 512, 2)


def test_compare_alternates_and_reports_the_ratio_of_medians(tmp_path, capsys):
    script = tmp_path / "fixed.py"
    script.write_text("import json, sys\nprint(json.dumps({'tokens_per_s': float(sys.argv[1])}))\n")
    a, b = f"{sys.executable} {script} 30", f"{sys.executable} {script} 20"
    summary = compare.main(["--a", a, "--b", b, "--repeats", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["run 1", "run 2"]
    assert json.loads(lines[-1]) == summary and summary["ratio"] == 1.5
    assert summary["range_a"] == [30.0, 30.0] and summary["repeats"] == 2
    with pytest.raises(SystemExit, match="has no 'step_ms_median'"):
        compare.main(["--a", a, "--b", b, "--field", "step_ms_median"])


def test_the_request_benchmark_times_every_part_of_a_request(capsys):
    """benchmarks.request times each part of a one-sentence `serving_xla` request (its
    parts checked to translate as the written signature does) and prints the table and the
    JSON line (here an untrained tiny model, one sentence, one pass)."""
    import argparse

    from benchmarks import request
    from tests import bible

    model, vocabularies = bible.tiny_model()
    args = argparse.Namespace(beams=[1], length_penalty=0.6, stopping="early", repeats=1, fast=True)
    result = request.run(model, vocabularies, ["In the beginning"], args)
    assert result["mode"] == "request" and result["requests"] == 1
    rows = {row["part"]: row for row in result["rows"]}
    assert set(request.PARTS) <= set(rows) and request.OVERHEAD in rows
    assert all(rows[part]["fastest_ms"] > 0 for part in request.PARTS)
    # An untrained model runs to its length limit: the source's 4 ids and 50, within 24.
    assert result["median_steps"] == {"greedy": 24.0}
    assert result["signature_fit"] == {"greedy": None}  # one length: no line to fit
    print(request.table(result))
    table = capsys.readouterr().out
    assert "| search in sorted chunks |" in table and "greedy: median steps 24" in table
    json.dumps(result)


def test_the_web_benchmark_pages_each_wasm_build_and_checks_the_package(tmp_path):
    """benchmarks.web: the site copied a WASM build a folder, the relaxed-SIMD copy's app.js
    loading that build (the compat one's as written); a package folder without the build, or
    of another version than the lockfile's, refused naming the flag."""
    from benchmarks import web
    from keras_transformer.export.web import ASSETS, litertjs_version

    site = tmp_path / "site"
    (site / "litertjs").mkdir(parents=True)
    (site / "app.js").write_text((ASSETS / "app.js").read_text())
    package = tmp_path / "core"
    with pytest.raises(SystemExit, match="--litertjs-package .*: no @litertjs/core package"):
        web.relaxed_build(package)
    (package / "wasm").mkdir(parents=True)
    for suffix in (".js", ".wasm"):
        (package / "wasm" / f"litert_wasm_internal{suffix}").write_text(suffix)
    (package / "package.json").write_text(json.dumps({"version": "0.0.1"}))
    with pytest.raises(SystemExit, match=r"@litertjs/core 0\.0\.1, where the sites ship"):
        web.relaxed_build(package)
    (package / "package.json").write_text(json.dumps(litertjs_version()))
    script = web.relaxed_build(package)
    folders = web.pages(site, tmp_path / "pages", script)
    assert folders == {"compat": "compat", "relaxed_simd": "relaxed_simd"}
    compat = (tmp_path / "pages" / "compat" / "app.js").read_text()
    relaxed = (tmp_path / "pages" / "relaxed_simd" / "app.js").read_text()
    assert "./litertjs/litert_wasm_compat_internal.js" in compat
    assert "litert_wasm_compat_internal" not in relaxed
    assert "./litertjs/litert_wasm_internal.js" in relaxed
    assert sorted(p.name for p in (tmp_path / "pages" / "relaxed_simd" / "litertjs").iterdir()) == [
        "litert_wasm_internal.js",
        "litert_wasm_internal.wasm",
    ]


def test_the_program_memory_benchmark_reports_a_peak_and_kills_above_its_limit(tmp_path, capsys):
    """benchmarks.program_memory reports a command's exit status and peak RSS (a process
    that holds 200 MiB shows at least that), and kills a command and its children above
    --limit-gib."""
    from benchmarks import program_memory

    hold = "import time; b = bytearray(200 * 2**20); time.sleep(1)"
    report = program_memory.main(["--every", "0.05", "--", sys.executable, "-c", hold])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == report
    assert report["returncode"] == 0 and not report["killed_over_limit"]
    assert report["peak_tree_rss_mb"] >= report["peak_rss_mb"] >= 200
    # The holder in a session of its own, under a parent that waits for it: both killed.
    pid_file = tmp_path / "pid"
    hold = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
        "b = bytearray(200 * 2**20); time.sleep(60)"
    )
    parent = (
        "import subprocess, sys; "
        f"subprocess.run([sys.executable, '-c', {hold!r}], start_new_session=True)"
    )
    report = program_memory.main(["--limit-gib", "0.1", "--", sys.executable, "-c", parent])
    assert report["killed_over_limit"] and report["returncode"] == -9
    assert report["seconds"] < 60
    holder = int(pid_file.read_text())
    for _ in range(100):  # killed; gone once its parent (killed too) no longer holds it
        if state(holder) in ("gone", "Z"):
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the holder {holder} outlived the limit")


def state(pid: int) -> str:
    """A process's state letter (Linux: /proc/PID/stat; "Z" for a zombie), "gone" if none."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def test_the_exports_benchmark_times_each_export_and_refuses_a_bad_spec(tiny_export, capsys):
    """benchmarks.exports: a row an export, in the order given, each request timed and the
    outputs' lengths of the first round (one export under two names: the same lengths), p95
    never below p50 (two requests a row); a spec without a path, a beam that is not a number,
    a round count below 1, a batch above the sentences, a name given twice or a path without
    an export refused."""
    from benchmarks import exports

    _, directory, _, _ = tiny_export
    rows = exports.main(
        ["--sentences", "2", "--rounds", "1", "--threads", "0", f"a={directory}", f"b={directory}"]
    )
    assert [row["export"] for row in rows] == ["a", "b"]
    assert len(rows[0]["output_chars"]) == 2
    assert rows[0]["output_chars"] == rows[1]["output_chars"]
    assert all(0 < row["p50_ms"] <= row["p95_ms"] for row in rows)
    # Requests of two verses: one a round, an output a verse.
    [batched] = exports.main(
        ["--sentences", "2", "--rounds", "2", "--batch", "2", "--threads", "0", f"a={directory}"]
    )
    assert batched["batch"] == 2 and len(batched["output_chars"]) == 2
    assert batched["ms_a_sentence"] > 0
    refused = (
        ["a"],
        [f"a={directory}=four"],
        ["--rounds", "0", f"a={directory}"],
        ["--batch", "0", f"a={directory}"],
        ["--batch", "3", "--sentences", "2", f"a={directory}"],
        [f"a={directory}", f"a={directory}"],
        [f"a={directory.parent / 'missing'}"],
    )
    for argv in refused:
        with pytest.raises(SystemExit):
            exports.main(["--threads", "0", *argv])
    errors = capsys.readouterr().err
    assert errors.count("error:") == len(refused)
    # The row would say "batch": 3 of requests that hold 2 verses.
    assert "error: --batch=3 is more than --sentences=2: a request holds" in errors

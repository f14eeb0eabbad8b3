"""Serving side by side: the SavedModel (stock and XLA signatures), the CTranslate2 export and
the LiteRT file of one trained model, on the same sentences, tokenization included.

    python -m benchmarks.serve --model-dir runs/demo --model model.averaged.keras \
        --length-penalty 1.0

Exports the model into a temporary folder (SavedModels with beam 1 and beam 4, traced with
`keras_transformer.fast` as `trainers.export` does unless --fast off; CTranslate2 float32 and
int8 with the same decoding settings; the beam-4 SavedModels once a --stopping rule), then,
for greedy and beam 4:
- batches of 32: the test split (1,020 verses) in batches of 32, milliseconds a sentence
  (total time over sentences; the median over --repeats passes), and the test BLEU of
  those translations (sacrebleu, as trainers.evaluate scores);
- one sentence at a time: --single verses one request each, p50 and p95 milliseconds (over
  all requests of all passes), and a least-squares line through the requests, milliseconds
  = fixed + per piece x output pieces (each verse's fastest pass; pieces: its translation
  re-tokenized by the target SentencePiece model, EOS counted): what a request costs
  whatever its length, and what each output token adds.
Engines alternate within each pass, so a drifting machine is fair to all. TensorFlow uses its
default threads (all cores) unless --intra-op-threads says how many (TF Serving's
`--tensorflow_intra_op_parallelism`); CTranslate2 runs --ct2-threads threads (1 by default, as
CTranslate2's own benchmarks of single-core serving), LiteRT --litert-threads (1). --quantize
adds the SavedModels of `trainers.export --quantize` (int8, bfloat16) beside the float32 ones;
--litert the LiteRT files of `trainers.export --format litert` (float32, int8, int4, float16;
each converted in a process of its own). XLA
compiles one program per shape bucket: a warm-up pass compiles them before timing. --rss adds
each artifact's peak RSS, served alone in a new process (`benchmarks.peak_rss`; the
SavedModels' `serving_xla`). Prints a
Markdown table, then one JSON object (the benchmarks' schema) as the last stdout line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from trainers import startup_logs  # noqa: E402

startup_logs.install()

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer import corpus, evaluation, export, fast  # noqa: E402
from keras_transformer.decoding import STOPPING, DecodingSettings  # noqa: E402
from keras_transformer.serving import CTranslate2Translator, LiteRTTranslator  # noqa: E402
from trainers.run_dir import MODEL, RunDirectory  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TEST = ROOT / "data" / "bible-en-es" / "test.tsv.xz"


def engines(model, vocabularies, folder: Path, args, sizes: dict, artifacts: dict) -> dict:
    """(name, decoding) -> translate(list[str]) -> list[str] for every artifact; `sizes`
    gets each artifact's size on disk in MiB, by name, and `artifacts` what
    `benchmarks.peak_rss` loads for each key: (kind, path, beam)."""
    settings = DecodingSettings(length_penalty=args.length_penalty)
    found = {}
    searches = [(1, "exact", "greedy")] + [
        (4, stopping, "beam 4" + (", early stopping" if stopping == "early" else ""))
        for stopping in args.stopping
    ]
    for (beam, stopping, decoding), weights in itertools.product(searches, args.quantize):
        quantize = None if weights == "float32" else weights
        with fast.switched(args.fast):  # as trainers.export does by default
            version = export.export(
                model,
                folder / f"saved_model_beam{beam}_{stopping}_{weights}",
                vocabularies=vocabularies,
                decoding=settings.replace(beam_size=beam, stopping=stopping),
                quantize=quantize,
            )
        loaded = tf.saved_model.load(str(version))
        for signature in args.signatures:
            if signature not in loaded.signatures:
                continue
            serve = loaded.signatures[signature]
            name = f"SavedModel {signature}" + (f" {weights}" if quantize else "")
            found[name, decoding] = _saved_model_translate(serve)
            sizes[name] = _megabytes(version)
            if signature == "serving_xla":
                artifacts[name, decoding] = ("saved_model", version, beam)
    for (beam, stopping, decoding), weights in itertools.product(searches, args.litert):
        directory = folder / f"litert_beam{beam}_{stopping}_{weights}"
        export_litert(args, directory, beam, stopping, weights)
        name = f"LiteRT {weights}, {args.litert_threads} thread(s)"
        translator = LiteRTTranslator(directory, threads=args.litert_threads)
        found[name, decoding] = _litert_translate(translator)
        sizes[name] = _megabytes(directory)
        artifacts[name, decoding] = ("litert", directory, beam)
    for quantization in args.ct2_types:
        directory = export.export(
            model,
            folder / f"ctranslate2_{quantization}",
            format="ctranslate2",
            vocabularies=vocabularies,
            decoding=settings,
            quantize=None if quantization == "float32" else quantization,
        )
        translator = CTranslate2Translator(directory, threads=args.ct2_threads)
        for beam, decoding in ((1, "greedy"), (4, "beam 4")):
            name = f"CTranslate2 {quantization}, {args.ct2_threads} thread(s)"
            found[name, decoding] = _ct2_translate(translator, beam)
            sizes[name] = _megabytes(directory)
            artifacts[name, decoding] = ("ctranslate2", directory, beam)
    return found


def export_litert(args, directory: Path, beam: int, stopping: str, weights: str) -> None:
    """A LiteRT file of the measured model with the SavedModels' settings, written in a
    process of its own (`write_litert`): a conversion holds several copies of the weights
    (gigabytes at OPUS-MT's size), which that process gives back when it ends."""
    call = (
        f"write_litert({str(args.model_dir)!r}, {args.model!r}, {str(directory)!r}, {beam}, "
        f"{stopping!r}, {args.length_penalty!r}, {weights!r})"
    )
    command = [sys.executable, "-c", f"from benchmarks.serve import write_litert; {call}"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{call} failed:\n{done.stderr[-3000:]}")


def write_litert(model_dir, model_file, directory, beam, stopping, length_penalty, weights):
    """`export_litert`'s child: the run directory's model, the LiteRT file of this search."""
    _, vocabularies, model = RunDirectory(Path(model_dir)).load_trained(model_file)
    export.export(
        model,
        directory,
        format="litert",
        vocabularies=vocabularies,
        decoding=DecodingSettings(beam_size=beam, stopping=stopping, length_penalty=length_penalty),
        quantize=None if weights == "float32" else weights,
    )


def _megabytes(folder: Path) -> float:
    """The size of the files under `folder`, in MiB."""
    return round(sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file()) / 2**20, 1)


def _saved_model_translate(serve):
    def translate(sentences):
        out = serve(text=tf.constant(sentences))["translation"].numpy()
        return [t.decode("utf-8") for t in out]

    return translate


def _litert_translate(translator):  # the search is the file's own
    def translate(sentences):
        return [h[0].text for h in translator.translate(sentences)]

    return translate


def _ct2_translate(translator, beam):
    def translate(sentences):
        return [h[0].text for h in translator.translate(sentences, beam_size=beam)]

    return translate


def peak_rss(kind: str, path: Path, beam: int, sentences: list[str], args) -> float | None:
    """The peak RSS (MiB) of a new process serving one artifact alone (`benchmarks.peak_rss`)
    on `sentences`, with the threads this run gives its engine; None (and its error on
    stderr) where that process fails."""
    threads = {
        "saved_model": args.intra_op_threads or 0,
        "litert": args.litert_threads,
        "ctranslate2": args.ct2_threads,
    }[kind]
    command = [sys.executable, "-m", "benchmarks.peak_rss", kind, str(path)]
    command += ["--beam", str(beam), "--threads", str(threads)]
    done = subprocess.run(
        command, input=json.dumps(sentences), capture_output=True, text=True, cwd=ROOT
    )
    if done.returncode != 0:  # the timings stand; the table shows "-" for this one
        print(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_rss_mb"]


def latency_fit(milliseconds, pieces) -> tuple[float, float]:
    """`(fixed, per_piece)` of the least-squares line `milliseconds = fixed + per_piece *
    pieces` over single requests (one latency and one output length each)."""
    if len(set(pieces)) < 2:
        raise ValueError("a latency fit needs requests of at least two output lengths")
    per_piece, fixed = np.polyfit(np.asarray(pieces, float), np.asarray(milliseconds, float), 1)
    return float(fixed), float(per_piece)


def run(args) -> dict:
    run_dir = RunDirectory(args.model_dir)
    _, vocabularies, model = run_dir.load_trained(args.model)
    test = corpus.read_tsv(TEST, "en", "es")
    sources, references = list(test.sources), list(test.targets)
    if args.sentences:  # the first N verses (a large model's passes take long)
        sources, references = sources[: args.sentences], references[: args.sentences]
    single = sources[: args.single]
    with tempfile.TemporaryDirectory() as tmp:
        sizes, artifacts = {}, {}
        found = engines(model, vocabularies, Path(tmp), args, sizes, artifacts)
        batched = {key: [] for key in found}
        latencies = {key: [] for key in found}
        hypotheses, single_out = {}, {}
        for translate in found.values():  # warm-up: XLA compiles each shape bucket here
            for start in range(0, len(sources), 32):
                translate(sources[start : start + 32])
            for sentence in single:
                translate([sentence])
        for _ in range(args.repeats):
            for key, translate in found.items():
                started, out = time.perf_counter(), []
                for start in range(0, len(sources), 32):
                    out += translate(sources[start : start + 32])
                batched[key].append(1e3 * (time.perf_counter() - started) / len(sources))
                hypotheses[key] = out
                single_out[key] = []
                for sentence in single:
                    started = time.perf_counter()
                    single_out[key] += translate([sentence])
                    latencies[key].append(1e3 * (time.perf_counter() - started))
        rss = {key: peak_rss(*artifacts[key], single, args) for key in artifacts if args.rss}
    rows = []
    for key in found:
        name, decoding = key
        pieces = [len(p) + 1 for p in vocabularies.target.tokenize(single_out[key])]
        fastest = np.min(np.reshape(latencies[key], (args.repeats, len(single))), axis=0)
        fixed, per_piece = latency_fit(fastest, pieces)
        rows.append(
            dict(
                engine=name,
                decoding=decoding,
                batch32_ms_per_sentence=round(statistics.median(batched[key]), 2),
                single_p50_ms=round(float(np.percentile(latencies[key], 50)), 2),
                single_p95_ms=round(float(np.percentile(latencies[key], 95)), 2),
                single_fixed_ms=round(fixed, 2),
                single_ms_per_piece=round(per_piece, 3),
                test_bleu=round(evaluation.score(hypotheses[key], references)["bleu"], 2),
                size_mb=sizes[name],
                peak_rss_mb=rss.get(key),
            )
        )
    return dict(
        impl="keras_transformer",
        mode="serve",
        model_dir=str(args.model_dir),
        model=args.model,
        preset=model.config.to_dict(),
        sentences=len(sources),
        single_requests=len(single) * args.repeats,
        repeats=args.repeats,
        length_penalty=args.length_penalty,
        ct2_threads=args.ct2_threads,
        fast=args.fast,
        stopping=args.stopping,
        quantize=args.quantize,
        intra_op_threads=args.intra_op_threads,
        litert=args.litert,
        litert_threads=args.litert_threads,
        rows=rows,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )


def table(result: dict) -> str:
    lines = [
        "| engine | decoding | batches of 32, ms a sentence | one at a time, p50 / p95 ms "
        "| one at a time, ms: fixed + a piece | test BLEU | MiB on disk | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['engine']} | {row['decoding']} | {row['batch32_ms_per_sentence']} | "
            f"{row['single_p50_ms']} / {row['single_p95_ms']} | "
            f"{row['single_fixed_ms']} + {row['single_ms_per_piece']} | {row['test_bleu']} | "
            f"{row['size_mb']} | {row['peak_rss_mb'] or '-'} |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", required=True, type=Path)
    parser.add_argument("--model", default=MODEL, help="e.g. model.averaged.keras")
    parser.add_argument("--length-penalty", type=float, default=0.6)
    parser.add_argument("--single", type=int, default=100, help="verses sent one at a time")
    parser.add_argument(
        "--sentences", type=int, help="translate only the first N test verses in batches"
    )
    parser.add_argument(
        "--signatures",
        nargs="+",
        choices=["serving_default", "serving_xla"],
        default=["serving_default", "serving_xla"],
        help="the SavedModel signatures measured",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ct2-threads", type=int, default=1)
    parser.add_argument(
        "--fast",
        choices=["on", "off"],
        default="on",
        help="trace the SavedModels with keras_transformer.fast (trainers.export's default)",
    )
    parser.add_argument(
        "--ct2-types", nargs="+", default=["float32", "int8"], help="CTranslate2 weight types"
    )
    parser.add_argument(
        "--stopping",
        nargs="+",
        choices=STOPPING,
        default=list(STOPPING),
        help="beam search's stopping rules for the SavedModels (trainers.export --stopping)",
    )
    parser.add_argument(
        "--quantize",
        nargs="+",
        choices=["float32", *export.precision.QUANTIZE_MODES],
        default=["float32"],
        help="the SavedModels' weight types (trainers.export --quantize; float32: none)",
    )
    parser.add_argument(
        "--litert",
        nargs="*",
        choices=["float32", "int8", "int4", "float16"],
        default=[],
        help="also the LiteRT files of trainers.export --format litert, of these weights",
    )
    parser.add_argument("--litert-threads", type=int, default=1, help="LiteRT's threads")
    parser.add_argument(
        "--rss",
        action="store_true",
        help="also each artifact's peak RSS, served alone in a new process (benchmarks."
        "peak_rss: the SavedModels' serving_xla, the CTranslate2 and LiteRT files)",
    )
    parser.add_argument(
        "--intra-op-threads",
        type=int,
        help="TensorFlow's threads within an op (default: TensorFlow's, every core)",
    )
    args = parser.parse_args(argv)
    args.fast = args.fast == "on"
    if args.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    result = run(args)
    print(table(result))
    print(json.dumps(result))


if __name__ == "__main__":
    main()

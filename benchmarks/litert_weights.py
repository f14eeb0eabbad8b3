"""The LiteRT file at each weight type: its size and the test BLEU of its translations.

    python -m benchmarks.litert_weights --model-dir runs/demo --model model.averaged.keras \
        --length-penalty 1.0

Writes the run directory's model as `trainers.export --format litert` does, once a weight
type (float32; int8 with the tied table stored twice, the default, and once; int4, by
ai-edge-quantizer; float16 with --weights) and a search (greedy; beam 4 with the early
stopping of `trainers.export`), each file converted in a process of its own (a conversion
holds several copies of the weights). Each file translates the test split (1,020 verses) in
batches of 32 (`kt.serving.LiteRTTranslator`), scored with sacrebleu as trainers.evaluate
scores. Prints a Markdown table (size in bytes and against float32's; BLEU and against
float32's), then one JSON object as the last stdout line. No timing: the numbers hold on a
loaded machine (speed: `benchmarks.serve --litert`, on a quiet one).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from keras_transformer import corpus, evaluation  # noqa: E402
from keras_transformer.serving import LiteRTTranslator  # noqa: E402
from trainers.run_dir import MODEL  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TEST = ROOT / "data" / "bible-en-es" / "test.tsv.xz"
# name -> (quantize, int8_table): the weight types measured.
WEIGHTS = {
    "float32": (None, None),
    "int8": ("int8", None),
    "int8 once": ("int8", "once"),
    "int4": ("int4", None),
    "float16": ("float16", None),
}
SEARCHES = {"greedy": 1, "beam 4": 4}


def write(model_dir, model_file, directory, beam, length_penalty, quantize, int8_table):
    """The child's work: the run directory's model as a LiteRT file of this search."""
    from keras_transformer import export
    from keras_transformer.decoding import DecodingSettings
    from trainers.run_dir import RunDirectory

    _, vocabularies, model = RunDirectory(Path(model_dir)).load_trained(model_file)
    options = {"int8_table": int8_table} if int8_table else {}
    export.export(
        model,
        directory,
        format="litert",
        vocabularies=vocabularies,
        decoding=DecodingSettings(beam_size=beam, length_penalty=length_penalty),
        quantize=quantize,
        **options,
    )


def written(args, directory: Path, beam: int, weights: str) -> int:
    """Writes `directory` in a process of its own; its model file's bytes."""
    quantize, int8_table = WEIGHTS[weights]
    call = (
        f"write({str(args.model_dir)!r}, {args.model!r}, {str(directory)!r}, {beam}, "
        f"{args.length_penalty!r}, {quantize!r}, {int8_table!r})"
    )
    command = [sys.executable, "-c", f"from benchmarks.litert_weights import write; {call}"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{call} failed:\n{done.stderr[-3000:]}")
    return (directory / "model.tflite").stat().st_size


def translated(directory: Path, sources: list[str], batch: int = 32) -> list[str]:
    """The file's translations of `sources`, `batch` sentences a request."""
    translator = LiteRTTranslator(directory)
    found = []
    for start in range(0, len(sources), batch):
        found += [h[0].text for h in translator.translate(sources[start : start + batch])]
    return found


def run(args) -> dict:
    test = corpus.read_tsv(TEST, "en", "es")
    sources = list(test.sources)[: args.sentences]
    references = list(test.targets)[: args.sentences]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for search in args.searches:
            beam = SEARCHES[search]
            for weights in args.weights:
                directory = Path(folder) / f"{weights.replace(' ', '_')}_beam{beam}"
                size = written(args, directory, beam, weights)
                hypotheses = translated(directory, sources)
                bleu = evaluation.score(hypotheses, references)["bleu"]
                rows.append(dict(weights=weights, decoding=search, bytes=size, test_bleu=bleu))
    for row in rows:
        full = next(
            r for r in rows if r["decoding"] == row["decoding"] and r["weights"] == "float32"
        )
        row["of_float32"] = round(row["bytes"] / full["bytes"], 3)
        row["bleu_against_float32"] = round(row["test_bleu"] - full["test_bleu"], 2)
        row["test_bleu"] = round(row["test_bleu"], 2)
    return dict(
        mode="litert_weights",
        model_dir=str(args.model_dir),
        model=args.model,
        length_penalty=args.length_penalty,
        sentences=len(sources),
        rows=rows,
    )


def table(result: dict) -> str:
    lines = [
        "| weights | decoding | bytes | of float32 | test BLEU | against float32 |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['weights']} | {row['decoding']} | {row['bytes']:,} | {row['of_float32']:.1%} "
            f"| {row['test_bleu']} | {row['bleu_against_float32']:+.2f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--model", default=MODEL, help="model file in the model directory")
    parser.add_argument("--length-penalty", type=float, default=0.6)
    parser.add_argument(
        "--weights",
        nargs="+",
        choices=list(WEIGHTS),
        default=["float32", "int8", "int8 once", "int4"],
        help="the weight types measured (float32 is always one)",
    )
    parser.add_argument("--searches", nargs="+", choices=list(SEARCHES), default=list(SEARCHES))
    parser.add_argument("--sentences", type=int, help="only the first N test verses")
    args = parser.parse_args(argv)
    args.weights = ["float32", *(w for w in args.weights if w != "float32")]
    result = run(args)
    print(table(result))
    print(json.dumps(result))


if __name__ == "__main__":
    main()

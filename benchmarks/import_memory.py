"""Peak memory of importing a checkpoint, against the size of its weights.

    python -m benchmarks.nllb_shaped --out /tmp/nllb-shaped
    python -m benchmarks.import_memory /tmp/nllb-shaped
    python -m benchmarks.import_memory /tmp/nllb-shaped --task
    python -m benchmarks.import_memory /tmp/nllb-shaped --program --model-dir /tmp/nllb-run

Runs in a fresh process: `kt.pretrained.load(PATH)` (the library's reader: the checkpoint
read, checked and assigned to a built model), with `--task`
`kt.models.TransformerSeq2SeqLM.from_preset(PATH)` (the same, made a task), or with
`--program` the whole
`trainers.import_pretrained` (which also writes the model directory: model.keras, its kept
copy, the preset and the vocabulary). Prints one JSON line: the weights' bytes (the
checkpoint's safetensors files), the process's peak resident memory (`ru_maxrss`), its
resident memory after importing TensorFlow, Keras and the library (before reading), the
ratio peak / weights, and the seconds taken.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path


def rss_bytes() -> int:
    """The process's resident memory now (Linux: /proc/self/statm)."""
    import os

    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.import_memory", description=__doc__.split("\n")[0]
    )
    parser.add_argument("path", type=Path, help="a checkpoint directory")
    parser.add_argument(
        "--program", action="store_true", help="run trainers.import_pretrained as a whole"
    )
    parser.add_argument(
        "--task", action="store_true", help="TransformerSeq2SeqLM.from_preset(path) instead"
    )
    parser.add_argument("--model-dir", type=Path, help="--program: the new model directory")
    args = parser.parse_args(argv)
    if args.program and args.model_dir is None:
        parser.error("--program needs --model-dir")
    if args.program and args.task:
        parser.error("--program and --task: choose one")

    import keras_transformer as kt
    from keras_transformer import pretrained  # noqa: F401  (TensorFlow and its readers)

    baseline = rss_bytes()
    weights = sum(p.stat().st_size for p in args.path.glob("*.safetensors"))
    start = time.perf_counter()
    if args.program:
        from trainers.import_pretrained import import_pretrained

        import_pretrained(args.path, args.model_dir)
        parameters = None
        what = "trainers.import_pretrained"
    elif args.task:
        task = kt.models.TransformerSeq2SeqLM.from_preset(args.path)
        parameters = task.count_params()
        what = "TransformerSeq2SeqLM.from_preset"
    else:
        model, _ = kt.pretrained.load(args.path)
        parameters = model.count_params()
        what = "kt.pretrained.load"
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    print(
        json.dumps(
            {
                "what": what,
                "path": str(args.path),
                "parameters": parameters,
                "weights_mb": round(weights / 2**20),
                "baseline_rss_mb": round(baseline / 2**20),
                "peak_rss_mb": round(peak / 2**20),
                "peak_over_weights": round(peak / weights, 2),
                "seconds": round(seconds, 1),
            }
        )
    )


if __name__ == "__main__":
    main()

"""The trainer at corpus scale: memory and time to the first step do not grow with the corpus.

    python -m benchmarks.corpus make --pairs 4500000 --out /tmp/corpus-4.5M.tsv
    python -m benchmarks.corpus train --corpus /tmp/corpus-4.5M.tsv
    python -m benchmarks.corpus pipeline --corpus /tmp/corpus-4.5M.tsv

`make` writes a TSV the size of WMT14 English-German (4.5M pairs, about 1.8 GB) from the
bundled verses, reshuffled and repeated. `train` runs the trainer on it as a user would (the
demo configuration, 20 steps, one a line) in a child process and reports the child's peak RSS
and the seconds until its first step ended. `pipeline` times the input pipeline alone, read
from the file as training reads it, with `base`'s batches (25,000 tokens). The last stdout line
is one JSON object, as the other benchmarks print.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "data" / "bible-en-es" / "train.tsv.xz"


def make(args) -> dict:
    """A TSV of `args.pairs` pairs: the bundled verses shuffled, pass after pass."""
    import lzma

    with lzma.open(BUNDLED, "rt", encoding="utf-8") as file:
        header, *rows = file.read().splitlines()
    rng = random.Random(args.seed)
    started, written = time.perf_counter(), 0
    with open(args.out, "w", encoding="utf-8") as out:
        out.write(header + "\n")
        while written < args.pairs:
            rng.shuffle(rows)
            chunk = rows[: args.pairs - written]
            out.write("\n".join(chunk) + "\n")
            written += len(chunk)
    return dict(
        mode="make",
        corpus=str(args.out),
        pairs=written,
        megabytes=round(os.path.getsize(args.out) / 2**20, 1),
        seconds=round(time.perf_counter() - started, 1),
    )


def train(args) -> dict:
    """The trainer on the corpus (demo configuration, `--steps` steps) in a child process."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            sys.executable,
            "-m",
            "trainers.train",
            "--config",
            str(args.config),
            "--model-dir",
            f"{tmp}/run",
            "--verbose",
            "2",
            "--set",
            f"data.train={args.corpus}",
            "--set",
            f"training.steps={args.steps}",
            "--set",
            "training.steps_per_epoch=1",
            "--set",
            f"training.keep_checkpoints={args.steps}",
            "--set",
            "training.bleu_max_sentences=1",
            *[item for override in args.set for item in ("--set", override)],
        ]
        started = time.perf_counter()
        marks, lines, epochs = {}, [], []
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as child:
            for line in child.stdout:
                lines.append(line)
                seconds = round(time.perf_counter() - started, 1)
                for name, pattern in PHASES.items():
                    if name not in marks and re.search(pattern, line):
                        marks[name] = seconds
                if re.search(PHASES["first_step"], line):  # an epoch's line (--verbose 2)
                    epochs.append([seconds, line.strip()[:200]])
        if child.returncode:
            sys.stdout.write("".join(lines[-40:]))
            raise SystemExit(f"the trainer failed ({child.returncode})")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = json.loads(next(x for x in lines if x.startswith("summary: "))[len("summary: ") :])
    return dict(
        mode="train",
        corpus=str(args.corpus),
        pairs=summary["data"]["pairs"],
        steps=summary["steps"],
        peak_rss_mb=round(usage.ru_maxrss / 1024),
        seconds_to=marks,
        # Each epoch's end (seconds from the start) and Keras's line for it (its time and
        # time a step, before the checkpoint is written): later epochs show the steady state.
        epochs=epochs,
        seconds_total=round(time.perf_counter() - started, 1),
    )


# When each phase of the trainer's output was seen, in seconds from its start.
PHASES = {
    "scanned": r"^training pairs: ",
    "vocabulary_start": r"^learning a ",
    "length_report_start": r"^counting ",
    "vocabulary": r"^over-long pairs",  # printed after the vocabulary and the length report
    "first_step": r"^\d+/\d+ - \d+s",  # the first epoch (one step, or one update) ended
}


def pipeline(args) -> dict:
    """Target tokens a second that the input pipeline delivers, alone, reading the file."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np

    import keras_transformer as kt

    corpus = kt.corpus.tsv_files(args.corpus, "en", "es")
    sample = corpus.scan(sample_size=20_000, seed=0, limit=20_000).sample
    vocabularies = kt.text.Vocabularies.train(sample.sources, sample.targets, 8000)
    dataset = kt.data.make_dataset(
        corpus.to_dataset(),
        vocabularies,
        max_length=256,
        tokens_per_batch=args.tokens_per_batch,
        seed=0,
    )
    iterator = iter(dataset)
    times, tokens = [], []
    for step in range(args.warmup + args.batches):
        started = time.perf_counter()
        _, labels = next(iterator)
        if step >= args.warmup:
            times.append(time.perf_counter() - started)
            tokens.append(int(np.count_nonzero(labels.numpy())))
    return dict(
        mode="pipeline",
        corpus=str(args.corpus),
        tokens_per_batch=args.tokens_per_batch,
        step_ms_median=1e3 * statistics.median(times),
        tokens_per_s=sum(tokens) / sum(times),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("make", help="write a corpus of --pairs pairs")
    made.add_argument("--pairs", type=int, default=4_500_000)
    made.add_argument("--out", type=Path, required=True)
    made.add_argument("--seed", type=int, default=0)
    trained = commands.add_parser("train", help="the trainer's first steps on a corpus")
    trained.add_argument("--corpus", type=Path, required=True)
    trained.add_argument("--config", type=Path, default=ROOT / "trainers/configs/demo.yaml")
    trained.add_argument("--steps", type=int, default=20)
    trained.add_argument(
        "--set", action="append", default=[], help="another config override for the trainer"
    )
    piped = commands.add_parser("pipeline", help="the input pipeline alone on a corpus")
    piped.add_argument("--corpus", type=Path, required=True)
    piped.add_argument("--tokens-per-batch", type=int, default=25_000)
    piped.add_argument("--batches", type=int, default=50)
    piped.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    result = {"make": make, "train": train, "pipeline": pipeline}[args.command](args)
    print(json.dumps({"impl": "keras_transformer", **result}))


if __name__ == "__main__":
    main()

"""The keras-hub task against the paths it wraps, in alternating runs in one process.

    python -m benchmarks.task --mode generate --runs 5   # task.generate vs Translator
    python -m benchmarks.task --mode fit --runs 5        # task.fit vs Transformer.fit

Both sides start from the same weights (the task's backbone takes the model's), decode the
same sentences (the bundled corpus's test verses) with the same settings, or train on the
same `kt.data.make_dataset` batches (the task's preprocessor passes ids through); each is
traced and run once before timing. The runs alternate A, B, A, B... so that the machine's
drift falls on both. Each run prints one JSON line; the last line is the summary: each
side's median tokens/s (generated tokens for generate, non-padding target tokens for fit)
and the ratio task / today (1.0 is the same speed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_transformer as kt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "bible-en-es"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("generate", "fit"), required=True)
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each side")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--sentences", type=int, default=256, help="generate: test verses")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=30, help="fit: steps a run")
    parser.add_argument("--tokens-per-batch", type=int, default=2048)
    return parser.parse_args(argv)


def setup(preset: str):
    """A model of `preset` on the corpus's vocabulary, and the task of the same weights."""
    train = kt.corpus.read_tsv(DATA / "train.tsv.xz", "en", "es")
    sample = train.take(6000)
    vocabularies = kt.text.Vocabularies.train(sample.sources, sample.targets, 2000)
    keras.utils.set_random_seed(0)
    config = kt.TransformerConfig.preset(
        preset, vocab_size=vocabularies.target.vocabulary_size(), max_length=128
    )
    model = kt.build_transformer(config)
    task = kt.models.TransformerSeq2SeqLM.from_transformer(model, vocabularies)
    return train, vocabularies, model, task


def alternate(sides: dict, runs: int) -> dict:
    """Runs each side once untimed, then `runs` timed runs of each, alternating; returns
    side -> the tokens/s of each run."""
    for run in sides.values():
        run()
    speeds = {name: [] for name in sides}
    for index in range(runs):
        for name, run in sides.items():
            started = time.perf_counter()
            tokens = run()
            seconds = time.perf_counter() - started
            speeds[name].append(tokens / seconds)
            print(json.dumps({"run": index, "side": name, "tokens": tokens, "s": seconds}))
    return speeds


def generate_sides(args, vocabularies, model, task):
    test = kt.corpus.read_tsv(DATA / "test.tsv.xz", "en", "es").take(args.sentences)
    sentences = list(test.sources)
    settings = kt.decoding.DecodingSettings(beam_size=args.beam_size)
    task.compile(sampler=settings)
    translator = kt.evaluation.Translator(model, vocabularies, decoding=settings)

    def tokens(texts):
        return sum(len(vocabularies.target.tokenize(t)) + 1 for t in texts)  # with EOS

    return {
        "today": lambda: tokens(translator.translate(sentences)),
        "task": lambda: tokens(task.generate(sentences)),
    }


def fit_sides(args, train, vocabularies, model, task):
    batches = kt.data.make_dataset(
        train.to_dataset(),
        vocabularies,
        max_length=model.config.max_length,
        tokens_per_batch=args.tokens_per_batch,
        seed=0,
    )
    # The same batches for both: the first `steps`, held in memory.
    held = list(batches.take(args.steps).as_numpy_iterator())
    tokens = int(sum(np.count_nonzero(labels) for _, labels in held))

    def dataset():
        import tensorflow as tf

        inputs = tf.data.Dataset.from_generator(
            lambda: iter(held),
            output_signature=batches.element_spec,
        )
        return inputs

    def compile_args():
        schedule = kt.WarmupSchedule(model.config.d_model, warmup_steps=4000)
        optimizer = keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
        return dict(
            optimizer=optimizer,
            loss=kt.losses.LabelSmoothedCrossEntropy(0.1),
            metrics=[kt.metrics.MaskedAccuracy()],
            jit_compile=False,
        )

    model.compile(**compile_args())
    task.compile(**compile_args())

    def fit(which):
        which.fit(dataset(), epochs=1, verbose=0)
        return tokens

    return {"today": lambda: fit(model), "task": lambda: fit(task)}


def main(argv=None) -> dict:
    args = parse_args(argv)
    train, vocabularies, model, task = setup(args.preset)
    if args.mode == "generate":
        sides = generate_sides(args, vocabularies, model, task)
    else:
        sides = fit_sides(args, train, vocabularies, model, task)
    speeds = alternate(sides, args.runs)
    medians = {name: statistics.median(values) for name, values in speeds.items()}
    summary = {
        "mode": args.mode,
        "preset": args.preset,
        "runs": args.runs,
        "today_tokens_per_s": round(medians["today"], 1),
        "task_tokens_per_s": round(medians["task"], 1),
        "ratio_task_over_today": round(medians["task"] / medians["today"], 3),
        "today_range": [round(min(speeds["today"]), 1), round(max(speeds["today"]), 1)],
        "task_range": [round(min(speeds["task"]), 1), round(max(speeds["task"]), 1)],
    }
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()

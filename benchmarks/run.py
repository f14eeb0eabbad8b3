"""Benchmarks of this implementation, printing the peer benchmark's JSON schema.

    python -m benchmarks.run --preset small --mode train --batch-size 32 [--fast off]
    python -m benchmarks.run --preset small --mode decode --cache on --tgt-len 64
    python -m benchmarks.run --preset small --mode decode --beam-size 4 --tgt-len 64
    python -m benchmarks.run --preset small --mode decode --tgt-len 64 --shards 2
    python -m benchmarks.run --mode pipeline       # tokenize + bucket + batch, alone
    python -m benchmarks.run --mode serve --saved-model saved_models/demo

Same flags and synthetic data as the keras-hub peer (`--preset --mode --batch-size --src-len
--tgt-len --steps --warmup --jit-compile --cache`), so a comparison script can run both
alternately. The last stdout line is one JSON object: impl, preset, mode, params, batch_size,
src_len, tgt_len, jit_compile, cache, step_ms_median, step_ms_min, tokens_per_s,
sentences_per_s, peak_rss_mb (plus mode-specific fields). Train tokens_per_s counts
non-padding target tokens; decode counts generated tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from trainers import startup_logs  # noqa: E402

startup_logs.install()  # before TensorFlow loads, whose first lines ignore TF_CPP_MIN_LOG_LEVEL

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_transformer as kt  # noqa: E402
from benchmarks import synthetic  # noqa: E402
from benchmarks.synthetic import PRESET_VOCAB, add_peer_flags, train_flops_per_token  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def synthetic_batch(rng, vocab, batch, src_len, tgt_len):
    """The peer's batches (`benchmarks.synthetic.synthetic_batch`) as `(source ids, target
    ids, labels)`."""
    inputs, labels = synthetic.synthetic_batch(rng, vocab, batch, src_len, tgt_len)
    return inputs["source_ids"], inputs["target_ids"], labels


def time_steps(fn, warmup: int, steps: int) -> list[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


def model_for(args, **overrides):
    """The preset with the peer's vocabulary, room for the lengths, and `overrides`."""
    config = dict(
        vocab_size=PRESET_VOCAB[args.preset],
        max_length=max(args.src_len, args.tgt_len) * 2,
        dtype=args.dtype,
    )
    return kt.build_transformer(kt.TransformerConfig.preset(args.preset, **config | overrides))


def compile_for_training(model, args):
    """Adam and the label-smoothed loss, as the peer compiles its model."""
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4, beta_2=0.98, epsilon=1e-9),
        loss=kt.losses.LabelSmoothedCrossEntropy(),
        jit_compile=args.jit_compile == "on",
    )


def decoder_for(model, args):
    """`decode(source_ids) -> (ids, scores)`: greedy (`--beam-size 1`) or beam search of
    exactly `tgt_len` tokens a sentence, as the peer decodes (the length limit forces EOS at
    the last position, and a random model almost never ends earlier)."""
    settings = dict(
        max_extra_length=args.tgt_len, max_length=args.tgt_len, use_cache=args.cache == "on"
    )
    if args.beam_size == 1:

        def search(s):
            return kt.decoding.greedy_search(model, s, **settings)
    else:

        def search(s):
            return kt.decoding.beam_search(model, s, beam_size=args.beam_size, **settings)

    if args.shards > 1:
        return kt.decoding.parallel_search(search, shards=args.shards)
    return tf.function(search, jit_compile=args.jit_compile == "on")


def bench_train(args, result):
    rng = np.random.default_rng(args.seed)
    model = model_for(args)
    compile_for_training(model, args)
    vocab = model.config.target_vocab
    batches = [
        synthetic_batch(rng, vocab, args.batch_size, args.src_len, args.tgt_len) for _ in range(8)
    ]
    counter = iter(range(10**9))

    def step():
        src, tin, tout = batches[next(counter) % len(batches)]
        model.train_on_batch({"source_ids": src, "target_ids": tin}, tout)

    times = time_steps(step, args.warmup, args.steps)
    tokens = statistics.mean(float((b[2] != 0).sum()) for b in batches)
    median = statistics.median(times)
    flops = train_flops_per_token(model.config, args.src_len, args.tgt_len)
    result.update(
        params=int(model.count_params()),
        step_ms_median=1e3 * median,
        step_ms_min=1e3 * min(times),
        tokens_per_s=tokens / median,
        sentences_per_s=None,
        cache=None,
        model_gflops_per_s=tokens / median * flops / 1e9,
    )


def bench_decode(args, result):
    rng = np.random.default_rng(args.seed)
    model = model_for(args)
    src, _, _ = synthetic_batch(
        rng, model.config.target_vocab, args.batch_size, args.src_len, args.tgt_len
    )
    src = tf.constant(src)
    decode = decoder_for(model, args)
    times = time_steps(lambda: decode(src)[0].numpy(), 1, max(3, args.steps // 5))
    median = statistics.median(times)
    result.update(
        params=int(model.count_params()),
        cache=args.cache == "on",
        beam_size=args.beam_size,
        shards=args.shards,
        step_ms_median=1e3 * median,
        step_ms_min=1e3 * min(times),
        tokens_per_s=args.batch_size * args.tgt_len / median,
        sentences_per_s=args.batch_size / median,
    )


def bench_pipeline(args, result):
    """Tokenize, filter, bucket and batch the bundled training split, alone, as training
    would consume it (target tokens delivered per second)."""
    corpus = kt.corpus.read_tsv(ROOT / "data" / "bible-en-es" / "train.tsv.xz", "en", "es")
    vocabularies = kt.text.Vocabularies.train(
        corpus.sources[:5000], corpus.targets[:5000], 8000, max_sentences=10_000
    )
    dataset = kt.data.make_dataset(
        corpus.to_dataset(),
        vocabularies,
        max_length=128,
        tokens_per_batch=args.batch_size * args.tgt_len,
        seed=args.seed,
    )
    iterator = iter(dataset)
    tokens = []

    def step():
        _, labels = next(iterator)
        tokens.append(int(np.count_nonzero(labels.numpy())))

    times = time_steps(step, args.warmup, args.steps)
    median = statistics.median(times)
    result.update(
        params=None,
        cache=None,
        step_ms_median=1e3 * median,
        step_ms_min=1e3 * min(times),
        tokens_per_s=sum(tokens[args.warmup :]) / sum(times),
        sentences_per_s=None,
    )


def bench_serve(args, result):
    """Latency of the exported SavedModel: one sentence, and a batch of 32."""
    import tensorflow_text  # noqa: F401

    path = Path(args.saved_model)
    if not (path / "saved_model.pb").exists():
        path = max((p for p in path.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    sentences = list(
        kt.corpus.read_tsv(ROOT / "data" / "bible-en-es" / "test.tsv.xz", "en", "es").sources
    )
    rng = np.random.default_rng(args.seed)
    latencies = {}
    for batch in (1, 32):

        def call(batch=batch):
            chosen = [sentences[i] for i in rng.integers(0, len(sentences), batch)]
            serve(text=tf.constant(chosen))["translation"].numpy()

        times = time_steps(call, args.warmup, args.steps)
        latencies[batch] = {
            "p50_ms": 1e3 * float(np.percentile(times, 50)),
            "p95_ms": 1e3 * float(np.percentile(times, 95)),
        }
    result.update(
        params=None,
        cache=True,
        step_ms_median=latencies[32]["p50_ms"],
        step_ms_min=None,
        tokens_per_s=None,
        sentences_per_s=32 / (latencies[32]["p50_ms"] / 1e3),
        latency_one=latencies[1],
        latency_batch32=latencies[32],
        saved_model=str(path),
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_peer_flags(parser, PRESET_VOCAB, ["train", "decode", "pipeline", "serve"])
    parser.add_argument("--beam-size", type=int, default=1)
    parser.add_argument(
        "--shards",
        type=int,
        default=1,
        help="--mode decode: slices of the batch decoded at once, each by its own XLA program "
        "(keras_transformer.decoding.parallel_search; needs --jit-compile on)",
    )
    parser.add_argument("--dtype", default=None, help="e.g. mixed_bfloat16 (default float32)")
    parser.add_argument(
        "--fast",
        default="on",
        choices=["on", "off"],
        help="the speed switch, keras_transformer.fast (off: the stock path)",
    )
    parser.add_argument("--saved-model", default="saved_models/demo", help="--mode serve")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.shards < 1:
        parser.error(f"--shards {args.shards}: must be >= 1")
    if args.shards > 1 and args.jit_compile == "off":
        parser.error("--shards > 1 runs each slice under XLA; it needs --jit-compile on")
    keras.utils.set_random_seed(args.seed)
    if args.fast == "on":
        kt.fast.enable()
    result = dict(
        impl="keras_transformer",
        preset=args.preset,
        mode=args.mode,
        batch_size=args.batch_size,
        src_len=args.src_len,
        tgt_len=args.tgt_len,
        jit_compile=args.jit_compile == "on",
        dtype=args.dtype or "float32",
        fast=args.fast == "on",
    )
    {
        "train": bench_train,
        "decode": bench_decode,
        "pipeline": bench_pipeline,
        "serve": bench_serve,
    }[args.mode](args, result)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


if __name__ == "__main__":
    main()

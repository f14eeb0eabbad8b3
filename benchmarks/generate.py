"""Generation speed of a decoder-only language model (`kt.decoding.generate`), with the
key/value cache or recomputing the whole sequence at every step: one JSON line in the peer's
schema (`benchmarks.peer`), for `benchmarks.compare`.

    python -m benchmarks.compare --repeats 5 \\
        --a "python -m benchmarks.generate --batch-size 32 --cache on" \\
        --b "python -m benchmarks.generate --batch-size 32 --cache off"

The model is examples/language_model.py's default (4,000 pieces, d_model 128, 3 pre-norm
layers, 4 heads, d_ff 512, learned positions up to 128), with random weights. The prompts
are of different lengths, `--src-len` tokens at most (the batch's rows from half of it up to
all of it), in one batch; each generates exactly `--tgt-len` tokens (no stop token, so both
paths do the same work). The loop is compiled with XLA: `tf.function(jit_compile=True)` on
TensorFlow, `jax.jit` on JAX. `tokens_per_s` counts generated tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_transformer as kt  # noqa: E402
from benchmarks.synthetic import peer_record, timed  # noqa: E402

BACKEND = keras.config.backend()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="example", choices=["example"])
    parser.add_argument("--mode", default="greedy", choices=["greedy", "sample", "beam"])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--src-len", type=int, default=16, help="the longest prompt")
    parser.add_argument("--tgt-len", type=int, default=64, help="tokens generated a prompt")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--cache", default="on", choices=["on", "off"])
    parser.add_argument("--jit-compile", default="on", choices=["on"])
    parser.add_argument("--steps", type=int, default=5, help="timed generations")
    parser.add_argument("--warmup", type=int, default=1, help="untimed (compilation)")
    return parser.parse_args(argv)


def language_model(vocab_size=4000, max_length=128, d_model=128, layers=3, heads=4, d_ff=512):
    """examples/language_model.py's model, without its TensorFlow data pipeline."""
    ids = keras.Input((None,), dtype="int32")
    embedding = kt.layers.TransformerEmbedding(
        vocab_size, d_model, max_length=max_length, positional="learned"
    )
    decoder = kt.layers.Decoder(layers, heads, d_ff, activation="gelu", norm_first=True)
    hidden = decoder(embedding(ids), padding_mask=kt.ops.padding_mask(ids))
    return keras.Model(ids, embedding(hidden, reverse=True))


def main(argv=None) -> int:
    args = parse_args(argv)
    keras.utils.set_random_seed(0)
    model = language_model()
    rng = np.random.default_rng(0)
    lengths = rng.integers(max(args.src_len // 2, 1), args.src_len + 1, args.batch_size)
    prompts = np.zeros((args.batch_size, args.src_len), "int32")
    for row, length in enumerate(lengths):
        prompts[row, :length] = [2, *rng.integers(4, 4000, length - 1)]
    settings = {
        "max_new_tokens": args.tgt_len,
        "method": args.mode,
        "stop_ids": (),
        "beam_size": args.beam_size,
        "seed": 0,
        "use_cache": args.cache == "on",
    }
    if BACKEND == "jax":  # generate compiles itself with jax.jit
        run = lambda: generate(model, prompts, settings)  # noqa: E731
    else:
        import tensorflow as tf

        compiled = tf.function(
            lambda p: kt.decoding.generate(model, p, **settings),
            jit_compile=True,
            autograph=False,
        )
        run = lambda: keras.ops.convert_to_numpy(compiled(tf.constant(prompts))[0])  # noqa: E731
    times, ids = timed(run, args.warmup, args.steps)
    tokens = int((np.asarray(ids) != 0).sum())
    record = peer_record(
        times,
        tokens,
        impl=f"keras_transformer[{BACKEND}]",
        preset=args.preset,
        mode=f"generate-{args.mode}",
        params=model.count_params(),
        batch_size=args.batch_size,
        src_len=args.src_len,
        tgt_len=args.tgt_len,
        jit_compile=True,
        cache=args.cache == "on",
    )
    print(json.dumps(record))
    return 0


def generate(model, prompts, settings):
    return keras.ops.convert_to_numpy(kt.decoding.generate(model, prompts, **settings)[0])


if __name__ == "__main__":
    sys.exit(main())

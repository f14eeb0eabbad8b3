"""The same model trained or decoding on Keras's TensorFlow or JAX backend, on synthetic
batches: one JSON line in the peer's schema (`benchmarks.peer`), for `benchmarks.compare`.

    python -m benchmarks.compare --repeats 5 \\
        --a "env KERAS_BACKEND=jax python -m benchmarks.backends --preset small --mode train" \\
        --b "env KERAS_BACKEND=tensorflow python -m benchmarks.backends --preset small --mode train"

Both compile with XLA: on TensorFlow `model.compile(jit_compile=True)` and
`tf.function(jit_compile=True)` around a search, on JAX Keras's jitted step and `jax.jit`.
Decoding is greedy or beam search (`--beam-size`, stopping "exact") from the source batch,
with the library's cache, on the stock path (`kt.fast` off: its tricks are TensorFlow's).
`tokens_per_s` counts target tokens: trained ones, or generated ones (up to each EOS).
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
from benchmarks.synthetic import (  # noqa: E402
    PRESET_VOCAB,
    peer_record,
    synthetic_batch,
    timed,
    train_flops_per_token,
)

BACKEND = keras.config.backend()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny", choices=sorted(PRESET_VOCAB))
    parser.add_argument("--mode", default="train", choices=["train", "greedy", "beam"])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--src-len", type=int, default=32)
    parser.add_argument("--tgt-len", type=int, default=32)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10, help="timed steps or decodes")
    parser.add_argument("--warmup", type=int, default=2, help="untimed (compilation)")
    parser.add_argument(
        "--dropout", type=float, help="the model's dropout (default: 0.1 training, else 0)"
    )
    return parser.parse_args(argv)


def compiled(function):
    if BACKEND == "jax":
        import jax

        return jax.jit(function)
    import tensorflow as tf

    return tf.function(function, jit_compile=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    keras.utils.set_random_seed(0)
    config = kt.TransformerConfig.preset(
        args.preset,
        vocab_size=PRESET_VOCAB[args.preset],
        max_length=max(args.src_len, args.tgt_len) * 2,
        dropout=(0.1 if args.mode == "train" else 0.0) if args.dropout is None else args.dropout,
    )
    model = kt.build_transformer(config)
    rng = np.random.default_rng(0)
    x, y = synthetic_batch(rng, config.target_vocab, args.batch_size, args.src_len, args.tgt_len)
    if args.mode == "train":
        model.compile(
            optimizer=keras.optimizers.Adam(1e-4, beta_2=0.98, epsilon=1e-9),
            loss=kt.losses.LabelSmoothedCrossEntropy(),
            jit_compile=True,
        )
        times, _ = timed(lambda: model.train_on_batch(x, y), args.warmup, args.steps)
        tokens = int((y != 0).sum())
    else:
        source = x["source_ids"]
        extra = args.tgt_len - args.src_len
        if args.mode == "greedy":
            search = compiled(
                lambda s: kt.decoding.greedy_search(model, s, max_extra_length=max(extra, 0))
            )
        else:
            search = compiled(
                lambda s: kt.decoding.beam_search(
                    model, s, beam_size=args.beam_size, max_extra_length=max(extra, 0)
                )
            )
        times, ids = timed(
            lambda: keras.ops.convert_to_numpy(search(source)[0]), args.warmup, args.steps
        )
        tokens = int((np.asarray(ids) != 0).sum())
    record = peer_record(
        times,
        tokens,
        impl=f"keras_transformer[{BACKEND}]",
        preset=args.preset,
        mode=args.mode,
        params=model.count_params(),
        batch_size=args.batch_size,
        src_len=args.src_len,
        tgt_len=args.tgt_len,
        jit_compile=True,
        cache=args.mode != "train",
    )
    record["train_gflops_per_token"] = round(
        train_flops_per_token(config, args.src_len, args.tgt_len) / 1e9, 4
    )
    record["tensorflow_imported"] = "tensorflow" in sys.modules
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())

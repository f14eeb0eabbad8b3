"""The GPU check: this library's Transformer and the keras-hub peer trained on JAX, in one
prepared command for a machine with JAX + CUDA and no TensorFlow (the GPU machine lent to
some tasks), within 8 minutes.

    KERAS_BACKEND=jax python -m benchmarks.gpu                 # base, mixed_bfloat16, on GPU
    KERAS_BACKEND=jax python -m benchmarks.gpu --preset tiny --steps 2 --warmup 1   # CPU test

For each implementation (`keras_transformer`, then `keras_hub_peer`: the same encoder-decoder
made of keras-hub's `TokenAndPositionEmbedding`, `TransformerEncoder` and
`TransformerDecoder`, as benchmarks/peer.py builds it) it trains on synthetic
token batches (ragged: a quarter of each row padded on average) with `train_on_batch`, under
the dtype policy given, and prints one JSON line: step time, target tokens a second, the
device's peak memory, and model FLOPs utilisation against the device's bf16 peak (the dense
figure of its data sheet, or `--peak-tflops`). A last line checks decoding: greedy ids of a
seeded model on the accelerator equal those on the CPU (float32, so that both compute the same
thing up to rounding).

Keras's JAX trainer compiles the step with XLA (`jit_compile=True`). Nothing here needs
TensorFlow (tests/jax/test_no_tensorflow.py runs the library with it hidden).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_transformer as kt  # noqa: E402
from benchmarks.synthetic import PRESET_VOCAB, synthetic_batch, train_flops_per_token  # noqa: E402

# Dense bf16 tensor-core peaks from the data sheets, by `device_kind` prefix.
BF16_PEAK_TFLOPS = {
    "NVIDIA H200": 989.4,
    "NVIDIA H100 80GB HBM3": 989.4,  # SXM
    "NVIDIA H100 PCIe": 756.0,
    "NVIDIA H100 NVL": 835.0,
    "NVIDIA A100": 312.0,
    "NVIDIA L4": 121.0,
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="base", choices=sorted(PRESET_VOCAB))
    parser.add_argument("--dtype", default="mixed_bfloat16", help="Keras dtype policy")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--src-len", type=int, default=64)
    parser.add_argument("--tgt-len", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps (compilation)")
    parser.add_argument("--decode-sentences", type=int, default=8)
    parser.add_argument("--peak-tflops", type=float, default=None, help="override the table")
    parser.add_argument("--impl", nargs="+", default=["keras_transformer", "keras_hub_peer"])
    return parser.parse_args(argv)


def library_model(config):
    model = kt.build_transformer(config)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4, beta_2=0.98, epsilon=1e-9),
        loss=kt.losses.LabelSmoothedCrossEntropy(),
        jit_compile=True,
    )
    return model


def peer_model(config, src_len, tgt_len):
    """The keras-hub peer (`benchmarks.peer`) at `config`'s sizes, compiled as it trains."""
    from benchmarks.peer import Peer, masked_loss

    peer = Peer(
        config.target_vocab,
        config.d_model,
        config.num_heads,
        config.d_ff,
        config.num_encoder_layers,
        length=max(src_len, tgt_len) * 2,
    )
    peer.model.compile(
        optimizer=keras.optimizers.Adam(1e-4, beta_2=0.98, epsilon=1e-9),
        loss=masked_loss,
        jit_compile=True,
    )
    return peer.model


def peak_tflops(device, override):
    if override is not None:
        return override
    for prefix, tflops in BF16_PEAK_TFLOPS.items():
        if device.device_kind.startswith(prefix):
            return tflops
    return None


def peak_memory_mb(device):
    stats = device.memory_stats() or {}  # None on the CPU
    peak = stats.get("peak_bytes_in_use")
    return None if peak is None else round(peak / 2**20, 1)


def train(impl, config, args, device):
    keras.utils.set_random_seed(0)
    model = (
        library_model(config)
        if impl == "keras_transformer"
        else peer_model(config, args.src_len, args.tgt_len)
    )
    rng = np.random.default_rng(0)
    batches = [
        synthetic_batch(rng, config.target_vocab, args.batch_size, args.src_len, args.tgt_len)
        for _ in range(4)
    ]
    times, tokens = [], []
    for step in range(args.warmup + args.steps):
        x, y = batches[step % len(batches)]
        started = time.perf_counter()
        loss = model.train_on_batch(x, y, return_dict=True)["loss"]  # waits for the result
        if step >= args.warmup:
            times.append(time.perf_counter() - started)
            tokens.append(int((y != 0).sum()))
    step_s = statistics.median(times)
    tokens_per_s = statistics.mean(tokens) / step_s
    flops = train_flops_per_token(config, args.src_len, args.tgt_len)
    peak = peak_tflops(device, args.peak_tflops)
    return {
        "impl": impl,
        "preset": args.preset,
        "mode": "train",
        "backend": keras.config.backend(),
        "device": device.device_kind,
        "dtype": args.dtype,
        "params": model.count_params(),
        "batch_size": args.batch_size,
        "src_len": args.src_len,
        "tgt_len": args.tgt_len,
        "jit_compile": True,
        "step_ms_median": round(step_s * 1e3, 2),
        "step_ms_min": round(min(times) * 1e3, 2),
        "tokens_per_s": round(tokens_per_s, 1),
        "peak_memory_mb": peak_memory_mb(device),
        "model_tflops_per_s": round(tokens_per_s * flops / 1e12, 2),
        "mfu": None if peak is None else round(tokens_per_s * flops / 1e12 / peak, 4),
        "peak_bf16_tflops": peak,
        "final_loss": round(float(loss), 4),
    }


def greedy_on(device, config, source):
    """Greedy ids of the seeded float32 model, every array on `device`."""
    with jax.default_device(device):
        keras.utils.set_random_seed(0)
        model = kt.build_transformer(config)
        search = jax.jit(lambda ids: kt.decoding.greedy_search(model, ids, max_extra_length=8))
        return np.asarray(search(source)[0])


def main(argv=None) -> int:
    args = parse_args(argv)
    if keras.config.backend() != "jax":
        raise SystemExit(f"benchmarks.gpu runs on JAX; KERAS_BACKEND is {keras.config.backend()}")
    device = jax.devices()[0]
    keras.config.set_dtype_policy(args.dtype)
    config = kt.TransformerConfig.preset(
        args.preset,
        vocab_size=PRESET_VOCAB[args.preset],
        max_length=max(args.src_len, args.tgt_len) * 2,
        dtype=args.dtype,
    )
    for impl in args.impl:
        print(json.dumps(train(impl, config, args, device)), flush=True)
    keras.config.set_dtype_policy("float32")
    float32 = kt.TransformerConfig.preset(
        args.preset, vocab_size=PRESET_VOCAB[args.preset], max_length=64
    )
    source = np.random.default_rng(1).integers(4, 1000, (args.decode_sentences, 12))
    source = source.astype("int32")
    on_device = greedy_on(device, float32, source)
    on_cpu = greedy_on(jax.devices("cpu")[0], float32, source)
    check = {
        "check": "greedy ids on the device equal those on the CPU",
        "device": device.device_kind,
        "sentences": len(source),
        "equal_rows": int((on_device == on_cpu).all(axis=1).sum()),
        "equal": bool(np.array_equal(on_device, on_cpu)),
    }
    print(json.dumps(check), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

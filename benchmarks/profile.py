"""Where the time goes: TensorFlow's profiler over a compiled train step or greedy decode.

    python -m benchmarks.profile --preset small
    python -m benchmarks.profile --preset small --set dropout=0.0 --set vocab_size=1000
    python -m benchmarks.profile --preset small --mode decode --tgt-len 64 [--beam-size 4]

Runs the synthetic work of `benchmarks.run` (same batches, XLA on): a train step, or a whole
greedy or beam decode of `--tgt-len` tokens. It records `--steps` of them with XLA's CPU ops traced
(`--xla_cpu_enable_xprof_traceme`), and prints the time per step (per decode) of each kind of
event (an XLA fusion, a dot, the random-bit generator, a
TensorFlow op outside the cluster), summed over threads, largest first. `--set` overrides a
`TransformerConfig` field, for ablations. The trace stays in `--logdir` for TensorBoard's
profile plugin.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import yaml  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

from benchmarks import run  # noqa: E402

# Events that wait for others, or only dispatch them.
WAITING = {"ThunkExecutor::Execute", "SlinkyThreadPool::Await", "BlockUntilReady"}


def self_times(xspace) -> collections.Counter:
    """Picoseconds per event kind ("fusion.12" and "fusion.7" are both "fusion") on the host's
    threads, each event counting its own time only: its duration less that of the events
    nested in it on the same thread."""
    totals = collections.Counter()
    for plane in xspace.planes:
        if not plane.name.startswith("/host:"):
            continue
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            open_events = []  # (end_ps, kind): the enclosing events of the current one
            for event in sorted(line.events, key=lambda e: (e.offset_ps, -e.duration_ps)):
                while open_events and open_events[-1][0] <= event.offset_ps:
                    open_events.pop()
                kind = re.sub(r"\.\d+$", "", names.get(event.metadata_id, "?"))
                if open_events:
                    totals[open_events[-1][1]] -= event.duration_ps
                totals[kind] += event.duration_ps
                open_events.append((event.offset_ps + event.duration_ps, kind))
    for name in WAITING:
        totals.pop(name, None)
    return totals


def parse_override(text: str):
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--set {text!r}: expected KEY=VALUE")
    return key, yaml.safe_load(value)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small", choices=sorted(run.PRESET_VOCAB))
    parser.add_argument("--mode", default="train", choices=["train", "decode"])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--src-len", type=int, default=32)
    parser.add_argument("--tgt-len", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--beam-size", type=int, default=1, help="--mode decode: 1 is greedy")
    parser.add_argument("--top", type=int, default=25, help="event kinds to print")
    parser.add_argument("--set", type=parse_override, action="append", default=[])
    parser.add_argument("--logdir", type=Path, help="default: a temporary directory")
    # What benchmarks.run reads:
    parser.set_defaults(dtype=None, jit_compile="on", cache="on", shards=1)
    args = parser.parse_args(argv)
    # Read at XLA's first compilation: its CPU runtime then emits a trace event per op it runs.
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true"
    ).strip()

    keras.utils.set_random_seed(0)
    model = run.model_for(args, **dict(args.set))
    rng = np.random.default_rng(0)
    batches = [
        run.synthetic_batch(
            rng, model.config.target_vocab, args.batch_size, args.src_len, args.tgt_len
        )
        for _ in range(8)
    ]
    if args.mode == "train":
        run.compile_for_training(model, args)

        def step(i):
            src, tin, tout = batches[i % len(batches)]
            model.train_on_batch({"source_ids": src, "target_ids": tin}, tout)
    else:
        decode = run.decoder_for(model, args)

        def step(i):
            decode(tf.constant(batches[0][0]))[0].numpy()

    for i in range(args.warmup):
        step(i)
    logdir = args.logdir or Path(tempfile.mkdtemp(prefix="profile-"))
    tf.profiler.experimental.start(str(logdir))
    started = time.perf_counter()
    for i in range(args.steps):
        step(i)
    wall_ms = 1e3 * (time.perf_counter() - started) / args.steps
    tf.profiler.experimental.stop()

    trace = max(logdir.glob("plugins/profile/*/*.xplane.pb"), key=os.path.getmtime)
    xspace = xplane_pb2.XSpace()
    xspace.ParseFromString(trace.read_bytes())
    totals = self_times(xspace)
    per_step = {name: ps / 1e9 / args.steps for name, ps in totals.items()}
    print(f"{args.preset}: {wall_ms:.1f} ms a step (wall clock, while tracing)")
    print(f"{sum(per_step.values()):.1f} ms of op time a step, summed over threads:")
    for name, ms in sorted(per_step.items(), key=lambda item: -item[1])[: args.top]:
        print(f"{ms:9.2f} ms  {name}")
    print(f"trace: {trace}")


if __name__ == "__main__":
    main()

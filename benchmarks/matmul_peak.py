"""The machine's practical dense float32 limit: the best median GFLOP/s of a square
`tf.matmul`, eagerly and under XLA, at 512, 1024 and 2048.

    python -m benchmarks.matmul_peak

Last line: {"impl": "matmul_peak", "gflops_fp32", "by_size", "cpus"}. A training run's
model-FLOPs utilisation is `tokens_per_s * benchmarks.synthetic.train_flops_per_token(...) /
(gflops_fp32 * 1e9)`.
"""

from __future__ import annotations

import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402


def gflops(size: int, jit_compile: bool, repeats: int = 7) -> float:
    """Median GFLOP/s of a `[size, size] x [size, size]` product (2 size^3 FLOPs)."""
    a, b = tf.random.normal([size, size]), tf.random.normal([size, size])
    product = tf.function(tf.matmul, jit_compile=jit_compile)
    product(a, b).numpy()  # traced and compiled before timing
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        product(a, b).numpy()
        times.append(time.perf_counter() - started)
    return 2 * size**3 / statistics.median(times) / 1e9


def main() -> dict:
    by_size = {
        f"{size}{'_xla' if jit else ''}": round(gflops(size, jit), 1)
        for size in (512, 1024, 2048)
        for jit in (False, True)
    }
    record = {
        "impl": "matmul_peak",
        "gflops_fp32": max(by_size.values()),
        "by_size": by_size,
        "cpus": os.cpu_count(),
    }
    print(json.dumps(record))
    return record


if __name__ == "__main__":
    main()

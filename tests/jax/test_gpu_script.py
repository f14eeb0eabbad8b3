"""benchmarks/gpu.py, the GPU check, at tiny size on the CPU: it trains both implementations
on JAX, reports the figures BENCHMARKS.md's GPU row takes, and checks greedy decoding on the
device against the CPU (here both are the CPU)."""

import json

import pytest

from tests import programs


@pytest.mark.slow
def test_the_gpu_check_runs_at_tiny_size_on_the_cpu():
    command = ["-m", "benchmarks.gpu", "--preset", "tiny", "--batch-size", "4"]
    command += ["--src-len", "8", "--tgt-len", "8", "--steps", "2", "--warmup", "1"]
    command += ["--decode-sentences", "3", "--peak-tflops", "1.0"]
    result = programs.python(*command, env={"KERAS_BACKEND": "jax"})
    *trained, check = [json.loads(line) for line in result.stdout.splitlines()[-3:]]
    assert [row["impl"] for row in trained] == ["keras_transformer", "keras_hub_peer"]
    for row in trained:
        assert row["backend"] == "jax" and row["dtype"] == "mixed_bfloat16"
        assert row["tokens_per_s"] > 0 and row["step_ms_median"] > 0
        assert 0 < row["mfu"] == pytest.approx(row["model_tflops_per_s"] / 1.0, abs=0.01)
    assert check["equal"] and check["equal_rows"] == check["sentences"] == 3

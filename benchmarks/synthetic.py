"""What the benchmarks share, on any backend (benchmarks/gpu.py runs where only JAX is
installed): the peer's preset vocabularies, its synthetic batches, its FLOPs count, and its
JSON record."""

import resource
import statistics
import time

import numpy as np

PRESET_VOCAB = {"tiny": 8000, "small": 16000, "base": 37000, "big": 37000}  # the peer's sizes


def add_peer_flags(parser, presets, modes) -> None:
    """The flags every benchmark in the peer's schema takes (`benchmarks.peer`'s), so that
    `benchmarks.compare` can run two of them with the same ones."""
    parser.add_argument("--preset", default="tiny", choices=sorted(presets))
    parser.add_argument("--mode", default="train", choices=list(modes))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--src-len", type=int, default=32)
    parser.add_argument("--tgt-len", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--jit-compile", default="on", choices=["on", "off"])
    parser.add_argument("--cache", default="on", choices=["on", "off"])


def synthetic_batch(rng: np.random.Generator, vocab: int, b: int, s: int, t: int):
    """The peer's batches: random ids, each row padded from a random point in its second
    half. Returns `({"source_ids", "target_ids"}, labels)`, int32."""
    src = rng.integers(1, vocab, (b, s)).astype("int32")
    tgt = rng.integers(1, vocab, (b, t + 1)).astype("int32")
    for i in range(b):
        src[i, rng.integers(s // 2, s + 1) :] = 0
        tgt[i, rng.integers(t // 2, t + 2) :] = 0
    return {"source_ids": src, "target_ids": tgt[:, :-1]}, tgt[:, 1:]


def train_flops_per_token(config, src_len, tgt_len) -> float:
    """The peer's FLOPs count for one trained target token (forward + backward = 3 x forward,
    2 FLOPs a multiply-add; source tokens counted per target token), as
    `benchmarks.matmul_peak` counts them."""
    d, ff, vocab = config.d_model, config.d_ff, config.target_vocab
    enc = config.num_encoder_layers * (2 * (4 * d**2 + 2 * d * ff) + 4 * src_len * d)
    dec = config.num_decoder_layers * (
        2 * (8 * d**2 + 2 * d * ff) + 4 * tgt_len * d + 4 * src_len * d
    )
    return 3 * (enc * src_len / tgt_len + dec + 2 * d * vocab)


def peer_record(times: list[float], tokens: int, **fields) -> dict:
    """The peer's JSON record of timed steps (seconds) that each handled `tokens` tokens:
    `fields` (impl, preset, mode, params, batch_size, src_len, tgt_len, jit_compile, cache,
    and any of a benchmark's own), then the step times, tokens/s, sentences/s and the
    process's peak resident memory."""
    step_s = statistics.median(times)
    return {
        **fields,
        "step_ms_median": round(step_s * 1e3, 2),
        "step_ms_min": round(min(times) * 1e3, 2),
        "tokens_per_s": round(tokens / step_s, 1),
        "sentences_per_s": round(fields["batch_size"] / step_s, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def timed(step, warmup: int, steps: int) -> tuple:
    """`step()` called `warmup` times untimed (compilation), then `steps` times timed:
    `(seconds of each timed call, the last call's result)`."""
    times, result = [], None
    for index in range(warmup + steps):
        started = time.perf_counter()
        result = step()
        if index >= warmup:
            times.append(time.perf_counter() - started)
    return times, result

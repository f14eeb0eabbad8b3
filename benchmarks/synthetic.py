"""What the benchmarks share, on any backend (benchmarks/gpu.py runs where only JAX is
installed): the peer's preset vocabularies, its synthetic batches, and its FLOPs count."""

import numpy as np

PRESET_VOCAB = {"tiny": 8000, "small": 16000, "base": 37000, "big": 37000}  # the peer's sizes


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
    ../shared/bench/matmul_peak.py counts them."""
    d, ff, vocab = config.d_model, config.d_ff, config.target_vocab
    enc = config.num_encoder_layers * (2 * (4 * d**2 + 2 * d * ff) + 4 * src_len * d)
    dec = config.num_decoder_layers * (
        2 * (8 * d**2 + 2 * d * ff) + 4 * tgt_len * d + 4 * src_len * d
    )
    return 3 * (enc * src_len / tgt_len + dec + 2 * d * vocab)

"""One small instance of every public layer, with inputs to call it on.

The contract tests (serialization, MirroredStrategy, mixed precision, XLA) run over these.
"""

import numpy as np

from keras_transformer import layers

BATCH, SRC, TGT, D = 2, 6, 5, 16


def _floats(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _ids(batch, length, vocab=50, pad_from=None, seed=0):
    ids = np.random.default_rng(seed).integers(1, vocab, size=(batch, length)).astype("int32")
    if pad_from is not None:
        ids[-1, pad_from:] = 0
    return ids


def _mask(batch, length, real_in_last):
    mask = np.ones((batch, length), bool)
    mask[-1, real_in_last:] = False
    return mask


BLOCK = dict(num_heads=2, d_ff=32, dropout=0.1)

# name -> (layer class, constructor kwargs, call kwargs (tensors and flags))
CASES = {
    "SinusoidalPositionEncoding": (
        layers.SinusoidalPositionEncoding,
        {},
        {"inputs": _floats(BATCH, TGT, D)},
    ),
    "TransformerEmbedding": (
        layers.TransformerEmbedding,
        {"vocab_size": 50, "d_model": D, "max_length": 16, "dropout": 0.1},
        {"inputs": _ids(BATCH, TGT, pad_from=3)},
    ),
    "TransformerEmbedding-marian": (
        layers.TransformerEmbedding,
        {
            "vocab_size": 50,
            "d_model": D,
            "max_length": 16,
            "sinusoid_layout": "concatenated",
            "output_bias": True,
        },
        {"inputs": _ids(BATCH, TGT, pad_from=3)},
    ),
    "TransformerEmbedding-learned": (
        layers.TransformerEmbedding,
        {"vocab_size": 50, "d_model": D, "max_length": 16, "positional": "learned"},
        {"inputs": _ids(BATCH, TGT, pad_from=3)},
    ),
    "TransformerAttention": (
        layers.TransformerAttention,
        {"num_heads": 2, "dropout": 0.1},
        {
            "query": _floats(BATCH, TGT, D),
            "value": _floats(BATCH, SRC, D, seed=1),
            "padding_mask": _mask(BATCH, SRC, 4),
        },
    ),
    "PositionwiseFeedForward": (
        layers.PositionwiseFeedForward,
        {"d_ff": 32, "dropout": 0.1},
        {"inputs": _floats(BATCH, TGT, D)},
    ),
    "AddAndNorm": (
        layers.AddAndNorm,
        {"dropout": 0.1},
        {"residual": _floats(BATCH, TGT, D), "sublayer_output": _floats(BATCH, TGT, D, seed=1)},
    ),
    "EncoderLayer": (
        layers.EncoderLayer,
        BLOCK,
        {"inputs": _floats(BATCH, SRC, D), "padding_mask": _mask(BATCH, SRC, 4)},
    ),
    "EncoderLayer-pre-norm-gelu": (
        layers.EncoderLayer,
        {**BLOCK, "norm_first": True, "activation": "gelu"},
        {"inputs": _floats(BATCH, SRC, D), "padding_mask": _mask(BATCH, SRC, 4)},
    ),
    "DecoderLayer": (
        layers.DecoderLayer,
        BLOCK,
        {
            "inputs": _floats(BATCH, TGT, D),
            "encoder_output": _floats(BATCH, SRC, D, seed=1),
            "padding_mask": _mask(BATCH, TGT, 3),
            "encoder_padding_mask": _mask(BATCH, SRC, 4),
        },
    ),
    "DecoderLayer-decoder-only": (
        layers.DecoderLayer,
        {**BLOCK, "norm_first": True},
        {"inputs": _floats(BATCH, TGT, D), "padding_mask": _mask(BATCH, TGT, 3)},
    ),
    "Encoder": (
        layers.Encoder,
        {"num_layers": 2, **BLOCK, "norm_first": True},
        {"inputs": _floats(BATCH, SRC, D), "padding_mask": _mask(BATCH, SRC, 4)},
    ),
    "Decoder": (
        layers.Decoder,
        {"num_layers": 2, **BLOCK},
        {
            "inputs": _floats(BATCH, TGT, D),
            "encoder_output": _floats(BATCH, SRC, D, seed=1),
            "padding_mask": _mask(BATCH, TGT, 3),
            "encoder_padding_mask": _mask(BATCH, SRC, 4),
        },
    ),
    "Decoder-decoder-only": (
        layers.Decoder,
        {"num_layers": 2, **BLOCK},
        {"inputs": _floats(BATCH, TGT, D), "padding_mask": _mask(BATCH, TGT, 3)},
    ),
}

# Layers without weights: nothing to train.
WEIGHTLESS = {"SinusoidalPositionEncoding"}

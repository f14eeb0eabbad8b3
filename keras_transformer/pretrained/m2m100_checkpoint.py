"""An NLLB-200 or M2M100 checkpoint directory in Hugging Face transformers' format, read before
anything is built (STYLE 20), over `bart_checkpoint`'s readers: `M2M100Error`, which names what
is missing or wrong; config.json's values (`number`, `special_ids`, and `DEFAULTS`:
transformers' `M2M100Config` defaults); the tokens of the checkpoint's rows (`read_vocabulary`,
by the module of its tokenizer class: `nllb_vocab`, `m2m100_vocab`) and their order in this
library's ids (`vocabulary_order`); and `Checkpoint`, which holds what was read. `m2m100`
checks and converts the checkpoint (its module doc describes the directory and the ids).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from keras_transformer.pretrained import bart_checkpoint, m2m100_vocab, nllb_vocab
from keras_transformer.pretrained.nllb_vocab import FAIRSEQ_SPECIALS, Vocabulary

MODEL_TYPE = "m2m_100"
WEIGHTS = bart_checkpoint.SAFETENSORS
WEIGHTS_INDEX = bart_checkpoint.SAFETENSORS_INDEX
# Each tokenizer class of transformers -> the module that reads its files into a `Vocabulary`.
TOKENIZERS = {
    **dict.fromkeys(nllb_vocab.TOKENIZER_CLASSES, nllb_vocab),
    **dict.fromkeys(m2m100_vocab.TOKENIZER_CLASSES, m2m100_vocab),
}
TOKENIZER_CLASSES = tuple(TOKENIZERS)
# transformers' `M2M100Config` defaults: what a key config.json leaves out means there.
DEFAULTS = {
    "vocab_size": 128112,
    "max_position_embeddings": 1024,
    "encoder_layers": 12,
    "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16,
    "decoder_layers": 12,
    "decoder_ffn_dim": 4096,
    "decoder_attention_heads": 16,
    "activation_function": "relu",
    "d_model": 1024,
    "dropout": 0.1,
    "attention_dropout": 0.1,
    "activation_dropout": 0.0,
    "pad_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": 2,
}
SPECIAL_KEYS = ("pad_token_id", "eos_token_id", "decoder_start_token_id")


class M2M100Error(bart_checkpoint.CheckpointError):
    """A directory that is not an importable NLLB/M2M100 checkpoint; the message says why."""


# The checks of config.json's values.
number = functools.partial(bart_checkpoint.number, error=M2M100Error)


def read_json(path: Path) -> dict:
    """`bart_checkpoint.read_json`, refusing with `M2M100Error`."""
    return bart_checkpoint.read_json(path, M2M100Error, unique_keys=False)


@dataclasses.dataclass(frozen=True)
class Checkpoint(bart_checkpoint.Checkpoint):
    """An M2M100 checkpoint directory, read and checked before anything is built
    (`bart_checkpoint.Checkpoint`, and `vocabulary`: its tokens, a `Vocabulary`)."""

    vocabulary: Vocabulary


def special_ids(config: dict, where: str = "config.json") -> dict:
    """The checkpoint's pad, eos and decoder start ids (config.json, or M2M100Config's)."""
    ids = {key: number(config, key, int, where, DEFAULTS[key]) for key in SPECIAL_KEYS}
    if ids["pad_token_id"] == ids["eos_token_id"]:
        raise M2M100Error(f"{where}: pad_token_id and eos_token_id are both {ids['pad_token_id']}")
    return ids


def read_vocabulary(path: Path, config: dict) -> Vocabulary:
    """The tokens of the checkpoint's rows, read by the module of its tokenizer class
    (tokenizer_config.json's or config.json's `tokenizer_class`; without one, M2M100's when
    the directory has vocab.json and no tokenizer.json, else NLLB's)."""
    path = Path(path)
    tokenizer_config = {}
    if (path / "tokenizer_config.json").exists():
        tokenizer_config = read_json(path / "tokenizer_config.json")
    tokenizer_class = tokenizer_config.get("tokenizer_class", config.get("tokenizer_class"))
    if tokenizer_class is None:
        m2m100 = (path / "vocab.json").exists() and not (path / "tokenizer.json").exists()
        tokenizer_class = "M2M100Tokenizer" if m2m100 else "NllbTokenizer"
    if tokenizer_class not in TOKENIZERS:
        raise M2M100Error(
            f"{path}: tokenizer_class={tokenizer_class!r} is not supported; the importer reads "
            f"NLLB-200's and M2M100's tokenizers ({', '.join(TOKENIZER_CLASSES)})"
        )
    rows = number(config, "vocab_size", int, "config.json", DEFAULTS["vocab_size"])
    return TOKENIZERS[tokenizer_class].read_vocabulary(path, tokenizer_config, rows, M2M100Error)


def vocabulary_order(config: dict, rows: int, where: str = "config.json") -> list[int]:
    """`order[i]` is the checkpoint id of our id i: pad, unk, the decoder start (bos), eos,
    then the other rows in the checkpoint's order (the decoder start's row twice)."""
    ids = special_ids(config, where)
    pad, eos, start = ids["pad_token_id"], ids["eos_token_id"], ids["decoder_start_token_id"]
    unk = FAIRSEQ_SPECIALS.index("<unk>")
    for key, value in (("pad_token_id", pad), ("eos_token_id", eos)):
        if value == unk:
            raise M2M100Error(f"{where}: {key}={value} is <unk>'s id")
    for key, value in zip(SPECIAL_KEYS, (pad, eos, start), strict=True):
        if not 0 <= value < rows:
            raise M2M100Error(f"{where}: {key}={value} is outside the {rows} rows")
    return [pad, unk, start, eos] + [i for i in range(rows) if i not in (pad, unk, eos)]


__all__ = [
    "DEFAULTS",
    "MODEL_TYPE",
    "SPECIAL_KEYS",
    "TOKENIZERS",
    "TOKENIZER_CLASSES",
    "WEIGHTS",
    "WEIGHTS_INDEX",
    "Checkpoint",
    "M2M100Error",
    "number",
    "read_json",
    "read_vocabulary",
    "special_ids",
    "vocabulary_order",
]

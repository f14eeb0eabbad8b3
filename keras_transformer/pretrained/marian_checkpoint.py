"""A Marian (OPUS-MT) checkpoint directory in Hugging Face transformers' format, read and
checked before anything is built (`read_checkpoint`, over `bart_checkpoint`'s readers): its
files (`TOKENIZER_FILES`, config.json, the weights), `MarianError`, which names what is missing
or wrong, and the values of config.json that the config, vocabulary and weight conversions all
read (`number`, `shared_embeddings`, `table_rows`, and `DEFAULTS`, transformers' `MarianConfig`
defaults). `marian` converts the checkpoint (its module doc describes the directory and the
ids); `marian_vocab` reads its vocabularies.
"""

from __future__ import annotations

import functools
from pathlib import Path

from keras_transformer.pretrained import bart_checkpoint

MODEL_TYPE = "marian"
WEIGHT_FILES = (bart_checkpoint.SAFETENSORS, bart_checkpoint.H5)  # in order of preference
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")
# transformers' `MarianConfig` defaults: what a key config.json leaves out means there.
DEFAULTS = {
    "vocab_size": 58101,
    "decoder_vocab_size": None,
    "max_position_embeddings": 1024,
    "encoder_layers": 12,
    "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16,
    "decoder_layers": 12,
    "decoder_ffn_dim": 4096,
    "decoder_attention_heads": 16,
    "activation_function": "gelu",
    "d_model": 1024,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "share_encoder_decoder_embeddings": True,
}


class MarianError(bart_checkpoint.CheckpointError):
    """A directory that is not an importable Marian checkpoint; the message says why."""


# The checks of config.json's values.
number = functools.partial(bart_checkpoint.number, error=MarianError)


def read_json(path: Path) -> dict:
    """`bart_checkpoint.read_json`, refusing with `MarianError` (a key named twice too)."""
    return bart_checkpoint.read_json(path, MarianError)


class Checkpoint(bart_checkpoint.Checkpoint):
    """A Marian checkpoint directory, read and checked (`bart_checkpoint.Checkpoint`)."""

    @property
    def files(self) -> list[Path]:
        """Every file the import reads."""
        names = [*TOKENIZER_FILES, "config.json", self.weights_file.name]
        for optional in ("target_vocab.json", "generation_config.json"):
            if (self.path / optional).exists():
                names.append(optional)
        return sorted(self.path / name for name in names)


def read_checkpoint(path) -> Checkpoint:
    """Reads and checks a checkpoint directory; `MarianError` names what is missing or wrong.
    The weights are read when the import sets them (`bart_checkpoint.SafetensorsWeights`)."""
    path = Path(path)
    what, refusal = (
        "a Marian checkpoint directory",
        "only Marian (OPUS-MT) checkpoints are imported",
    )
    config = bart_checkpoint.read_config(path, MODEL_TYPE, MarianError, what=what, refusal=refusal)
    missing = [name for name in TOKENIZER_FILES if not (path / name).exists()]
    if not config.get("share_encoder_decoder_embeddings", True):
        missing += [] if (path / "target_vocab.json").exists() else ["target_vocab.json"]
    if missing:
        raise MarianError(f"{path}: missing {', '.join(missing)}")
    hint = f"download {bart_checkpoint.SAFETENSORS} or {bart_checkpoint.H5} too"
    weights, weights_file = bart_checkpoint.read_weights(path, MarianError, h5=True, hint=hint)
    generation = bart_checkpoint.read_generation(path, config, MarianError)
    return Checkpoint(path, config, generation, weights, weights_file)


def shared_embeddings(config: dict, where: str = "config.json") -> bool:
    """config.json's share_encoder_decoder_embeddings (transformers' default: true)."""
    shared = config.get(
        "share_encoder_decoder_embeddings", DEFAULTS["share_encoder_decoder_embeddings"]
    )
    if not isinstance(shared, bool):
        raise MarianError(f"{where}: share_encoder_decoder_embeddings={shared!r} is not a boolean")
    return shared


def table_rows(config: dict, where: str = "config.json") -> tuple[int, int]:
    """The rows of the source and target embedding tables, as transformers builds them:
    vocab_size both when the embeddings are shared (decoder_vocab_size then goes unused),
    else vocab_size and decoder_vocab_size (which defaults to vocab_size)."""
    source = number(config, "vocab_size", int, where, DEFAULTS["vocab_size"])
    decoder = number(config, "decoder_vocab_size", int, where, source)
    return source, source if shared_embeddings(config, where) else decoder


__all__ = [
    "DEFAULTS",
    "MODEL_TYPE",
    "TOKENIZER_FILES",
    "WEIGHT_FILES",
    "Checkpoint",
    "MarianError",
    "number",
    "read_checkpoint",
    "read_json",
    "shared_embeddings",
    "table_rows",
]

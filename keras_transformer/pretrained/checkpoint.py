"""A Marian checkpoint directory in Hugging Face transformers' format, read and checked: its
config, generation config and weights (`model.safetensors`, else `tf_model.h5`, both read
without torch, in transformers' PyTorch names and layouts). `marian` turns it into this
library's model and tokenizers.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

WEIGHT_FILES = ("model.safetensors", "tf_model.h5")  # in order of preference
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")
# Generation settings whose other values this library's searches do not apply, with the value
# at which transformers' generate decodes as they do.
NEUTRAL_GENERATION = {
    "do_sample": False,
    "num_beam_groups": 1,
    "diversity_penalty": 0.0,
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "min_length": 0,
    "min_new_tokens": None,
    "max_new_tokens": None,
    "forced_bos_token_id": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "sequence_bias": None,
    "constraints": None,
    "force_words_ids": None,
}
# The generation settings the import reads (`marian.decoding_defaults`) or names as not applied
# (`marian.ignored_generation_settings`). Checkpoints converted before transformers wrote
# generation_config.json (its 3.x and early 4.x) keep them in config.json, where transformers
# still reads them when that file is absent: so does `read_checkpoint`.
GENERATION_KEYS = (
    "num_beams",
    "length_penalty",
    "max_length",
    "bad_words_ids",
    *NEUTRAL_GENERATION,
)


class MarianError(ValueError):
    """A directory that is not an importable Marian checkpoint; the message says why."""


def number(
    settings: dict,
    key: str,
    kind=int,
    where: str = "config.json",
    default=None,
    *,
    error: type[ValueError] = MarianError,
):
    """`settings[key]` as `kind` (int or float), `default` when absent (or null, as
    transformers reads it); `error` names the key when the value is not a number of that
    kind (a string, a list, a boolean, 2.5 for an int). The checkpoint readers' one check."""
    value = settings.get(key)
    if value is None:
        if default is None:
            raise error(f"{where}: no {key!r}")
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (kind is int and value != int(value))
    ):
        noun = "an integer" if kind is int else "a number"
        raise error(f"{where}: {key}={value!r} is not {noun}")
    return kind(value)


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A Marian checkpoint directory, read and checked.

    Attributes:
        path: the directory.
        config: config.json.
        generation: generation_config.json; when it is absent, the generation settings
            config.json holds (`GENERATION_KEYS`, as transformers then reads them), or {}.
        weights: name -> array, in transformers' PyTorch names and layouts.
        weights_file: the file they came from.
    """

    path: Path
    config: dict
    generation: dict
    weights: dict
    weights_file: Path

    @property
    def generation_source(self) -> str:
        """The file `generation` comes from: generation_config.json, else config.json."""
        if (self.path / "generation_config.json").exists():
            return "generation_config.json"
        return "config.json"

    @property
    def files(self) -> list[Path]:
        """Every file the import reads."""
        names = [*TOKENIZER_FILES, "config.json", self.weights_file.name]
        for optional in ("target_vocab.json", "generation_config.json"):
            if (self.path / optional).exists():
                names.append(optional)
        return sorted(self.path / name for name in names)


def read_checkpoint(path) -> Checkpoint:
    """Reads and checks a checkpoint directory; `MarianError` names what is missing or wrong."""
    path = Path(path)
    if not path.is_dir():
        raise MarianError(f"{path}: not a directory (expected a Marian checkpoint directory)")
    config = read_json(path / "config.json")
    if config.get("model_type") != "marian":
        raise MarianError(
            f"{path / 'config.json'}: model_type={config.get('model_type')!r}; only Marian "
            "(OPUS-MT) checkpoints are imported"
        )
    missing = [name for name in TOKENIZER_FILES if not (path / name).exists()]
    if not config.get("share_encoder_decoder_embeddings", True):
        missing += [] if (path / "target_vocab.json").exists() else ["target_vocab.json"]
    if missing:
        raise MarianError(f"{path}: missing {', '.join(missing)}")
    weights_file = next((path / n for n in WEIGHT_FILES if (path / n).exists()), None)
    if weights_file is None:
        found = sorted(p.name for p in path.iterdir() if p.suffix in (".bin", ".pt", ".msgpack"))
        raise MarianError(
            f"{path}: no weights this importer reads; it needs model.safetensors or "
            f"tf_model.h5 (found {', '.join(found) or 'no weight file'}; PyTorch's "
            "pytorch_model.bin is not read, to keep torch out: download model.safetensors "
            "or tf_model.h5 too)"
        )
    if (path / "generation_config.json").exists():
        generation = read_json(path / "generation_config.json")
    else:
        generation = {key: config[key] for key in GENERATION_KEYS if config.get(key) is not None}
    weights = (
        _read_safetensors(weights_file)
        if weights_file.suffix == ".safetensors"
        else (_read_h5(weights_file))
    )
    return Checkpoint(path, config, generation, weights, weights_file)


def read_json(path: Path) -> dict:
    """A JSON object from `path`; `MarianError` when it is missing or not one, or names a key
    twice (Python's JSON reader would keep the last: in a vocabulary, a piece listed twice)."""

    def unique(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise MarianError(f"{path}: {key!r} appears twice")
            seen.add(key)
        return dict(pairs)

    try:
        value = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=unique)
    except FileNotFoundError:
        raise MarianError(f"{path}: missing") from None
    except MarianError:
        raise
    except ValueError as error:
        raise MarianError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(value, dict):
        raise MarianError(f"{path}: expected a JSON object")
    return value


def _read_safetensors(path: Path) -> dict:
    from safetensors.numpy import load_file

    try:
        return dict(load_file(str(path)))
    except Exception as error:  # the library raises its own SafetensorError
        raise MarianError(f"{path}: cannot be read as safetensors ({error})") from None


def _read_h5(path: Path) -> dict:
    """tf_model.h5 (transformers' TF classes) -> the PyTorch names and layouts: Dense
    kernels `[in, out]` transposed to `[out, in]`, gamma/beta to weight/bias."""
    import h5py

    weights = {}
    try:
        with h5py.File(path, "r") as file:
            file.visititems(lambda name, item: _h5_weight(weights, name, item))
    except OSError as error:
        raise MarianError(f"{path}: cannot be read as HDF5 ({error})") from None
    return weights


def _h5_weight(weights: dict, name: str, item) -> None:
    import h5py

    if not isinstance(item, h5py.Dataset):
        return
    parts = name.removesuffix(":0").split("/")
    value = np.asarray(item)
    if parts[-1] == "final_logits_bias":
        weights["final_logits_bias"] = value
        return
    if "shared" in parts[-2] or "shared" in parts[-3 if len(parts) > 2 else -2]:
        weights["model.shared.weight"] = value
        return
    stack = next((i for i, p in enumerate(parts) if p in ("encoder", "decoder")), None)
    if stack is None:
        return
    leaf = {"kernel": "weight", "gamma": "weight", "beta": "bias", "embeddings": "weight"}
    key = ".".join(["model", *parts[stack:-1], leaf.get(parts[-1], parts[-1])])
    weights[key] = value.T if parts[-1] == "kernel" else value


def bart_sizes(get) -> dict:
    """The `TransformerConfig` arguments that transformers' BART-family configs (Marian's and
    M2M100's) give under the same keys; `get(key, kind=int)` reads one key, checked."""
    return dict(
        d_model=get("d_model"),
        num_heads=get("encoder_attention_heads"),
        d_ff=get("encoder_ffn_dim"),
        num_encoder_layers=get("encoder_layers"),
        num_decoder_layers=get("decoder_layers"),
        dropout=get("dropout", float),
        attention_dropout=get("attention_dropout", float),
        activation_dropout=get("activation_dropout", float),
        max_length=get("max_position_embeddings"),
    )


__all__ = ["Checkpoint", "MarianError", "read_checkpoint"]

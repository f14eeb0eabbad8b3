"""A BART-family checkpoint directory of Hugging Face transformers, read and checked without
torch (STYLE 20): config.json (`read_config`, its values checked by `number`) and
generation_config.json (`read_generation`), each read by `read_json`; the weights
(`read_weights`): model.safetensors, the shards that model.safetensors.index.json lists (read by
`SafetensorsWeights`, a weight when asked) or tf_model.h5, in transformers' PyTorch names and
layouts; `Checkpoint`, which holds what was read; and `CheckpointError`, the ValueError that
every family's own error subclasses.

`bart` converts what this module reads (the sizes, the weight-name map, the decoding defaults);
a family module (`marian_checkpoint`, `m2m100`) reads its directory with these readers. Every
reader takes `error`, the family's subclass of `CheckpointError` (`MarianError`, `M2M100Error`),
so a message names the file and the key whichever family reads it, and a program catches them
all as one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"  # a sharded checkpoint's list of shards
H5 = "tf_model.h5"  # transformers' TF classes' weights
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
# The generation settings an import reads (`decoding_defaults`) or names as not applied
# (`ignored_generation_settings`). Checkpoints converted before transformers wrote
# generation_config.json (its 3.x and early 4.x) keep them in config.json, where transformers
# still reads them when that file is absent (`read_generation`).
GENERATION_KEYS = (
    "num_beams",
    "length_penalty",
    "max_length",
    "bad_words_ids",
    *NEUTRAL_GENERATION,
)


class CheckpointError(ValueError):
    """A directory that is not an importable checkpoint; the message names the file and the
    key. Each family refuses with its own subclass (`MarianError`, `M2M100Error`)."""


def number(
    settings: dict, key: str, kind=int, where="config.json", default=None, *, error=ValueError
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


def read_json(path: Path, error=ValueError, *, unique_keys: bool = True) -> dict:
    """A JSON object from `path`; `error` when it is missing or not one, or (`unique_keys`)
    names a key twice (Python's JSON reader would keep the last: in a vocabulary, a piece
    listed twice)."""

    def unique(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise error(f"{path}: {key!r} appears twice")
            seen.add(key)
        return dict(pairs)

    try:
        hook = unique if unique_keys else None
        value = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=hook)
    except FileNotFoundError:
        raise error(f"{path}: missing") from None
    except error:
        raise
    except ValueError as problem:  # UnicodeDecodeError too
        raise error(f"{path}: not valid JSON ({problem})") from None
    if not isinstance(value, dict):
        raise error(f"{path}: expected a JSON object")
    return value


def read_config(path: Path, model_type: str, error, *, what: str, refusal: str) -> dict:
    """config.json of the checkpoint directory `path` (`what` it should be), whose
    `model_type` must be `model_type`; `refusal` ends the message that names another."""
    if not path.is_dir():
        raise error(f"{path}: not a directory (expected {what})")
    config = read_json(path / "config.json", error)
    if config.get("model_type") != model_type:
        raise error(f"{path / 'config.json'}: model_type={config.get('model_type')!r}; {refusal}")
    return config


def read_generation(path: Path, config: dict, error, *, from_config: bool = True) -> dict:
    """generation_config.json; when it is absent, the generation settings that config.json
    holds (`GENERATION_KEYS`, as transformers then reads them) where `from_config`, else {}."""
    if (path / "generation_config.json").exists():
        return read_json(path / "generation_config.json", error)
    if not from_config:
        return {}
    return {key: config[key] for key in GENERATION_KEYS if config.get(key) is not None}


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A BART-family checkpoint directory, read and checked before anything is built.

    Attributes:
        path: the directory.
        config: config.json.
        generation: generation_config.json (or what `read_generation` takes in its place).
        weights: name -> array, in transformers' PyTorch names and layouts (a mapping that
            reads each weight when asked, `SafetensorsWeights`, or a dict).
        weights_file: the file they came from (a sharded checkpoint's index).
    """

    path: Path
    config: dict
    generation: dict
    weights: Mapping
    weights_file: Path

    @property
    def generation_source(self) -> str:
        """The file `generation` comes from: generation_config.json, else config.json."""
        if (self.path / "generation_config.json").exists():
            return "generation_config.json"
        return "config.json"

    @property
    def files(self) -> list[Path]:
        """The files of the directory, which a record of the import hashes (a family whose
        reader reads fewer names those alone)."""
        return sorted(p for p in self.path.iterdir() if p.is_file())


def read_weights(path: Path, error, *, h5: bool = False, hint: str = "") -> tuple[Mapping, Path]:
    """The weights of a checkpoint directory and their file: model.safetensors, the shards
    that model.safetensors.index.json lists, or (`h5`) tf_model.h5, read without torch.
    `error` names what the directory has instead; `hint` says what to download."""
    if (path / SAFETENSORS).exists():
        return SafetensorsWeights([path / SAFETENSORS], error), path / SAFETENSORS
    if (path / SAFETENSORS_INDEX).exists():
        weight_map = read_json(path / SAFETENSORS_INDEX, error).get("weight_map")
        if not isinstance(weight_map, dict):
            raise error(f"{path / SAFETENSORS_INDEX}: no weight_map")
        files = [path / name for name in sorted(set(weight_map.values()))]
        return SafetensorsWeights(files, error), path / SAFETENSORS_INDEX
    if h5 and (path / H5).exists():
        return _read_h5(path / H5, error), path / H5
    readable = f"{SAFETENSORS} or {H5}" if h5 else SAFETENSORS
    other = (".bin", ".pt", ".msgpack") + (() if h5 else (".h5",))
    found = sorted(p.name for p in path.iterdir() if p.suffix in other)
    raise error(
        f"{path}: no weights this importer reads; it needs {readable} (found "
        f"{', '.join(found) or 'no weight file'}; PyTorch's pytorch_model.bin is not read, to "
        f"keep torch out: {hint or f'download {readable}'})"
    )


class SafetensorsWeights(Mapping):
    """Weights in safetensors files, name -> numpy array, each read from its file when asked
    (safetensors' numpy reader: no torch).

    Only the names and shapes are read up front. A weight's bytes are read when it is looked
    up, with its file mapped only while it is read, so an import holds the model and one
    weight at a time, not the checkpoint too (NLLB-200-600M: 2.3 GB of weights; see
    `benchmarks.import_memory`); `rows` reads a slice of a large table.
    """

    def __init__(self, files, error=ValueError):
        from safetensors import safe_open

        self._error = error
        self._file, self._shapes = {}, {}
        for file in files:
            try:
                with safe_open(str(file), framework="numpy") as handle:
                    for name in handle.keys():  # noqa: SIM118 (not a dict)
                        self._file[name] = file
                        self._shapes[name] = tuple(handle.get_slice(name).get_shape())
            except Exception as problem:  # safetensors raises its own SafetensorError, or OSError
                raise error(f"{file}: cannot be read as safetensors ({problem})") from None

    def shape(self, name: str) -> tuple:
        return self._shapes[name]

    def rows(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows `start:stop` of a weight, read alone."""
        return self._read(name, lambda handle: handle.get_slice(name)[start:stop])

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._file:
            raise KeyError(name)
        return self._read(name, lambda handle: handle.get_tensor(name))

    def _read(self, name, read):
        from safetensors import safe_open

        file = self._file[name]
        try:
            with safe_open(str(file), framework="numpy") as handle:
                return np.array(read(handle))  # a copy: nothing left mapped
        except Exception as problem:
            raise self._error(f"{file}: cannot read {name} ({problem})") from None

    def __contains__(self, name) -> bool:  # Mapping's own would read the weight
        return name in self._file

    def __iter__(self):
        return iter(self._file)

    def __len__(self) -> int:
        return len(self._file)


def _read_h5(path: Path, error) -> dict:
    """tf_model.h5 (transformers' TF classes) -> the PyTorch names and layouts: Dense
    kernels `[in, out]` transposed to `[out, in]`, gamma/beta to weight/bias."""
    import h5py

    weights = {}
    try:
        with h5py.File(path, "r") as file:
            file.visititems(lambda name, item: _h5_weight(weights, name, item))
    except OSError as problem:
        raise error(f"{path}: cannot be read as HDF5 ({problem})") from None
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


__all__ = [
    "GENERATION_KEYS",
    "H5",
    "NEUTRAL_GENERATION",
    "SAFETENSORS",
    "SAFETENSORS_INDEX",
    "Checkpoint",
    "CheckpointError",
    "SafetensorsWeights",
    "number",
    "read_config",
    "read_generation",
    "read_json",
    "read_weights",
]

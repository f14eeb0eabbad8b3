"""What the BART family of Hugging Face transformers' checkpoints shares (Marian and M2M100,
NLLB-200's architecture, are BART-shaped), read once (STYLE 20): config.json and
generation_config.json read and checked, the weights read without torch, the config keys of
the sizes, the map from transformers' weight names to this library's variables, and the
decoding defaults.

A family module follows keras-hub's converter protocol (its `utils/transformers/convert_*.py`)
over these pieces, and keeps only what differs: `convert_config` (config.json -> a
`TransformerConfig`), `convert_weights` (the checkpoint's weights -> a built model's
variables), `convert_tokenizer` (its tokenizer files -> this library's tokenizers), and
`load`, which runs the three (`convert`). `marian` reads OPUS-MT; `m2m100` reads NLLB-200 and
M2M100, whose tokenizers `nllb_vocab` and `m2m100_vocab` read.

Every reader takes `error`, the family's ValueError subclass (`MarianError`, `M2M100Error`),
so a message names the file and the key whichever family reads it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"  # a sharded checkpoint's list of shards
H5 = "tf_model.h5"  # transformers' TF classes' weights
# An output bias that no logit of a trained model comes near: its softmax probability is 0 in
# float32 and float16, and it stays finite, so losses never see inf - inf. The imports give it
# to the second copy of a row that this library's ids need (pad, or the decoder start).
EXCLUDED = -1e4
# transformers' activation names -> Keras's (the same functions).
ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}
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


def bart_sizes(get) -> dict:
    """The `TransformerConfig` arguments that transformers' BART-family configs give under
    the same keys; `get(key, kind=int)` reads one key, checked."""
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


def check_config(config: dict, get, expected: dict, default_activation: str, where, error) -> str:
    """Checks what every BART-family config must hold for this library's model: the values
    `expected` (where config.json sets them), one attention width and feed-forward size for
    both stacks, an activation Keras has. Returns the activation's Keras name."""
    for key, value in expected.items():
        if key in config and config[key] != value:
            raise error(
                f"{where}: {key}={config[key]!r} is not supported (expected {value!r}): "
                "the weights would be laid out for another architecture"
            )
    for stack_key in ("attention_heads", "ffn_dim"):
        encoder, decoder = get(f"encoder_{stack_key}"), get(f"decoder_{stack_key}")
        if encoder != decoder:
            raise error(
                f"{where}: encoder_{stack_key}={encoder} differs from decoder_{stack_key}="
                f"{decoder}; one value for both stacks is supported"
            )
    activation = config.get("activation_function", default_activation)
    if activation not in ACTIVATIONS:
        raise error(
            f"{where}: activation_function={activation!r} is not supported "
            f"(supported: {', '.join(sorted(ACTIVATIONS))})"
        )
    return ACTIVATIONS[activation]


# transformers' attention sublayers and projections -> ours (a decoder layer has both).
ATTENTIONS = (("self_attn", "self_attention"), ("encoder_attn", "cross_attention"))
PROJECTIONS = (
    ("q_proj", "query_dense"),
    ("k_proj", "key_dense"),
    ("v_proj", "value_dense"),
    ("out_proj", "output_dense"),
)


class Weight(NamedTuple):
    """One entry of the weight-name map: transformers' `name` and `shape`, the path of our
    variable from the model (`model.encoder.encoder_layers[0]...` written with dots), and
    whether it is a projection's `[out, in]` matrix, which our kernel holds transposed."""

    name: str
    shape: tuple
    ours: str
    linear: bool


def weight_map(config) -> list[Weight]:
    """Every weight of the layers of a BART-family model (not the embedding table and output
    bias, which each family lays out in its own ids): the attentions' q/k/v/out projections,
    the feed-forward's fc1 and fc2, each sublayer's LayerNorm, and with `norm_first` each
    stack's final LayerNorm (`model.encoder.layer_norm`)."""
    d, ff = config.d_model, config.d_ff
    entries = []

    def linear(name, ours, d_in, d_out):
        entries.append(Weight(f"{name}.weight", (d_out, d_in), f"{ours}.kernel", True))
        entries.append(Weight(f"{name}.bias", (d_out,), f"{ours}.bias", False))

    def norm(name, ours):
        entries.append(Weight(f"{name}.weight", (d,), f"{ours}.gamma", False))
        entries.append(Weight(f"{name}.bias", (d,), f"{ours}.beta", False))

    for stack, count in (
        ("encoder", config.num_encoder_layers),
        ("decoder", config.num_decoder_layers),
    ):
        for i in range(count):
            theirs, ours = f"model.{stack}.layers.{i}", f"{stack}.{stack}_layers.{i}"
            for attention, our_attention in ATTENTIONS[: 1 if stack == "encoder" else 2]:
                for projection, our_projection in PROJECTIONS:
                    linear(
                        f"{theirs}.{attention}.{projection}",
                        f"{ours}.{our_attention}.{our_projection}",
                        d,
                        d,
                    )
                norm(
                    f"{theirs}.{attention}_layer_norm",
                    f"{ours}.{our_attention}_residual.layer_norm",
                )
            linear(f"{theirs}.fc1", f"{ours}.feed_forward.inner_dense", d, ff)
            linear(f"{theirs}.fc2", f"{ours}.feed_forward.output_dense", ff, d)
            norm(f"{theirs}.final_layer_norm", f"{ours}.feed_forward_residual.layer_norm")
        if config.norm_first:
            norm(f"model.{stack}.layer_norm", f"{stack}.final_norm")
    return entries


def variable(model, path: str):
    """The variable at a `Weight.ours` path of `model` (a number indexes a list of layers)."""
    found = model
    for part in path.split("."):
        found = found[int(part)] if part.isdigit() else getattr(found, part)
    return found


def converted(entry: Weight, value, variable_shape) -> np.ndarray:
    """transformers' value of `entry` in our variable's layout: a projection's `[out, in]`
    transposed to `[in, out]` and reshaped as the layer holds it (`[in, heads, depth]` or
    `[heads, depth, out]`: heads major)."""
    value = np.asarray(value, "float32")
    return (value.T if entry.linear else value).reshape(tuple(variable_shape))


# Rows of an embedding table compared at a time (64 MB of NLLB-200's at d_model 1024).
ROWS_AT_ONCE = 16384


def check_weights(weights, shapes: dict, tied: list, path: Path, config, error, allowed=()):
    """Checks a checkpoint's weights against what the model takes, before any is set: every
    name of `shapes` present with that shape, each `(copy, table)` of `tied` (the copies of
    an embedding table that transformers ties to it, which some checkpoints store) equal to
    its table where present, nothing else but `allowed`. `error` names the first weight that
    is not so; `path` is the weights' file."""
    for name, shape in shapes.items():
        if name not in weights:
            raise error(f"{path}: no weight {name!r}")
        found = weights.shape(name) if hasattr(weights, "shape") else np.shape(weights[name])
        if tuple(found) != tuple(shape):
            raise error(
                f"{path}: {name} has shape {list(found)}, config.json implies {list(shape)}"
            )
    for copy, table in tied:
        if copy in weights and not _equal_tables(weights, copy, table):
            raise error(
                f"{path}: {copy} differs from {table}, to which transformers ties it; "
                "untied embeddings are not supported"
            )
    unused = sorted(set(weights) - set(shapes) - {copy for copy, _ in tied} - set(allowed))
    if unused:
        raise error(
            f"{path}: {len(unused)} weights that config.json has no place for, such as "
            f"{', '.join(unused[:3])} (it says {config.num_encoder_layers} encoder and "
            f"{config.num_decoder_layers} decoder layers); importing without them would lose "
            "part of the model"
        )


def _equal_tables(weights, name: str, other: str) -> bool:
    """Whether two weights are equal, compared a block of rows at a time where the weights
    are read when asked (`SafetensorsWeights`), whole otherwise."""
    if not isinstance(weights, SafetensorsWeights):
        return np.array_equal(np.asarray(weights[name]), np.asarray(weights[other]))
    if weights.shape(name) != weights.shape(other):
        return False
    rows = weights.shape(name)[0]
    blocks = [(i, min(i + ROWS_AT_ONCE, rows)) for i in range(0, rows, ROWS_AT_ONCE)]
    return all(
        np.array_equal(weights.rows(name, *block), weights.rows(other, *block)) for block in blocks
    )


def decoding_defaults(generation: dict, where: str, error) -> dict:
    """Decoding settings that generation_config.json sets, in this library's terms:
    `beam_size` (num_beams), `length_penalty` (its exponent, applied to this library's
    penalty) and `max_length` (the longest output, in tokens with EOS: transformers'
    max_length counts the decoder start too). `error` names a value this library's decoding
    cannot take."""

    def setting(key, kind, minimum, rule):
        value = number(generation, key, kind, where, error=error)
        if value < minimum:
            raise error(f"{where}: {key}={value} {rule}")
        return value

    defaults = {}
    if generation.get("num_beams") is not None:
        defaults["beam_size"] = setting("num_beams", int, 1, "must be >= 1")
    if generation.get("length_penalty") is not None:
        defaults["length_penalty"] = setting(
            "length_penalty",
            float,
            0.0,
            "is not supported (this library's length penalty takes exponents >= 0)",
        )
    if generation.get("max_length") is not None:
        defaults["max_length"] = setting("max_length", int, 2, "must be >= 2") - 1
    return defaults


def ignored_generation_settings(generation: dict, target_pad: int | None = None) -> list[str]:
    """The settings of generation_config.json that this library's decoding does not apply,
    as "key=value": those of `NEUTRAL_GENERATION` at other values, and `bad_words_ids` beyond
    the pad id `target_pad` (which the imports never generate, as their output bias has it)."""
    ignored = []
    for key, neutral in NEUTRAL_GENERATION.items():
        value = generation.get(key)
        if value is not None and value != neutral and value not in ([], {}):
            ignored.append(f"{key}={value!r}")
    bad = generation.get("bad_words_ids")
    if bad and bad != [[target_pad]]:
        ignored.append(f"bad_words_ids={bad!r}")
    return ignored


def convert(family, path):
    """keras-hub's protocol run on a checkpoint directory (or the `Checkpoint` that
    `family.read_checkpoint` made of it): `(model, vocabularies)`, a
    `keras_transformer.Transformer` built from `family.convert_config` with every weight set by
    `family.convert_weights`, and `family.convert_tokenizer`'s tokenizers. Everything is read
    and checked before the model is built."""
    from keras_transformer.model import build_transformer, zeros_initialized

    checkpoint = path if isinstance(path, Checkpoint) else family.read_checkpoint(path)
    config = family.convert_config(checkpoint.config, str(checkpoint.path / "config.json"))
    vocabularies = family.convert_tokenizer(checkpoint)
    with zeros_initialized():  # every weight is the checkpoint's
        model = build_transformer(config)
    family.convert_weights(model, checkpoint)
    return model, vocabularies


__all__ = [
    "Checkpoint",
    "SafetensorsWeights",
    "Weight",
    "bart_sizes",
    "check_config",
    "check_weights",
    "convert",
    "decoding_defaults",
    "ignored_generation_settings",
    "number",
    "read_config",
    "read_generation",
    "read_json",
    "read_weights",
    "weight_map",
]

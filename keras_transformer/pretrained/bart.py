"""What the BART family of Hugging Face transformers' checkpoints shares (Marian and M2M100,
NLLB-200's architecture, are BART-shaped) in converting one, written once (STYLE 20): the config
keys of the sizes (`bart_sizes`) and the checks every config passes (`check_config`), the map
from transformers' weight names to this library's variables (`weight_map`) with the weights
checked against it (`check_weights`) and set (`converted`, `assign_rows`), and the decoding
defaults (`decoding_defaults`, `ignored_generation_settings`). `bart_checkpoint` reads the
directory (config.json, generation_config.json, the weights without torch); its names are
offered here too, where they were before.

A family module follows keras-hub's converter protocol (its `utils/transformers/convert_*.py`)
over these pieces, and keeps only what differs: `convert_config` (config.json -> a
`TransformerConfig`), `convert_weights` (the checkpoint's weights -> a built model's
variables), `convert_tokenizer` (its tokenizer files -> this library's tokenizers), and
`load`, which runs the three (`convert`). `marian` reads OPUS-MT (its directory read by
`marian_checkpoint`, its vocabularies by `marian_vocab`); `m2m100` reads NLLB-200 and M2M100,
whose tokenizers `nllb_vocab` and `m2m100_vocab` read.

Every function that refuses takes `error`, the family's ValueError subclass (`MarianError`,
`M2M100Error`), so a message names the file and the key whichever family reads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from keras_transformer.pretrained.bart_checkpoint import (  # noqa: F401 (this module's before)
    GENERATION_KEYS,
    H5,
    NEUTRAL_GENERATION,
    SAFETENSORS,
    SAFETENSORS_INDEX,
    Checkpoint,
    CheckpointError,
    SafetensorsWeights,
    number,
    read_config,
    read_generation,
    read_json,
    read_weights,
)

# An output bias that no logit of a trained model comes near: its softmax probability is 0 in
# float32 and float16, and it stays finite, so losses never see inf - inf. The imports give it
# to the second copy of a row that this library's ids need (pad, or the decoder start).
EXCLUDED = -1e4
# transformers' activation names -> Keras's (the same functions).
ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}


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


def assign_rows(variable, weights, name: str, order: list[int], rows_at_once=ROWS_AT_ONCE):
    """`variable[i] = weights[name][order[i]]`, a block of `rows_at_once` rows at a time, from
    weights read a slice at a time (`SafetensorsWeights.rows`): an embedding table set without
    a second copy of it (`order` is nearly ascending: a block reads about as many rows as it
    writes)."""
    import tensorflow as tf

    # TensorFlow's variable (kt.pretrained needs TensorFlow), updated by scatter: a sliced
    # assign copied the whole 1 GB table first (copy-on-write), a scatter writes in place.
    table = variable.value
    for start in range(0, len(order), rows_at_once):
        ids = np.asarray(order[start : start + rows_at_once])
        low, high = int(ids.min()), int(ids.max()) + 1  # within the table
        block = weights.rows(name, low, high)[ids - low].astype("float32", copy=False)
        rows = tf.range(start, start + len(ids))
        table.scatter_update(tf.IndexedSlices(tf.constant(block), rows))
    # A scatter leaves the variable in TensorFlow's copy-on-read mode, where every dense
    # read (the logits' projection, each decoding step) copies the whole table; no other
    # op writes to it here, so the mode goes.
    tf.raw_ops.DisableCopyOnRead(resource=table.handle)


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


def ignored_generation_settings(
    generation: dict, target_pad: int | None = None, applied: tuple = ()
) -> list[str]:
    """The settings of generation_config.json that this library's decoding does not apply,
    as "key=value": those of `NEUTRAL_GENERATION` at other values (but the keys `applied`,
    which a family turns into decoding settings), and `bad_words_ids` beyond the pad id
    `target_pad` (which the imports never generate)."""
    ignored = []
    for key, neutral in NEUTRAL_GENERATION.items():
        value = generation.get(key)
        if key in applied:
            continue
        if value is not None and value != neutral and value not in ([], {}):
            ignored.append(f"{key}={value!r}")
    bad = generation.get("bad_words_ids")
    if bad and bad != [[target_pad]]:
        ignored.append(f"bad_words_ids={bad!r}")
    return ignored


def provenance(model_type: str, checkpoint: Checkpoint, decoding: dict, ignored: list) -> dict:
    """What the record of an import says of a checkpoint of `model_type`: its format, the
    name and transformers version config.json gives, the generation settings it sets in this
    library's terms (`decoding`, a family's `decoding_defaults`) and those that this library's
    decoding does not apply (`ignored`, `ignored_generation_settings`)."""
    return {
        "format": f"{model_type} (Hugging Face transformers)",
        "name_or_path": checkpoint.config.get("_name_or_path"),
        "transformers_version": checkpoint.config.get("transformers_version"),
        "decoding": decoding,
        "ignored_generation_settings": ignored,
    }


def convert(family, path):
    """keras-hub's protocol run on a checkpoint directory (or the `Checkpoint` that
    `family.read_checkpoint` read and checked; `family` is a `family.CheckpointFamily`):
    `(model, vocabularies)`, a
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
    "assign_rows",
    "bart_sizes",
    "check_config",
    "check_weights",
    "convert",
    "decoding_defaults",
    "ignored_generation_settings",
    "number",
    "provenance",
    "read_config",
    "read_generation",
    "read_json",
    "read_weights",
    "weight_map",
]

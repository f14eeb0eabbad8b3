"""OPUS-MT (Marian) checkpoints in Hugging Face transformers' format, read into this
library's `Transformer` (STYLE 20: the foreign names and layouts live here, in
`marian_checkpoint`, which reads the directory, in `marian_vocab`, which reads its
vocabularies, and in `marian_decoding`, which reads its generation settings; their names are
offered here too). keras-hub's converter protocol: `convert_config`, `convert_weights`,
`convert_tokenizer`, run by `load_marian` (`bart.convert`) on a checkpoint that
`check_checkpoint` checked whole. `FAMILY` offers all of it as a `family.CheckpointFamily`.

A checkpoint is a directory as `huggingface-cli download Helsinki-NLP/opus-mt-en-es
--local-dir PATH` leaves it: `config.json`, `source.spm` and `target.spm` (SentencePiece
models that cut the text), `vocab.json` (the pieces' ids; with separate vocabularies it is the
source's and `target_vocab.json` the target's), `generation_config.json` (decoding defaults)
and the weights, `model.safetensors` or `tf_model.h5`, read without torch.

The architecture is the paper's: post-norm, embeddings scaled by sqrt(d_model), sinusoidal
positions, tied output projection. What Marian does differently is a general option of
`TransformerConfig`: the swish activation (relu in the Tatoeba-Challenge models), the sinusoid
laid out as all sines then all cosines (`sinusoid_layout="concatenated"`), a bias on the output
logits (`output_bias`), LayerNorm's epsilon 1e-5, and separate source and target vocabularies.
Configs written by transformers 3.x carry BART's layout keys (`normalize_before`,
`extra_pos_embeddings`, `add_bias_logits`, `static_position_embeddings`...): accepted at
Marian's values, refused by name at any other.

Ids. Marian numbers a vocabulary eos 0, unk 1, its pieces, pad last, and starts the decoder
with pad. This library uses pad 0, unk 1, bos 2, eos 3 in its masks, data pipeline, decoders
and both exports, so the import permutes the vocabulary once instead of making four ids
configurable in every module: our id i is Marian's `order[i]`, with `<pad>` and `<s>` (the
decoder start) both taken from Marian's start row and the other pieces in Marian's order.
Marian has one such row and we two, so our `<pad>` row gets an output bias of `EXCLUDED`,
which takes it out of the softmax: the distribution over the other ids is transformers' own.
The special pieces may have any ids (tc-big models end sentences with 43311, say). An
embedding table may have one row more than its vocabulary file has ids (config.json's
vocab_size, or decoder_vocab_size with separate vocabularies, one larger): transformers keeps
that row in the softmax, so the import keeps it too, last, as a piece that no text gives and
that decodes to nothing (`EXTRA_PIECE`). With shared embeddings transformers does not use
decoder_vocab_size (every table has vocab_size rows), and neither does the import.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from keras_transformer.config import PAD_ID, TransformerConfig
from keras_transformer.pretrained import bart
from keras_transformer.pretrained.bart import (  # noqa: F401 (the former checkpoint module's)
    EXCLUDED,
    GENERATION_KEYS,
    NEUTRAL_GENERATION,
    bart_sizes,
    ignored_generation_settings,
)
from keras_transformer.pretrained.marian_checkpoint import (  # noqa: F401 (this module's before)
    DEFAULTS,
    MODEL_TYPE,
    TOKENIZER_FILES,
    WEIGHT_FILES,
    Checkpoint,
    MarianError,
    number,
    read_checkpoint,
    read_json,
    shared_embeddings,
    table_rows,
)
from keras_transformer.pretrained.marian_decoding import (  # noqa: F401 (offered here too)
    LENGTH_PENALTY,
    decoding_defaults,
    decoding_settings,
    import_notes,
    refuse_languages,
)
from keras_transformer.pretrained.marian_vocab import (  # noqa: F401 (this module's before)
    EXTRA_PIECE,
    LANGUAGE_TOKEN,
    SPECIAL_TOKENS,
    _orders,
    _vocabularies,
    load_vocabularies,
    pieces,
    vocabulary_order,
)

# Config values our model computes as transformers' Marian does; any other value is refused,
# and so is a config.json that leaves out `scale_embedding` (transformers' default, false,
# is not Marian's layout).
_EXPECTED = {
    "model_type": "marian",
    "scale_embedding": True,
    "normalize_before": False,
    "normalize_embedding": False,
    "add_final_layer_norm": False,
    "static_position_embeddings": True,
    "add_bias_logits": False,
    "tie_word_embeddings": True,
}


def convert_config(config: dict, where: str = "config.json") -> TransformerConfig:
    """The `TransformerConfig` of a Marian config.json (vocabulary sizes in our ids: one more
    row than Marian's, for the second copy of its start row). A key it leaves out takes
    transformers' `MarianConfig` default."""
    if "scale_embedding" not in config:
        raise MarianError(
            f"{where}: no 'scale_embedding'; transformers then reads it as false, which is "
            "not Marian's model (embeddings scaled by sqrt(d_model))"
        )
    _check_position_offset(config, where)

    def get(key, kind=int):
        return number(config, key, kind, where, DEFAULTS[key])

    activation = bart.check_config(
        config, get, _EXPECTED, DEFAULTS["activation_function"], where, MarianError
    )
    shared = shared_embeddings(config, where)
    source_rows, target_rows = table_rows(config, where)
    source_size, target_size = source_rows + 1, target_rows + 1  # our second start row
    try:
        return TransformerConfig(
            vocab_size=target_size,
            source_vocab_size=None if shared else source_size,
            target_vocab_size=None if shared else target_size,
            share_embeddings=shared,
            **bart_sizes(get),
            norm_first=False,
            activation=activation,
            positional="sinusoidal",
            sinusoid_layout="concatenated",
            output_bias=True,
            layer_norm_epsilon=1e-5,
        )
    except ValueError as error:
        raise MarianError(f"{where}: {error}") from None


def _check_position_offset(config: dict, where: str) -> None:
    """`extra_pos_embeddings`, of the BART-based configs of transformers 3.x, offsets learned
    position tables, which Marian's sinusoids do not have; accepted at the values Marian
    configs carry: pad_token_id + 1 (which BartConfig computed for the first conversions) and
    BartConfig's later default, 2."""
    if config.get("extra_pos_embeddings") is None:
        return
    value = number(config, "extra_pos_embeddings", int, where)
    pad = number(config, "pad_token_id", int, where, 58100)  # MarianConfig's default
    if value not in (pad + 1, 2):
        raise MarianError(
            f"{where}: extra_pos_embeddings={value} is not supported (expected pad_token_id + 1 "
            f"= {pad + 1}, or 2, the values Marian's configs carry): it offsets learned "
            "positions, which Marian does not have"
        )


def check_checkpoint(checkpoint: Checkpoint) -> TransformerConfig:
    """Checks a checkpoint whole before anything is built: config.json (`convert_config`),
    the vocabularies against the sizes it gives, and the weights (`bart.check_weights`: every
    one the model takes, of its shape, a tied copy equal to its table, a stored position table
    the sinusoid ours computes). `MarianError` names the first problem. Returns the model's
    `TransformerConfig`."""
    config = convert_config(checkpoint.config, str(checkpoint.path / "config.json"))
    orders = [order for _, order in _orders(checkpoint.path)]
    _check_sizes(checkpoint, config, orders)
    tables, tied = _tables(config, orders)
    shapes = {entry.name: entry.shape for entry in bart.weight_map(config)}
    shapes.update({name: (len(order) - 1, config.d_model) for name, _, order in tables})
    shapes["final_logits_bias"] = (1, len(orders[1]) - 1)  # Marian's rows: ours less <pad>
    weights, path = checkpoint.weights, checkpoint.weights_file
    positions = _check_positions(config, weights, path)
    bart.check_weights(weights, shapes, tied, path, config, MarianError, positions)
    return config


def _check_sizes(checkpoint: Checkpoint, config: TransformerConfig, orders) -> None:
    """The vocabularies' ids (`orders`: the source's, the target's) are as many as the
    embedding tables' rows that config.json gives (with our second start row)."""
    sizes = tuple(len(order) for order in orders)
    if sizes != (config.source_vocab, config.target_vocab):
        raise MarianError(
            f"{checkpoint.path}: the vocabularies have {sizes[0]}/{sizes[1]} ids (with our "
            f"second start row) but {checkpoint.path / 'config.json'} says "
            f"{config.source_vocab}/{config.target_vocab}"
        )


def _tables(config: TransformerConfig, orders):
    """The checkpoint's embedding tables, each `(name, our embedding layer's attribute, our
    order of its rows)`, and the copies that transformers ties to them, `(copy, table)`."""
    source_order, target_order = orders
    if config.share_embeddings:
        tables = [("model.shared.weight", "target_embedding", target_order)]
        copies = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
        return tables, [(copy, "model.shared.weight") for copy in (*copies, "lm_head.weight")]
    tables = [
        ("model.encoder.embed_tokens.weight", "source_embedding", source_order),
        ("model.decoder.embed_tokens.weight", "target_embedding", target_order),
    ]
    return tables, [("lm_head.weight", "model.decoder.embed_tokens.weight")]


def convert_tokenizer(checkpoint: Checkpoint):
    """The source and target tokenizers of a checkpoint, in our ids (`load_vocabularies`),
    checked against the sizes config.json gives."""
    vocabularies, source_order, target_order = _vocabularies(checkpoint.path)
    config = convert_config(checkpoint.config, str(checkpoint.path / "config.json"))
    _check_sizes(checkpoint, config, (source_order, target_order))
    return vocabularies


def load_marian(path):
    """A Marian checkpoint directory (or the `Checkpoint` that `read_checkpoint` made of it)
    as `(model, vocabularies)`: a `keras_transformer.Transformer` holding its weights (in our
    ids, see the module doc) and its tokenizers (`bart.convert`). The checkpoint is checked
    whole (`check_checkpoint`) before the model is built.

    Examples:
        Skipped by the doctests: it needs an OPUS-MT checkpoint downloaded beforehand (the
        Hugging Face model directory of `Helsinki-NLP/opus-mt-en-es`, here).

        >>> from keras_transformer.pretrained import marian
        >>> model, vocabularies = marian.load_marian("opus-mt-en-es")  # doctest: +SKIP

        `model.fit(...)` fine-tunes it; `kt.export.export` serves it.
    """
    return bart.convert(FAMILY, FAMILY.read_checkpoint(path))


def convert_weights(model, checkpoint: Checkpoint) -> None:
    """Sets every weight of `model` (built from `convert_config`) from the checkpoint, which
    `check_checkpoint` checked, in our ids (`vocabulary_order` of each side)."""
    orders = [order for _, order in _orders(checkpoint.path)]
    weights = checkpoint.weights
    for entry in bart.weight_map(model.config):
        variable = bart.variable(model, entry.ours)
        variable.assign(bart.converted(entry, weights[entry.name], variable.shape))
    for name, embedding, order in _tables(model.config, orders)[0]:
        table = getattr(model, embedding).token_embedding.embeddings
        table.assign(np.asarray(weights[name], "float32")[order])
    bias = np.asarray(weights["final_logits_bias"], "float32")[0][orders[1]]
    bias[PAD_ID] = EXCLUDED  # the second copy of the start row: out of the softmax
    model.target_embedding.logits_bias.assign(bias)


def _check_positions(config: TransformerConfig, weights, path: Path) -> list[str]:
    """Where the checkpoint stores its sinusoid tables (tf_model.h5 does), they must be the
    ones our layer computes: a checkpoint laid out otherwise is refused, not mistranslated.
    Returns the names of the tables checked."""
    import keras

    from keras_transformer.layers import SinusoidalPositionEncoding

    encoding = SinusoidalPositionEncoding(
        layout=config.sinusoid_layout, frequencies=config.sinusoid_frequencies, dtype="float32"
    )
    checked = []
    for stack in ("encoder", "decoder"):
        name = f"model.{stack}.embed_positions.weight"
        if name not in weights:
            continue
        stored = np.asarray(weights[name])
        checked.append(name)
        rows = min(stored.shape[0], config.max_length)
        zeros = keras.ops.zeros((1, rows, config.d_model))  # (1, rows, d_model)
        ours = encoding(zeros, start_index=config.position_offset)
        ours = keras.ops.convert_to_numpy(ours).reshape(rows, -1)  # (rows, d_model)
        if stored.shape[1] != ours.shape[1] or not np.allclose(stored[:rows], ours, atol=1e-4):
            raise MarianError(
                f"{path}: the {stack}'s position table is not the sinusoid of sines then "
                "cosines that Marian uses; this checkpoint's positions are not supported"
            )
    return checked


class MarianFamily:
    """OPUS-MT (Marian) checkpoints as a `family.CheckpointFamily`: this module's functions
    behind the contract that every family of checkpoints implements whole."""

    model_type = MODEL_TYPE
    title = "OPUS-MT"

    def read_checkpoint(self, path) -> Checkpoint:
        """The directory (or a `Checkpoint` that `read_checkpoint` read) checked whole:
        `check_checkpoint`."""
        checkpoint = path if isinstance(path, Checkpoint) else read_checkpoint(path)
        check_checkpoint(checkpoint)
        return checkpoint

    def convert_config(self, config: dict, where: str) -> TransformerConfig:
        return convert_config(config, where)

    def convert_tokenizer(self, checkpoint: Checkpoint):
        return convert_tokenizer(checkpoint)

    def convert_weights(self, model, checkpoint: Checkpoint) -> None:
        convert_weights(model, checkpoint)

    def decoding_settings(self, checkpoint: Checkpoint):
        return decoding_settings(checkpoint)

    def with_languages(self, checkpoint: Checkpoint, settings, source_language, target_language):
        """`settings` as they are: `refuse_languages` refuses any language asked for."""
        refuse_languages(checkpoint, source_language, target_language)
        return settings

    def ignored_generation_settings(self, checkpoint: Checkpoint) -> list[str]:
        pad = checkpoint.config.get("pad_token_id")  # never generated: our <pad> row
        return ignored_generation_settings(checkpoint.generation, pad)

    def import_notes(self, checkpoint: Checkpoint, settings) -> list[str]:
        return import_notes(checkpoint)

    def record(self, checkpoint: Checkpoint) -> dict:
        decoding = decoding_defaults(checkpoint.generation, checkpoint.generation_source)
        ignored = self.ignored_generation_settings(checkpoint)
        return bart.provenance(MODEL_TYPE, checkpoint, decoding, ignored)


FAMILY = MarianFamily()
transformer_config = convert_config  # the names these had before the converter protocol


__all__ = [
    "FAMILY",
    "LENGTH_PENALTY",
    "Checkpoint",
    "MarianError",
    "MarianFamily",
    "check_checkpoint",
    "convert_config",
    "convert_tokenizer",
    "convert_weights",
    "decoding_defaults",
    "decoding_settings",
    "ignored_generation_settings",
    "import_notes",
    "load_marian",
    "load_vocabularies",
    "pieces",
    "read_checkpoint",
    "read_json",
    "refuse_languages",
    "shared_embeddings",
    "table_rows",
    "transformer_config",
    "vocabulary_order",
]

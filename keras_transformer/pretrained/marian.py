"""OPUS-MT (Marian) checkpoints in Hugging Face transformers' format, read into this
library's `Transformer` (STYLE 20: the foreign names and layouts live here alone).

A checkpoint is a directory as `huggingface-cli download Helsinki-NLP/opus-mt-en-es
--local-dir PATH` leaves it: `config.json`, `source.spm` and `target.spm` (SentencePiece
models that cut the text), `vocab.json` (the pieces' ids; with separate vocabularies it is the
source's and `target_vocab.json` the target's), `generation_config.json` (decoding defaults)
and the weights, `model.safetensors` or `tf_model.h5`, read without torch.

The architecture is the paper's: post-norm, embeddings scaled by sqrt(d_model), sinusoidal
positions, tied output projection. What Marian does differently is a general option of
`TransformerConfig`: the swish activation, the sinusoid laid out as all sines then all
cosines (`sinusoid_layout="concatenated"`), a bias on the output logits (`output_bias`),
LayerNorm's epsilon 1e-5, and separate source and target vocabularies.

Ids. Marian numbers a vocabulary eos 0, unk 1, its pieces, pad last, and starts the decoder
with pad. This library uses pad 0, unk 1, bos 2, eos 3 in its masks, data pipeline, decoders
and both exports, so the import permutes the vocabulary once instead of making four ids
configurable in every module: our id i is Marian's `order[i]`, with `<pad>` and `<s>` (the
decoder start) both taken from Marian's start row and the other pieces in Marian's order.
Marian has one such row and we two, so our `<pad>` row gets an output bias of `EXCLUDED`,
which takes it out of the softmax: the distribution over the other ids is transformers' own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from keras_transformer.config import PAD_ID, TransformerConfig
from keras_transformer.pretrained.checkpoint import (  # noqa: F401 (read_checkpoint: public)
    Checkpoint,
    MarianError,
    read_checkpoint,
    read_json,
)
from keras_transformer.pretrained.tokenizer import SPECIAL_PIECES, PieceVocabularyTokenizer
from keras_transformer.text import BOS_ID, EOS_ID, UNK_ID

# An output bias that no logit of a trained model comes near: its softmax probability is 0
# in float32 and float16, and it stays finite, so losses never see inf - inf.
EXCLUDED = -1e4
# transformers' MarianTokenizer keeps a leading ">>xx<<" (a multilingual model's target
# language) as one token; the rest goes to SentencePiece.
LANGUAGE_TOKEN = ">>.*?<<"
# Strings that transformers' MarianTokenizer reads as one special token wherever they are in
# the text, and our ids for them: its pad is a real token in an input (its start row, our
# <s>), never our padding id.
SPECIAL_TOKENS = {"</s>": EOS_ID, "<unk>": UNK_ID, "<pad>": BOS_ID}
# Config values our model computes as transformers' Marian does; any other value is refused.
_EXPECTED = {
    "model_type": "marian",
    "scale_embedding": True,
    "normalize_before": False,
    "normalize_embedding": False,
    "add_final_layer_norm": False,
    "static_position_embeddings": True,
    "tie_word_embeddings": True,
}
# transformers' activation names -> Keras's (the same functions).
_ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}


def transformer_config(config: dict, where: str = "config.json") -> TransformerConfig:
    """The `TransformerConfig` of a Marian config.json (vocabulary sizes in our ids: one more
    row than Marian's, for the second copy of its start row)."""
    for key, expected in _EXPECTED.items():
        if key in config and config[key] != expected:
            raise MarianError(
                f"{where}: {key}={config[key]!r} is not supported (expected {expected!r}): "
                "the weights would be laid out for another architecture"
            )
    pairs = [
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ]
    for encoder_key, decoder_key in pairs:
        if config.get(encoder_key) != config.get(decoder_key):
            raise MarianError(
                f"{where}: {encoder_key}={config.get(encoder_key)} differs from "
                f"{decoder_key}={config.get(decoder_key)}; one value for both stacks is supported"
            )
    activation = config.get("activation_function", "swish")
    if activation not in _ACTIVATIONS:
        raise MarianError(
            f"{where}: activation_function={activation!r} is not supported "
            f"(supported: {', '.join(sorted(_ACTIVATIONS))})"
        )
    shared = bool(config.get("share_encoder_decoder_embeddings", True))
    source_size = int(config["vocab_size"]) + 1
    target_size = int(config.get("decoder_vocab_size") or config["vocab_size"]) + 1
    if shared and source_size != target_size:
        raise MarianError(
            f"{where}: share_encoder_decoder_embeddings is true but vocab_size="
            f"{config['vocab_size']} != decoder_vocab_size={config.get('decoder_vocab_size')}"
        )
    try:
        return TransformerConfig(
            vocab_size=target_size,
            source_vocab_size=None if shared else source_size,
            target_vocab_size=None if shared else target_size,
            share_embeddings=shared,
            d_model=int(config["d_model"]),
            num_heads=int(config["encoder_attention_heads"]),
            d_ff=int(config["encoder_ffn_dim"]),
            num_encoder_layers=int(config["encoder_layers"]),
            num_decoder_layers=int(config["decoder_layers"]),
            dropout=float(config.get("dropout", 0.1)),
            attention_dropout=float(config.get("attention_dropout", 0.0)),
            activation_dropout=float(config.get("activation_dropout", 0.0)),
            max_length=int(config["max_position_embeddings"]),
            norm_first=False,
            activation=_ACTIVATIONS[activation],
            positional="sinusoidal",
            sinusoid_layout="concatenated",
            output_bias=True,
            layer_norm_epsilon=1e-5,
        )
    except KeyError as error:
        raise MarianError(f"{where}: no {error.args[0]!r}") from None
    except ValueError as error:
        raise MarianError(f"{where}: {error}") from None


def vocabulary_order(vocab: dict, config: dict, where: str = "vocab.json") -> list[int]:
    """`order[i]` is the Marian id of our id i: pad, unk, bos (the decoder start), eos, then
    the other pieces in Marian's order. Marian's start row appears twice (pad and bos)."""
    size = len(vocab)
    ids = sorted(vocab.values())
    if ids != list(range(size)):
        raise MarianError(f"{where}: the ids are not 0..{size - 1}, each once")
    pad = int(config.get("pad_token_id", size - 1))
    start = int(config.get("decoder_start_token_id", pad))
    eos = int(config.get("eos_token_id", 0))
    if "<unk>" not in vocab:
        raise MarianError(f"{where}: no <unk> piece")
    unk = int(vocab["<unk>"])
    for name, value in (("pad_token_id", pad), ("eos_token_id", eos)):
        if not 0 <= value < size:
            raise MarianError(f"{where}: {name}={value} is outside its {size} ids")
    if start != pad:
        raise MarianError(
            f"{where}: decoder_start_token_id={start} differs from pad_token_id={pad}; "
            "only Marian's own convention (the decoder starts with pad) is supported"
        )
    return [pad, unk, pad, eos] + [i for i in range(size) if i not in {pad, unk, eos}]


def pieces(vocab: dict, order: list[int]) -> list[str]:
    """The pieces of our ids, in our order: the special ones under this library's names."""
    by_id = {int(i): piece for piece, i in vocab.items()}
    return [*SPECIAL_PIECES, *(by_id[i] for i in order[len(SPECIAL_PIECES) :])]


def load_vocabularies(directory):
    """The source and target tokenizers of a checkpoint directory, in our ids:
    `keras_transformer.text.Vocabularies` (which an imported model's vocab/ saves as
    source.spm, target.spm and pieces.json)."""
    return _vocabularies(Path(directory))[0]


def _vocabularies(directory: Path):
    """(Vocabularies, source order, target order): each vocabulary file read once. The target
    side has its own `target_vocab.json` when the checkpoint has one (separate
    vocabularies), else shares `vocab.json`."""
    from keras_transformer.text import Vocabularies

    config = read_json(directory / "config.json") if (directory / "config.json").exists() else {}
    target_file = directory / "target_vocab.json"
    sides = []
    for spm, file in (
        ("source.spm", directory / "vocab.json"),
        ("target.spm", target_file if target_file.exists() else directory / "vocab.json"),
    ):
        vocab = read_json(file)
        order = vocabulary_order(vocab, config, str(file))
        tokenizer = PieceVocabularyTokenizer(
            (directory / spm).read_bytes(),
            pieces(vocab, order),
            prefix_pattern=LANGUAGE_TOKEN,
            special_tokens=SPECIAL_TOKENS,
        )
        sides.append((tokenizer, order))
    (source, source_order), (target, target_order) = sides
    return Vocabularies(source, target), source_order, target_order


def decoding_defaults(generation: dict) -> dict:
    """Decoding settings that generation_config.json sets, in this library's terms:
    `beam_size` (num_beams) and `max_length` (the longest output, in tokens with EOS:
    transformers' max_length counts the decoder start too)."""
    defaults = {}
    if "num_beams" in generation:
        defaults["beam_size"] = int(generation["num_beams"])
    if "max_length" in generation:
        defaults["max_length"] = int(generation["max_length"]) - 1
    return defaults


def load_marian(path):
    """A Marian checkpoint directory as `(model, vocabularies)`: a `keras_transformer.Transformer`
    holding its weights (in our ids, see the module doc) and its tokenizers.

    Example:
    >>> # model, vocabularies = load_marian("opus-mt-en-es")
    >>> # model.fit(...) fine-tunes it; kt.export.export_saved_model serves it.
    """
    from keras_transformer.model import build_transformer

    checkpoint = read_checkpoint(path)
    where = str(checkpoint.path / "config.json")
    config = transformer_config(checkpoint.config, where)
    vocabularies, source_order, target_order = _vocabularies(checkpoint.path)
    sizes = (len(source_order), len(target_order))
    if sizes != (config.source_vocab, config.target_vocab):
        raise MarianError(
            f"{checkpoint.path}: the vocabularies have {sizes[0]}/{sizes[1]} ids (with our "
            f"second start row) but {where} says {config.source_vocab}/{config.target_vocab}"
        )
    model = build_transformer(config)
    assign_weights(model, checkpoint, source_order, target_order)
    return model, vocabularies


def assign_weights(model, checkpoint: Checkpoint, source_order, target_order) -> None:
    """Sets every weight of `model` (built from `transformer_config`) from the checkpoint;
    `MarianError` names a missing weight or one of another shape. The checkpoint is
    checked whole before any weight is set."""
    weights, path = checkpoint.weights, checkpoint.weights_file
    config = model.config
    d = config.d_model
    values = []  # (variable, value), all checked before the first assignment

    def take(name, shape):
        if name not in weights:
            raise MarianError(f"{path}: no weight {name!r}")
        value = np.asarray(weights[name], "float32")
        if value.shape != tuple(shape):
            raise MarianError(
                f"{path}: {name} has shape {list(value.shape)}, the config implies {list(shape)}"
            )
        return value

    def linear(dense, name, d_in, d_out):
        """transformers' `[out, in]` weight into our kernel, laid out as the layer's own
        (`[in, out]`, `[in, heads, depth]` or `[heads, depth, out]`: heads major)."""
        kernel = take(f"{name}.weight", (d_out, d_in)).T  # (in, out)
        values.append((dense.kernel, kernel.reshape(tuple(dense.kernel.shape))))
        values.append((dense.bias, take(f"{name}.bias", (d_out,)).reshape(dense.bias.shape)))

    def attention(layer, name):
        for ours, theirs in (("query", "q"), ("key", "k"), ("value", "v"), ("output", "out")):
            linear(getattr(layer, f"{ours}_dense"), f"{name}.{theirs}_proj", d, d)

    def norm(residual, name):
        values.append((residual.layer_norm.gamma, take(f"{name}.weight", (d,))))
        values.append((residual.layer_norm.beta, take(f"{name}.bias", (d,))))

    def feed_forward(layer, name):
        ff = config.d_ff
        linear(layer.feed_forward.inner_dense, f"{name}.fc1", d, ff)
        linear(layer.feed_forward.output_dense, f"{name}.fc2", ff, d)
        norm(layer.feed_forward_residual, f"{name}.final_layer_norm")

    for i, layer in enumerate(model.encoder.encoder_layers):
        name = f"model.encoder.layers.{i}"
        attention(layer.self_attention, f"{name}.self_attn")
        norm(layer.self_attention_residual, f"{name}.self_attn_layer_norm")
        feed_forward(layer, name)
    for i, layer in enumerate(model.decoder.decoder_layers):
        name = f"model.decoder.layers.{i}"
        attention(layer.self_attention, f"{name}.self_attn")
        norm(layer.self_attention_residual, f"{name}.self_attn_layer_norm")
        attention(layer.cross_attention, f"{name}.encoder_attn")
        norm(layer.cross_attention_residual, f"{name}.encoder_attn_layer_norm")
        feed_forward(layer, name)

    marian_target = len(target_order) - 1  # Marian's rows: ours less the second start row
    if config.share_embeddings:
        table = take("model.shared.weight", (marian_target, d))
        values.append((model.target_embedding.token_embedding.embeddings, table[target_order]))
    else:
        source = take("model.encoder.embed_tokens.weight", (len(source_order) - 1, d))
        target = take("model.decoder.embed_tokens.weight", (marian_target, d))
        values.append((model.source_embedding.token_embedding.embeddings, source[source_order]))
        values.append((model.target_embedding.token_embedding.embeddings, target[target_order]))
    bias = take("final_logits_bias", (1, marian_target))[0][target_order]
    bias[PAD_ID] = EXCLUDED  # the second copy of the start row: out of the softmax
    values.append((model.target_embedding.logits_bias, bias))
    _check_positions(model, weights, path)
    for variable, value in values:
        variable.assign(value)


def _check_positions(model, weights: dict, path: Path) -> None:
    """Where the checkpoint stores its sinusoid tables (tf_model.h5 does), they must be the
    ones our layer computes: a checkpoint laid out otherwise is refused, not mistranslated."""
    import keras

    stacks = (("encoder", model.source_embedding), ("decoder", model.target_embedding))
    for stack, embedding in stacks:
        stored = weights.get(f"model.{stack}.embed_positions.weight")
        if stored is None:
            continue
        rows = min(stored.shape[0], embedding.max_length)
        ours = keras.ops.convert_to_numpy(
            embedding.positions(keras.ops.zeros((1, rows, embedding.d_model), "float32"))
        ).reshape(rows, -1)
        if stored.shape[1] != ours.shape[1] or not np.allclose(stored[:rows], ours, atol=1e-4):
            raise MarianError(
                f"{path}: the {stack}'s position table is not the sinusoid of sines then "
                "cosines that Marian uses; this checkpoint's positions are not supported"
            )

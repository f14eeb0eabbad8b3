"""A CTranslate2 model directory from a trained `Transformer`: the C++ engine OpenNMT serves with.

CTranslate2 (https://opennmt.net/CTranslate2) converts OpenNMT, Fairseq, Marian and Hugging
Face models, but not Keras ones. This module maps a `keras_transformer.Transformer` onto its
`TransformerSpec` weight by weight:

- token embeddings (times sqrt(d_model), as `scale_embeddings` does) and, since CTranslate2's
  built-in sinusoid concatenates sines and cosines where ours interleaves them (paper 3.5),
  our position table itself (`config.max_length` rows, sinusoidal or learned, from the
  `position_offset`: NLLB's positions count from 2);
- each attention's query/key/value projections fused into one linear layer (self-attention)
  or query and key+value (encoder-decoder attention), heads in our order;
- the feed-forward network, every layer norm (with `config.layer_norm_epsilon`), pre- or
  post-norm (`norm_first`, with the final norm of a pre-norm stack), the activation;
- the output projection: the tied embedding matrix (stored once: CTranslate2 aliases equal
  weights) or its own matrix, and the output bias when the model has one.

A model CTranslate2 cannot run (an activation it lacks) is refused with a `ValueError` that
says why. The directory holds CTranslate2's `model.bin`, `config.json` and vocabularies, our
SentencePiece models (`shared.model`, or `source.model` and `target.model`) and
`manifest.json` (`kt._manifest.write_manifest`'s, as every export's: this package's version,
the model config, the weights' type as `quantize` and as CTranslate2's `quantization`; then
the decoding settings with the source and target prefixes, special ids, and the arguments of
CTranslate2's `translate_batch` that carry them: `ctranslate2_options`). Running it needs
only `ctranslate2` and `sentencepiece`: its runtime is `kt.serving.CTranslate2Translator`
(`trainers.translate --model DIR` runs it, without TensorFlow). Writing it needs the optional
`ctranslate2` package (`pip install keras-transformer[ctranslate2]`).
"""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np

from keras_transformer._deprecation import deprecated
from keras_transformer._files import atomic_directory
from keras_transformer._manifest import write_manifest
from keras_transformer.decoding.settings import (
    DecodingSettings,
    check_source_prefix,
    check_target_prefix,
)
from keras_transformer.export.savedmodel import resolve_model
from keras_transformer.serving.ctranslate2 import FORMAT, MANIFEST
from keras_transformer.text import EOS_ID

# Keras activation names -> CTranslate2's `Activation` members. Keras's "gelu" is the exact
# (erf) form: CTranslate2's GELU, not its tanh approximation.
ACTIVATIONS = {
    "relu": "RELU",
    "gelu": "GELU",
    "silu": "SWISH",
    "swish": "SWISH",
    "tanh": "Tanh",
    "sigmoid": "Sigmoid",
}


def _ctranslate2():
    try:
        import ctranslate2
    except ImportError as error:  # an optional extra
        raise ImportError(
            "the CTranslate2 export needs the ctranslate2 package: "
            "pip install 'keras-transformer[ctranslate2]'"
        ) from error
    return ctranslate2


def check_convertible(config) -> None:
    """Raises `ValueError` naming what CTranslate2 cannot represent in a model of `config`."""
    if config.activation not in ACTIVATIONS:
        raise ValueError(
            f"activation={config.activation!r}: CTranslate2 supports "
            f"{', '.join(sorted(ACTIVATIONS))} only"
        )


def transformer_spec(model, vocabularies):
    """The `ctranslate2.specs.TransformerSpec` of a trained model, its weights set."""
    _ctranslate2()
    from ctranslate2.specs import common_spec
    from ctranslate2.specs import transformer_spec as specs

    config = model.config
    check_convertible(config)
    spec = specs.TransformerSpec.from_config(
        (config.num_encoder_layers, config.num_decoder_layers),
        config.num_heads,
        pre_norm=config.norm_first,
        activation=common_spec.Activation[ACTIVATIONS[config.activation]],
    )
    spec.config.layer_norm_epsilon = float(config.layer_norm_epsilon)
    spec.config.add_source_eos = True  # our sources end with EOS; targets start with BOS

    encoder, decoder = spec.encoder, spec.decoder
    _set_embedding(encoder.embeddings[0], encoder.position_encodings, model.source_embedding)
    _set_embedding(decoder.embeddings, decoder.position_encodings, model.target_embedding)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder.encoder_layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attention, fused=True)
        _set_norm(layer_spec.self_attention.layer_norm, layer.self_attention_residual.layer_norm)
        _set_feed_forward(layer_spec.ffn, layer)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder.decoder_layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attention, fused=True)
        _set_norm(layer_spec.self_attention.layer_norm, layer.self_attention_residual.layer_norm)
        _set_attention(layer_spec.attention, layer.cross_attention, fused=False)
        _set_norm(layer_spec.attention.layer_norm, layer.cross_attention_residual.layer_norm)
        _set_feed_forward(layer_spec.ffn, layer)
    if config.norm_first:
        _set_norm(spec.encoder.layer_norm, model.encoder.final_norm)
        _set_norm(spec.decoder.layer_norm, model.decoder.final_norm)

    token_embedding = model.target_embedding.token_embedding
    if token_embedding.tie_weights:
        spec.decoder.projection.weight = spec.decoder.embeddings.weight  # x E^T
    else:
        spec.decoder.projection.weight = _numpy(token_embedding.reverse_embeddings).T
    if model.target_embedding.logits_bias is not None:
        spec.decoder.projection.bias = _numpy(model.target_embedding.logits_bias)

    spec.register_source_vocabulary(_pieces(vocabularies.source))
    spec.register_target_vocabulary(_pieces(vocabularies.target))
    return spec


def write(
    model,
    path,
    *,
    vocabularies=None,
    decoding: DecodingSettings | None = None,
    quantize: str | None = None,
    manifest: dict | None = None,
) -> Path:
    """Writes `path`, a CTranslate2 model of `model` (see the module doc): the CTranslate2
    format's writer, `kt.export.export(task, path, format="ctranslate2")`.

    Args:
        model: a `TransformerSeq2SeqLM`, a directory `TransformerSeq2SeqLM.from_preset`
            loads, or a trained `keras_transformer.Transformer` (with `vocabularies`).
        path: str or path. The directory to write; must not exist yet (written
            atomically).
        vocabularies: its `keras_transformer.text.Vocabularies`; None takes the task's.
            Defaults to None.
        decoding: `kt.decoding.DecodingSettings` or None: the settings recorded in the
            manifest for the directory's runtime, `CTranslate2Translator` (beam size, length
            penalty, extra length, the source prefix it puts in front of each source, the
            target prefix it forces, the ranking: "length" is CTranslate2's own, "gnmt" a
            re-ranking of its hypotheses, `ctranslate2_decoding`). The stopping and finish
            rules are CTranslate2's own. None takes the task's, or the defaults (the
            paper's). Defaults to None.
        quantize: str or None. CTranslate2's weight type ("int8", "int8_float32", "int16",
            "float16"...: its `quantization`); None keeps float32. Defaults to None.
        manifest: dict or None. Extra facts for `manifest.json`. Defaults to None.

    Returns:
        The directory written.

    Raises:
        FileExistsError: `path` exists.
        ValueError: a setting, or a model, CTranslate2 cannot hold (before anything is
            written).
        ImportError: the optional `ctranslate2` package is missing.

    Examples:
        Skipped by the doctests: it needs a trained model (`docs/` runs one).

        >>> import keras_transformer as kt  # doctest: +SKIP
        >>> task = kt.models.TransformerSeq2SeqLM.from_preset("runs/demo")  # doctest: +SKIP
        >>> kt.export.export(task, "saved_models/demo-ct2", format="ctranslate2")  # doctest: +SKIP
    """
    model, vocabularies, directory, settings = resolve_model(model, vocabularies, path, decoding)
    check_target_prefix(settings.target_prefix, vocabularies.target)
    check_source_prefix(settings.source_prefix, vocabularies.source)
    if directory.exists():
        raise FileExistsError(f"{directory} exists; choose a new directory")
    spec = transformer_spec(model, vocabularies)
    spec.validate()
    spec.optimize(quantization=quantize)
    names = list(vocabularies.files)  # ["shared.model"] or ["source.model", "target.model"]
    directory.parent.mkdir(parents=True, exist_ok=True)
    with atomic_directory(directory) as temporary:
        temporary.mkdir()
        spec.save(str(temporary))
        vocabularies.write(temporary)
        write_manifest(
            temporary / MANIFEST,
            model_config=model.config.to_dict(),
            quantize=quantize or "float32",
            facts={
                "format": FORMAT,
                "quantization": quantize or "float32",  # CTranslate2's name, as before
                **_facts(model, vocabularies, settings, names),
            },
            extra=manifest,
        )
    return directory


def _facts(model, vocabularies, settings: DecodingSettings, names: list[str]) -> dict:
    """The manifest's `vocabulary` and `decoding` facts: what the runtime reads."""
    return {
        "vocabulary": {
            "source": names[0],
            "target": names[-1],
            "special_ids": {"pad": 0, "unk": 1, "bos": 2, "eos": EOS_ID},
            **_piece_rules(vocabularies),
        },
        "decoding": {
            "beam_size": settings.beam_size,
            "length_penalty": settings.length_penalty,
            "max_extra_length": settings.max_extra_length,
            "max_length": model.config.max_length,
            "target_prefix": settings.target_prefix,
            "source_prefix": settings.source_prefix,
            **ctranslate2_decoding(settings),
        },
    }


@deprecated(
    "keras_transformer.export.ctranslate2.export_ctranslate2",
    "keras_transformer.export.export(model, path, format='ctranslate2', quantize=..., ...)",
)
def export_ctranslate2(
    model,
    vocabularies=None,
    directory=None,
    *,
    quantization: str | None = None,
    decoding: DecodingSettings | None = None,
    beam_size: int | None = None,
    length_penalty: float | None = None,
    max_extra_length: int | None = None,
    manifest: dict | None = None,
    target_prefix: str | None = None,
    ranking: str | None = None,
    source_prefix: str | None = None,
) -> Path:
    """Deprecated: `kt.export.export(model, directory, format="ctranslate2",
    quantize=quantization, ...)` under its former name, with its former arguments: the same
    directory (`write`), and a DeprecationWarning. It goes in the next release.

    `export_ctranslate2(task, directory)` exports a `TransformerSeq2SeqLM` (or the preset or
    model directory it loads from) with its vocabulary and decoding settings.

    Args:
        model: as `write`'s, with `vocabularies`, `decoding` and `manifest`.
        vocabularies: its `keras_transformer.text.Vocabularies`, or None.
        directory: str or path. `write`'s `path`.
        quantization: str or None. `write`'s `quantize`: CTranslate2's weight type.
        decoding: `kt.decoding.DecodingSettings` or None.
        beam_size: int or None. When given, overrides that setting of `decoding`, as do
            `length_penalty`, `max_extra_length`, `target_prefix`, `ranking` and
            `source_prefix` (`kt.export.export` takes the settings alone:
            `decoding=settings.replace(beam_size=...)`).
        length_penalty: float or None.
        max_extra_length: int or None.
        manifest: dict or None.
        target_prefix: str or None.
        ranking: str or None.
        source_prefix: str or None.

    Returns:
        The directory written.
    """
    model, vocabularies, directory, settings = resolve_model(
        model,
        vocabularies,
        directory,
        decoding,
        beam_size=beam_size,
        length_penalty=length_penalty,
        max_extra_length=max_extra_length,
        target_prefix=target_prefix,
        ranking=ranking,
        source_prefix=source_prefix,
    )
    return write(
        model,
        directory,
        vocabularies=vocabularies,
        decoding=settings,
        quantize=quantization,
        manifest=manifest,
    )


def ctranslate2_decoding(settings: DecodingSettings) -> dict:
    """How translators of the directory decode with `settings`, in `manifest.json`'s
    `decoding`: the ranking, the rules CTranslate2's beam search then follows in this
    library's terms (`finish_rule`, `stopping`: None where it has none of ours), and
    `ctranslate2_options`, the arguments of `translate_batch` that its runtime
    (`kt.serving.CTranslate2Translator`) applies beside the beam size, the length limit and
    the target prefix.

    CTranslate2 finishes the hypotheses ending in EOS among the k best extensions (fairseq's
    rule) and, with a length penalty, stops once k have finished, ranking them by logP /
    |Y| ** alpha, |Y| counting EOS and the target prefix: ours with `ranking="length"`,
    `finish_rule="fairseq"`, `stopping="k_finished"`. `min_decoding_length` 0 lets it end at
    the first step as ours may (its default, 1, takes EOS out of the first step's softmax).
    Without a length penalty (alpha 0, or "gnmt", for which it ranks by log-probability
    alone and translators rank its k hypotheses anew) it stops once k have finished and its
    best candidate has ended, a rule of its own."""
    length = settings.ranking == "length"
    return {
        "ranking": settings.ranking,
        "finish_rule": "fairseq",
        "stopping": "k_finished" if length and settings.length_penalty else None,
        "ctranslate2_options": {
            "num_hypotheses": settings.beam_size,
            "length_penalty": settings.length_penalty if length else 0.0,
            "min_decoding_length": 0 if length else 1,
            "suppress_sequences": [["<pad>"], ["<s>"]],  # never generated, as in our search
        },
    }


def _numpy(variable) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(variable), dtype="float32")


def _piece_rules(vocabularies) -> dict:
    """How a translator of the directory cuts text into the pieces CTranslate2 numbers: for
    piece vocabularies (an imported OPUS-MT model's `PieceVocabularyTokenizer`s), their
    prefix token and special tokens, which its runtime (`kt.serving.PieceRules`) applies
    around SentencePiece as the SavedModel does, and NLLB's rules (`NllbTokenizer`'s class
    doc); nothing for a plain SentencePiece vocabulary."""
    if not vocabularies.pieces:
        return {}
    source = vocabularies.source
    pieces = source.get_vocabulary()
    rules = {
        "prefix_pattern": source.prefix_pattern,
        "special_tokens": {t: pieces[i] for t, i in source.special_tokens.items()},
    }
    if hasattr(source, "language_codes"):  # NLLB's tokenizer, or M2M100's (kt.tokenizers)
        rules.update(
            lstrip_tokens=list(source.lstrip_tokens),
            rstrip_tokens=list(source.rstrip_tokens),
            # NLLB's: a segment ending in whitespace ends with "▁", and decoding keeps the
            # text's end; M2M100's: neither, decoding strips the text.
            trailing_whitespace_piece=source.trailing_whitespace_piece,
            decode_skips_special_tokens=True,  # language codes, <mask>... left out
        )
    return {"pieces": rules}


def _pieces(tokenizer) -> list[str]:
    """The SentencePiece model's pieces, by id (CTranslate2 speaks tokens, not ids)."""
    return list(tokenizer.get_vocabulary())


def _set_embedding(embedding_spec, positions_spec, layer) -> None:
    embedding_spec.weight = _numpy(layer.token_embedding.embeddings)
    rows = layer.max_length
    if layer.positional == "learned":
        table = _numpy(layer.position_embedding.embeddings)
    else:  # our own layer computes the table: the same floats as in training
        table = _numpy(layer.positions(keras.ops.zeros((1, rows, layer.d_model), "float32")))
    positions_spec.encodings = table.reshape(rows, layer.d_model)


def _linear(dense) -> tuple[np.ndarray, np.ndarray | None]:
    """A projection as CTranslate2's `[out, in]` weight and bias (EinsumDense kernels of
    `[in, heads, depth]` or `[heads, depth, out]` flatten heads-major, as its heads split)."""
    kernel = _numpy(dense.kernel)
    if kernel.ndim == 3 and dense.equation.startswith("abcd"):  # the output: [heads, depth, out]
        kernel = kernel.reshape(-1, kernel.shape[-1])
    else:  # [in, heads, depth] or [in, out]
        kernel = kernel.reshape(kernel.shape[0], -1)
    bias = None if dense.bias is None else _numpy(dense.bias).reshape(-1)
    return kernel.T, bias


def _set_linear(spec, parts) -> None:
    weights, biases = zip(*parts, strict=True)
    spec.weight = np.concatenate(weights)
    if any(b is not None for b in biases):
        spec.bias = np.concatenate(
            [
                np.zeros(w.shape[0], "float32") if b is None else b
                for w, b in zip(weights, biases, strict=True)
            ]
        )


def _set_attention(spec, attention, *, fused: bool) -> None:
    query, key, value = (
        _linear(attention.query_dense),
        _linear(attention.key_dense),
        _linear(attention.value_dense),
    )
    if fused:  # self-attention: one projection to queries, keys and values
        _set_linear(spec.linear[0], [query, key, value])
    else:  # encoder-decoder attention: queries from the decoder, keys and values from memory
        _set_linear(spec.linear[0], [query])
        _set_linear(spec.linear[1], [key, value])
    _set_linear(spec.linear[-1], [_linear(attention.output_dense)])


def _set_feed_forward(spec, layer) -> None:
    _set_linear(spec.linear_0, [_linear(layer.feed_forward.inner_dense)])
    _set_linear(spec.linear_1, [_linear(layer.feed_forward.output_dense)])
    _set_norm(spec.layer_norm, layer.feed_forward_residual.layer_norm)


def _set_norm(spec, norm) -> None:
    spec.gamma = _numpy(norm.gamma)
    spec.beta = _numpy(norm.beta)


__all__ = [
    "MANIFEST",
    "check_convertible",
    "ctranslate2_decoding",
    "export_ctranslate2",
    "transformer_spec",
    "write",
]

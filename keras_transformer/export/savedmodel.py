"""A SavedModel for TF Serving: raw strings in, translations out.

`export_saved_model` writes `DIRECTORY/VERSION/` (TF Serving's layout) with four signatures
(six with `serving_prefix` and `serving_languages`):

- `serving_default`: input `text` (string `[batch]`) -> outputs `translation` (string
  `[batch]`) and `score` (float32 `[batch]`, the beam's length-normalised log-probability).
- `serving_xla`: `serving_default` with the search compiled by XLA (several times faster on
  CPU; BENCHMARKS.md). A request is sorted by length and decoded in chunks of
  `CHUNK_ROWS` decoder rows (8 sentences with beam 4, 32 greedy), so that short sentences
  do not wait for the longest; each chunk is padded to a shape bucket (batch to a power of
  two, at least 2 for greedy search; length to a multiple of 16) and each bucket compiles
  once, on its first request. TF Serving runs it only when started with
  `--xla_cpu_compilation_enabled=true` (off by default: without it a request to this
  signature fails and the others still work); `tf.saved_model.load` runs it as it is.
- `n_best`: input `text` -> outputs `translations` (string `[batch, n]`) and `scores`
  (float32 `[batch, n]`): the settings' `n_best` hypotheses when above 1, else every one of
  the beam, best first (the search runs until none of them can be beaten, so it can take
  longer than `serving_default`).
- `serving_prefix` (written when asked, and for a vocabulary with language codes: NLLB-200's):
  inputs `text` and `target_prefix` (string `[batch]`: each translation's forced start, cut
  by the target vocabulary; NLLB's target language code, "spa_Latn") -> outputs
  `translation` and `score`, as `serving_default`. The translation holds the prefix's text
  (a language code, a special token, is left out of it).
- `serving_languages` (written with `serving_prefix`): inputs `text`, `source_prefix` and
  `target_prefix` (string `[batch]`): both languages per sentence, NLLB's "eng_Latn" and
  "spa_Latn" ("" for no prefix; a source that starts with a language code keeps its own,
  `kt.decoding.with_source_prefix`) -> outputs `translation` and `score`.
- `translate_ids`: input `source_ids` (int32 `[batch, src_len]`, 0-padded, ending with EOS)
  -> outputs `ids` (int32 `[batch, out_len]`, EOS-terminated, 0-padded) and `score`, for
  users with their own tokenizer (the SentencePiece models are in `assets.extra/`). A row
  longer than `max_length` is cut to its first `max_length - 1` ids and EOS (as text is); an
  id outside `[0, source vocabulary size)` fails the request with an InvalidArgument error
  that names the vocabulary size (TF Serving answers it with HTTP 400).

Text goes in and comes out through the task's preprocessor (its `generate_preprocess` and
`generate_postprocess`, traced), as in `generate`: the settings' source prefix first, then
tokenization, the cut and EOS; detokenization and the empty-input rule after the search.
Tokenization, beam search and detokenization are all in the graph (tensorflow-text's
SentencePiece ops, which TF Serving ships), so the export loads with nothing but `tensorflow`
and `tensorflow_text`. Input rules, so that no request can crash the server:
- Invalid UTF-8 bytes become U+FFFD before tokenization.
- An input longer than the model's `max_length - 1` tokens is cut there (then EOS); the
  output may be up to 50 tokens longer than the (cut) input, within `max_length`.
- An input with nothing to translate (empty, or only spaces) gives an empty translation
  with score 0; an empty batch gives an empty batch.
- A batch of another shape than its signature's (`text` `[2, 2]` or a scalar, ids
  `[batch, 1, src_len]`) fails the request with an InvalidArgument error naming the input
  and the shape it was given (HTTP 400): TF Serving does not check a request's shape.

With `quantize="int8"` (or "bfloat16") the signatures run a copy of the model with
reduced-precision weights (`kt.export.precision`), made of the same Keras layers: the export
still loads with `tensorflow` and `tensorflow_text` alone, and the manifest's "quantize"
records the weights written ("float32" without it).

Writing is atomic: the version is written under a temporary name and renamed, so a failed
export leaves earlier versions intact and TF Serving never sees a half-written one.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import tensorflow as tf

from keras_transformer._deprecation import deprecated
from keras_transformer._files import atomic_directory
from keras_transformer._manifest import write_manifest
from keras_transformer.core import rules
from keras_transformer.decoding.plan import DecodingPlan
from keras_transformer.decoding.settings import DecodingSettings, check_source_prefix

# The signatures (`kt.export.signatures`, `kt.export.buckets`), under their former names too.
from keras_transformer.export.buckets import (
    BATCH_BUCKETS,
    CHUNK_ROWS,
    decode_sorted_in_chunks,
    pad_to_bucket,
)
from keras_transformer.export.precision import reduced_precision
from keras_transformer.export.signatures import _n_best_count, translation_endpoints
from keras_transformer.export.signatures import endpoints as signature_endpoints
from keras_transformer.serving.savedmodel import EXTRA
from keras_transformer.text import EOS_ID

MANIFEST = "manifest.json"


def _tokenizers(vocabularies) -> list:
    """The distinct tokenizers of `vocabularies` (one when the vocabulary is shared), built
    as every layer of a saved model is (they have no weights)."""
    tokenizers = {id(t): t for t in (vocabularies.source, vocabularies.target)}.values()
    for tokenizer in tokenizers:
        if not tokenizer.built:
            tokenizer.build(None)
    return list(tokenizers)


class _Root(tf.Module):
    """The SavedModel's root object. Its variable lists are attributes, saved as Keras's
    `ExportArchive` saves them (`loaded.variables`...), not `tf.Module`'s properties."""

    variables = trainable_variables = non_trainable_variables = ()


def write_saved_model(path, endpoints: dict, model, tokenizers) -> None:
    """Writes `endpoints` as a SavedModel at `path`, laid out as Keras's `ExportArchive` lays
    it out (each endpoint as a signature and as an attribute of the loaded object; the
    model's variables as `variables`, `trainable_variables`, `non_trainable_variables`; the
    tokenizers' resources, e.g. their SentencePiece models), each endpoint traced once.

    `ExportArchive.write_out` traces every endpoint twice: once to list the variables it
    uses, then again inside `tf.saved_model.save`, which retraces every `tf.function` it
    saves because the save context is part of a trace's cache key (TensorFlow issue 56370).
    Here each endpoint is traced once into a concrete function, and the concrete functions
    are what is saved (an export's time: BENCHMARKS.md).

    Args:
        path: str or path. The folder to write (`export_saved_model` writes a version
            folder atomically with it).
        endpoints: dict name -> (function, input signature), e.g. `translation_endpoints`'.
        model: the Keras model whose variables the endpoints use.
        tokenizers: the tokenizer layers the endpoints call (e.g. `[vocabularies.source,
            vocabularies.target]`), whose resources the SavedModel must hold.
    """
    functions = {
        name: tf.function(
            function, input_signature=signature, autograph=False
        ).get_concrete_function()
        for name, (function, signature) in endpoints.items()
    }
    root = _Root()
    root.variables = list(model.variables)
    root.trainable_variables = list(model.trainable_variables)
    root.non_trainable_variables = list(model.non_trainable_variables)
    captured = {}
    for function in functions.values():
        captured.update((id(v), v) for v in function.variables)
    root._all_variables = list(captured.values())
    root._misc_assets = [
        trackable
        for tokenizer in tokenizers
        for trackable in tf.train.TrackableView(tokenizer).descendants()
        if isinstance(trackable, tf.saved_model.experimental.TrackableResource)
    ]
    for name, function in functions.items():
        setattr(root, name, function)
    tf.saved_model.save(root, str(path), signatures=functions)


def next_version(directory) -> int:
    """1 + the highest numeric version folder in `directory` (1 if there is none)."""
    directory = Path(directory)
    versions = [int(p.name) for p in directory.glob("*") if p.is_dir() and p.name.isdigit()]
    return max(versions, default=0) + 1


def write(
    model,
    path,
    *,
    vocabularies=None,
    decoding: DecodingSettings | None = None,
    quantize: str | None = None,
    manifest: dict | None = None,
    version: int | None = None,
    prefix_signature: bool | None = None,
) -> Path:
    """Writes `path/VERSION/`, a SavedModel that translates text (see the module doc): the
    SavedModel format's writer, `kt.export.export(task, path, format="savedmodel")`.

    Args:
        model: a `TransformerSeq2SeqLM`, a directory `TransformerSeq2SeqLM.from_preset`
            loads, or a trained `keras_transformer.Transformer` (with `vocabularies`).
        path: str or path. The model's folder under `saved_models/` (TF Serving's: one
            numbered folder a version).
        vocabularies: its `keras_transformer.text.Vocabularies`; None takes the task's.
            Defaults to None.
        decoding: `kt.decoding.DecodingSettings` or None: the settings baked into the graph
            (beam size, length penalty, stopping rule, extra length, n-best, the source and
            target prefixes: every text signature's). None takes the task's, or the defaults
            (the paper's) for a `Transformer`. Defaults to None.
        quantize: str or None. "int8" or "bfloat16": the SavedModel holds a copy of the
            model with weights of that type (`kt.export.precision.reduced_precision`;
            `model` itself is left as it is; bfloat16 falls back to float32 weights, with
            a warning, on a CPU without bfloat16 arithmetic). None exports the model as it
            is. Defaults to None.
        manifest: dict or None. Extra facts (config, metrics...) for
            `assets.extra/manifest.json`. Defaults to None.
        version: int or None. The version folder; None takes the next free number.
            Defaults to None.
        prefix_signature: bool or None. Write the `serving_prefix` signature, which takes a
            target prefix per sentence, and `serving_languages`, which takes both prefixes
            (both languages) per sentence. None writes them for a target vocabulary with
            language codes (an imported NLLB-200 model's). Defaults to None.

    Returns:
        The path of the written version.

    Raises:
        ValueError: a bad setting, or `quantize` with a model that is already quantized or
            has LoRA adapters (before anything is written).
        FileExistsError: the version exists (versions are never overwritten).

    Examples:
        Skipped by the doctests: tracing the signatures takes a while (`docs/` runs one).

        >>> import keras_transformer as kt  # doctest: +SKIP
        >>> task = kt.models.TransformerSeq2SeqLM.from_preset("runs/demo")  # doctest: +SKIP
        >>> kt.export.export(task, "saved_models/demo", format="savedmodel")  # doctest: +SKIP
    """
    model, vocabularies, directory, settings = resolve_model(model, vocabularies, path, decoding)
    # The plan of every signature: its target prefix checked and tokenized once, here.
    plan = DecodingPlan.make(dataclasses.replace(settings, n_best=1), vocabularies.target)
    check_source_prefix(settings.source_prefix, vocabularies.source)
    final = _version_folder(directory, version)
    precision = reduced_precision(model, quantize)  # a copy: `model` stays as it is
    model = precision.model
    directory.mkdir(parents=True, exist_ok=True)
    hypotheses = _n_best_count(settings.n_best, settings.beam_size)  # the n_best signature's
    if prefix_signature is None:  # written for a vocabulary with language codes
        prefix_signature = bool(getattr(vocabularies.target, "language_codes", None))
    with atomic_directory(final) as temporary:
        endpoints = signature_endpoints(
            model,
            vocabularies,
            plan,
            source_prefix=settings.source_prefix,
            n_best=hypotheses,
            prefix_signature=prefix_signature,
        )
        write_saved_model(temporary, endpoints, model, _tokenizers(vocabularies))
        extra = temporary / EXTRA  # the runtime's: manifest and vocabulary beside the graph
        extra.mkdir()
        vocabularies.write(extra)
        write_manifest(
            extra / MANIFEST,
            model_config=model.config.to_dict(),
            quantize=precision.weights,  # the weights' type: "float32", "int8"...
            facts={
                **({"quantize_fallback": precision.fallback} if precision.fallback else {}),
                **_facts(model, vocabularies, settings),
                "signatures": signature_facts(hypotheses, prefix_signature),
            },
            extra=manifest,
        )
    return final


def _version_folder(directory: Path, version: int | None) -> Path:
    """The version folder to write: `version`, or the next free number. FileExistsError
    where it exists: versions are never overwritten."""
    final = directory / str(next_version(directory) if version is None else version)
    if final.exists():
        raise FileExistsError(f"{final} exists; versions are never overwritten")
    return final


def _facts(model, vocabularies, settings: DecodingSettings) -> dict:
    """The manifest's `vocabulary` and `decoding` facts."""
    return {
        "vocabulary": {
            "files": sorted(vocabularies.file_names),
            "source_size": vocabularies.source.vocabulary_size(),
            "target_size": vocabularies.target.vocabulary_size(),
            "special_ids": {"pad": 0, "unk": 1, "bos": 2, "eos": EOS_ID},
        },
        "decoding": {
            **{k: v for k, v in settings.to_dict().items() if k != "target_prefix"},
            "target_prefix": settings.target_prefix,
            "max_input_tokens": rules.kept_source_tokens(model.config.max_length),
        },
    }


@deprecated(
    "keras_transformer.export.savedmodel.export_saved_model",  # kt.export's: `aliased` there
    "keras_transformer.export.export(model, path, format='savedmodel', ...)",
)
def export_saved_model(
    model,
    vocabularies=None,
    directory=None,
    *,
    version: int | None = None,
    manifest: dict | None = None,
    decoding: DecodingSettings | None = None,
    beam_size: int | None = None,
    length_penalty: float | None = None,
    max_extra_length: int | None = None,
    stopping: str | None = None,
    finish_rule: str | None = None,
    target_prefix: str | None = None,
    prefix_signature: bool | None = None,
    ranking: str | None = None,
    source_prefix: str | None = None,
    quantize: str | None = None,
) -> Path:
    """Deprecated: `kt.export.export(model, directory, format="savedmodel", ...)` under its
    former name, with its former arguments: the same SavedModel (`write`), and a
    DeprecationWarning. It goes in the next release.

    `export_saved_model(task, directory)` exports a `TransformerSeq2SeqLM` (or the preset
    or model directory it loads from) with its vocabulary and decoding settings;
    `export_saved_model(model, vocabularies, directory)` a `Transformer` and its
    vocabularies.

    Args:
        model: as `write`'s, with `vocabularies`, `decoding`, `quantize`, `manifest`,
            `version` and `prefix_signature`.
        vocabularies: its `keras_transformer.text.Vocabularies`; None (or left out) takes the
            task's.
        directory: str or path. `write`'s `path`.
        version: int or None.
        manifest: dict or None.
        decoding: `kt.decoding.DecodingSettings` or None.
        beam_size: int or None. When given, overrides that setting of `decoding`, as do
            `length_penalty`, `max_extra_length`, `stopping`, `finish_rule`,
            `target_prefix`, `ranking` and `source_prefix` (`kt.export.export` takes the
            settings alone: `decoding=settings.replace(beam_size=...)`).
        length_penalty: float or None.
        max_extra_length: int or None.
        stopping: str or None.
        finish_rule: str or None.
        target_prefix: str or None.
        prefix_signature: bool or None.
        ranking: str or None.
        source_prefix: str or None.
        quantize: str or None.

    Returns:
        The path of the written version.
    """
    model, vocabularies, directory, settings = resolve_model(
        model,
        vocabularies,
        directory,
        decoding,
        beam_size=beam_size,
        length_penalty=length_penalty,
        max_extra_length=max_extra_length,
        stopping=stopping,
        finish_rule=finish_rule,
        target_prefix=target_prefix,
        ranking=ranking,
        source_prefix=source_prefix,
    )
    return write(
        model,
        directory,
        vocabularies=vocabularies,
        decoding=settings,
        quantize=quantize,
        manifest=manifest,
        version=version,
        prefix_signature=prefix_signature,
    )


TEXT_IN = {"text": "string [batch]"}  # the text signatures' input
ONE_OUT = {"translation": "string [batch]", "score": "float32 [batch]"}  # and their output


def signature_facts(hypotheses: int, prefix_signature: bool) -> dict:
    """The manifest's `signatures`: each signature's inputs and outputs (the module doc),
    `hypotheses` the `n_best` signature's count, `serving_prefix` and `serving_languages`
    with `prefix_signature`."""
    signatures = {
        "serving_default": {"inputs": TEXT_IN, "outputs": ONE_OUT},
        "serving_xla": {
            "inputs": TEXT_IN,
            "outputs": ONE_OUT,
            "server_flag": "--xla_cpu_compilation_enabled=true",
        },
        "n_best": {
            "inputs": TEXT_IN,
            "outputs": {
                "translations": f"string [batch, {hypotheses}]",
                "scores": f"float32 [batch, {hypotheses}]",
            },
        },
        "translate_ids": {
            "inputs": {"source_ids": "int32 [batch, src_len]"},
            "outputs": {"ids": "int32 [batch, out_len]", "score": "float32 [batch]"},
        },
    }
    if prefix_signature:
        prefix = {"target_prefix": "string [batch]"}
        signatures["serving_prefix"] = {"inputs": {**TEXT_IN, **prefix}, "outputs": ONE_OUT}
        signatures["serving_languages"] = {
            "inputs": {**TEXT_IN, "source_prefix": "string [batch]", **prefix},
            "outputs": ONE_OUT,
        }
    return signatures


def resolve_model(model, vocabularies, directory, decoding=None, **overrides):
    """What an export takes, from what it was given: `(model, vocabularies, directory,
    DecodingSettings)`. A task (or a directory it loads from) brings its vocabularies and
    settings; `export(task, directory)` may give the directory second."""
    if directory is None and isinstance(vocabularies, (str, os.PathLike)):
        vocabularies, directory = None, vocabularies
    if directory is None:
        raise TypeError("the export needs a directory to write")
    if isinstance(model, (str, os.PathLike)):
        from keras_transformer.models import TransformerSeq2SeqLM

        model = TransformerSeq2SeqLM.from_preset(model)
    if vocabularies is None:
        preprocessor = getattr(model, "preprocessor", None)
        if preprocessor is None:
            raise ValueError(
                "vocabularies=None: a TransformerSeq2SeqLM with its preprocessor carries its "
                "vocabularies; a Transformer needs its kt.text.Vocabularies"
            )
        vocabularies = preprocessor.tokenizer.vocabularies
    settings = decoding or getattr(model, "decoding", None) or DecodingSettings()
    return model, vocabularies, Path(directory), settings.replace(**overrides)


__all__ = [
    "BATCH_BUCKETS",
    "CHUNK_ROWS",
    "MANIFEST",
    "decode_sorted_in_chunks",
    "pad_to_bucket",
    "export_saved_model",
    "next_version",
    "translation_endpoints",
    "write",
    "write_saved_model",
]

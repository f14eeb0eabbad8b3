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

import functools
import os
import re
from pathlib import Path

import tensorflow as tf

from keras_transformer import decoding
from keras_transformer._files import atomic_directory
from keras_transformer._manifest import write_manifest
from keras_transformer._ragged import concat_rows
from keras_transformer.decoding.settings import (
    DEFAULT,
    LANGUAGE_CODE,
    DecodingSettings,
    check_source_prefix,
    check_target_prefix,
    language_codes,
)
from keras_transformer.export.precision import reduced_precision
from keras_transformer.serving.savedmodel import EXTRA
from keras_transformer.text import EOS_ID

MANIFEST = "manifest.json"
# Batch sizes the XLA signature pads a request to (larger batches: to a multiple of the last).
BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
# Decoder rows (sentences x beam) one compiled call decodes at most: the XLA signature sorts
# a request by length and decodes it in chunks of this many rows (BENCHMARKS.md).
CHUNK_ROWS = 32


def _check_shape(tensor, name: str, shape: str = "[batch]"):
    """An op that fails the request (INVALID_ARGUMENT: TF Serving answers HTTP 400) unless
    `tensor` has the rank of its signature's `shape` ("[batch]": one sentence an entry).
    Neither TF Serving nor a loaded SavedModel holds a request to its signature's shape, and
    a graph traced for `[batch]` reads a batch of another rank as flat sentences (a `[2, 2]`
    batch answered with four translations). The rank is counted from the request's own
    shape: `tf.rank` and `tf.debugging.assert_rank` read the traced shape, and Grappler folds
    them away."""
    runtime_shape = tf.shape(tensor)
    rank = tf.reduce_sum(tf.cast(runtime_shape >= 0, tf.int32))  # len(runtime_shape)
    return tf.debugging.Assert(
        tf.equal(rank, shape.count(",") + 1),
        [f"{name} must be {shape}; got the shape", runtime_shape],
    )


def _checked_ids(source_ids, max_length: int, vocab_size: int):
    """A `translate_ids` request's ids, validated, with over-long rows cut to
    `max_length - 1` ids and EOS (a row's length: up to its last non-zero id)."""
    with tf.control_dependencies([_check_shape(source_ids, "source_ids", "[batch, src_len]")]):
        in_vocabulary = (source_ids >= 0) & (source_ids < vocab_size)
    check = tf.debugging.Assert(
        tf.reduce_all(in_vocabulary),
        [
            f"source_ids must be ids of the source vocabulary, in [0, {vocab_size}); got min",
            tf.reduce_min(source_ids),
            "max",
            tf.reduce_max(source_ids),
        ],
    )
    with tf.control_dependencies([check]):
        rows = tf.RaggedTensor.from_tensor(source_ids, padding=0)
    over = rows.row_lengths() > max_length
    last = rows[:, max_length - 1 : max_length]  # the last id kept: EOS where cut
    last = last.with_flat_values(
        tf.where(tf.gather(over, last.value_rowids()), EOS_ID, last.flat_values)
    )
    return concat_rows(rows[:, : max_length - 1], last).to_tensor()


def pad_to_bucket(source_ids, batch_buckets, max_length: int):
    """Source ids `[batch, width]` padded to a shape bucket: the batch to the first of
    `batch_buckets` that holds it (or a multiple of the last), the width to a multiple of 16
    (at most `max_length`).

    XLA compiles one program per input shape: buckets bound the programs a server compiles.
    Padding rows repeat the last sentence, so they finish with it (a row of padding would
    decode up to its length limit and hold up the batch); an empty batch is padded with rows
    of zeros. Padding columns are zeros, which every attention masks.
    """
    batch, width = tf.shape(source_ids)[0], tf.shape(source_ids)[1]
    batches, largest = tf.constant(batch_buckets), batch_buckets[-1]
    beyond = (tf.maximum(batch, 1) + largest - 1) // largest * largest
    batch_bucket = tf.reduce_min(
        tf.concat([tf.boolean_mask(batches, batches >= batch), [beyond]], 0)
    )
    width_bucket = tf.minimum((width + 15) // 16 * 16, max_length)
    rows = tf.minimum(tf.range(batch_bucket), tf.maximum(batch - 1, 0))
    with_zeros = tf.concat([source_ids, tf.zeros([1, width], source_ids.dtype)], 0)
    padded = tf.gather(with_zeros, rows)  # (batch_bucket, width)
    return tf.pad(padded, [[0, 0], [0, width_bucket - width]])


def decode_sorted_in_chunks(search, source_ids, chunk: int, out_len):
    """`search` run on a request's sentences sorted by length, `chunk` sentences a call.

    A batch decodes until its longest sentence ends, so in a request of mixed lengths most
    rows would wait, step after step, for the longest one. Sorted and cut into chunks (each
    chunk cut to its own width), short sentences finish together and long ones together;
    CTranslate2 sorts and splits a batch the same way (its `max_batch_size`). The chunks are
    iterations of a `tf.while_loop` that depend on each other only where their results are
    written, so TensorFlow runs two or more at once (`parallel_iterations`): a small model's
    search keeps about one core busy, and the other decodes the next chunk. (On the demo
    model that overlap is the whole gain: one chunk at a time, the sorted chunks were as
    fast as the whole request; BENCHMARKS.md.)

    Args:
        search: `source_ids [n, width] -> (ids int32 [n, <= out_len], score float32 [n])`.
        source_ids: int32 `[batch, width]`, 0-padded at the end.
        chunk: int. Sentences a call.
        out_len: int32 scalar. The width of the returned ids.

    Returns:
        `(ids int32 [batch, out_len], score float32 [batch])` in the request's order, ids
        0-padded on the right.
    """
    batch = tf.shape(source_ids)[0]
    lengths = tf.math.count_nonzero(source_ids, axis=1, dtype=tf.int32)  # (batch,)
    order = tf.argsort(lengths, stable=True)

    def body(start, ids, score):
        rows = order[start : start + chunk]
        part = tf.gather(source_ids, rows)[:, : tf.reduce_max(tf.gather(lengths, rows))]
        part_ids, part_score = search(part)
        part_ids = tf.pad(part_ids, [[0, 0], [0, out_len - tf.shape(part_ids)[1]]])
        rows = rows[:, None]
        return (
            start + chunk,
            tf.tensor_scatter_nd_update(ids, rows, part_ids),
            tf.tensor_scatter_nd_update(score, rows, part_score),
        )

    empty = (tf.zeros([batch, out_len], tf.int32), tf.zeros([batch], tf.float32))
    _, ids, score = tf.while_loop(lambda start, *_: start < batch, body, (0, *empty))
    return ids, score


def translation_endpoints(
    model,
    vocabularies,
    *,
    beam_size: int = DEFAULT.beam_size,
    length_penalty: float = DEFAULT.length_penalty,
    max_extra_length: int = DEFAULT.max_extra_length,
    stopping: str = DEFAULT.stopping,
    finish_rule: str = DEFAULT.finish_rule,
    target_prefix: str | None = None,
    prefix_signature: bool = False,
    ranking: str = DEFAULT.ranking,
    n_best: int | None = None,
    source_prefix: str | None = None,
) -> dict:
    """The four endpoints of a translation model (see the module doc), as
    `export_saved_model` writes them. To serve endpoints of your own beside them, add yours
    to the dictionary and hand it to `write_saved_model` (or each endpoint to a
    `keras.export.ExportArchive`'s `add_endpoint`, whose `write_out` traces each twice).

    Args:
        model: a `keras_transformer.Transformer` or `TransformerSeq2SeqLM`.
        vocabularies: its `keras_transformer.text.Vocabularies`.
        beam_size: int. The beam size baked into the graph, with the four below and
            `ranking` (`kt.decoding.DecodingSettings`'s settings).
        length_penalty: float.
        max_extra_length: int.
        stopping: str.
        finish_rule: str.
        target_prefix: str or None. Text every translation of the four starts with (its
            tokens forced first: NLLB's target language code). Defaults to None (none).
        prefix_signature: bool. Add the `serving_prefix` and `serving_languages` endpoints,
            whose requests give their own prefixes. Defaults to False.
        ranking: str. The length penalty's form ("gnmt" or "length"). Defaults to "gnmt".
        n_best: int or None. Hypotheses the `n_best` signature returns a sentence, from 2 to
            the beam size (the settings' `n_best`); None returns every beam. Defaults to None.
        source_prefix: str or None. Text every source of the text signatures starts with
            (NLLB's source language code; `kt.decoding.with_source_prefix`). Defaults to
            None (none).

    Returns:
        A dict name -> (function, input signature: a list of `tf.TensorSpec`).
    """
    from keras_transformer.models import TransformerSeq2SeqLMPreprocessor

    max_length = model.config.max_length
    # Text in and out as every door's: the task's preprocessor, traced into each signature.
    preprocessor = TransformerSeq2SeqLMPreprocessor.for_model(model, vocabularies)
    check_source_prefix(source_prefix, vocabularies.source)
    fixed_prefix = None  # the target prefix's ids, [prefix_len], baked into the graph
    if target_prefix is not None:
        check_target_prefix(target_prefix, vocabularies.target)
        fixed_prefix = _prefix_ids(vocabularies.target, [target_prefix]).numpy()[0]
        if not fixed_prefix.size:
            raise ValueError(f"target_prefix={target_prefix!r} has no tokens")

    # The search's settings, but for the target prefix (its ids are `fixed_prefix`): every
    # signature's search is `kt.decoding.decode` of them.
    settings = DecodingSettings(
        beam_size=beam_size,
        length_penalty=length_penalty,
        max_extra_length=max_extra_length,
        stopping=stopping,
        finish_rule=finish_rule,
        ranking=ranking,
    )
    hypotheses = _n_best_count(n_best, beam_size)
    if hypotheses > beam_size:
        raise ValueError(f"n_best={n_best} must be between 1 and the beam size {beam_size}")

    # One search, traced once, for any batch and length: `serving_default` and
    # `translate_ids` call it, and `serving_xla`'s compiled search is a call of it that XLA
    # compiles (inlined) for each bucket's shape. Traced into each of them instead, it was
    # traced three times and stored three times in the SavedModel.
    @functools.partial(
        tf.function, input_signature=[tf.TensorSpec([None, None], tf.int32)], autograph=False
    )
    def search(source_ids):
        return decoding.decode(model, source_ids, settings, prefix_ids=fixed_prefix)

    compiled_search = tf.function(lambda ids: search(ids), jit_compile=True, autograph=False)

    # Greedy search decodes at least two rows: with one, XLA:CPU turns every matrix product of
    # a step into a matrix-vector loop fused with the layer norm before it (its
    # cpu_instruction_fusion), which made one-sentence requests about 1.4x slower
    # (BENCHMARKS.md).
    buckets = [b for b in BATCH_BUCKETS if b >= (2 if beam_size == 1 else 1)]

    def output_length(source_ids):
        return tf.minimum(tf.shape(source_ids)[1] + max_extra_length, max_length)

    def bucketed_search(source_ids):
        ids, score = compiled_search(pad_to_bucket(source_ids, buckets, max_length))
        batch = tf.shape(source_ids)[0]
        return ids[:batch, : output_length(source_ids)], score[:batch]

    def xla_search(source_ids):
        chunk = max(CHUNK_ROWS // beam_size, 1)  # sentences a compiled call
        return decode_sorted_in_chunks(
            bucketed_search, source_ids, chunk, output_length(source_ids)
        )

    def source_ids(text, prefix=source_prefix):
        with tf.control_dependencies([_check_shape(text, "text")]):  # before any text op
            text = tf.identity(text)
        return preprocessor.generate_preprocess(text, source_prefix=prefix)["source_ids"]

    def answer(source_ids, ids, score, plural=""):
        """The outputs: translations ("" where the source held nothing but EOS: nothing to
        translate) and scores (0 there)."""
        translation = preprocessor.generate_postprocess(
            {"target_ids": ids, "source_ids": source_ids}
        )
        empty = tf.math.count_nonzero(source_ids, axis=1) <= 1  # (an empty batch too)
        empty = empty[:, None] if plural else empty
        return {
            f"translation{plural}": translation,
            f"score{plural}": tf.where(empty, tf.zeros_like(score), score),
        }

    def translate_text(text, search, prefix=source_prefix):
        ids = source_ids(text, prefix)
        return answer(ids, *search(ids))

    def serve(text):
        return translate_text(text, search)

    def serve_xla(text):
        return translate_text(text, xla_search)

    def translate_ids(source_ids):
        ids, score = search(_checked_ids(source_ids, max_length, model.config.source_vocab))
        return {"ids": ids, "score": score}

    def serve_n_best(text):
        ids = source_ids(text)
        outputs, scores = decoding.decode(
            model, ids, settings, prefix_ids=fixed_prefix, n_best=hypotheses
        )  # (batch, n, out_len), (batch, n)
        if hypotheses == 1:  # greedy search, as serving_default's: (batch, out_len), (batch,)
            outputs, scores = outputs[:, None, :], scores[:, None]
        return answer(ids, outputs, scores, plural="s")

    text = [tf.TensorSpec([None], tf.string, "text")]
    endpoints = {
        "serving_default": (serve, text),
        "serving_xla": (serve_xla, text),
        "n_best": (serve_n_best, text),
        "translate_ids": (
            translate_ids,
            [tf.TensorSpec([None, None], tf.int32, "source_ids")],
        ),
    }
    if prefix_signature:

        @functools.partial(
            tf.function,
            input_signature=[tf.TensorSpec([None, None], tf.int32)] * 2,
            autograph=False,
        )
        def prefixed_search(source_ids, prefix_ids):
            return decoding.decode(model, source_ids, settings, prefix_ids=prefix_ids)

        def per_request(text, target_prefix, prefix=source_prefix, checks=()):
            shapes = [_check_shape(text, "text"), _check_shape(target_prefix, "target_prefix")]
            with tf.control_dependencies(shapes):  # before the checks that count entries
                check = tf.debugging.assert_equal(
                    tf.size(text),
                    tf.size(target_prefix),
                    message="text and target_prefix must have one entry per sentence",
                )
                known = _check_language_codes(vocabularies.target, target_prefix)
            with tf.control_dependencies([check, known, *checks]):  # before any text op
                prefix_ids = _prefix_ids(vocabularies.target, target_prefix)
                text = tf.identity(text)
                if isinstance(prefix, tf.Tensor):
                    prefix = tf.identity(prefix)
            search = lambda ids: prefixed_search(ids, prefix_ids)  # noqa: E731
            return translate_text(text, search, prefix)

        def serve_prefix(text, target_prefix):
            return per_request(text, target_prefix)

        def serve_languages(text, source_prefix, target_prefix):
            shapes = [_check_shape(text, "text"), _check_shape(source_prefix, "source_prefix")]
            with tf.control_dependencies(shapes):
                check = tf.debugging.assert_equal(
                    tf.size(text),
                    tf.size(source_prefix),
                    message="text and source_prefix must have one entry per sentence",
                )
                known = _check_language_codes(
                    vocabularies.source,
                    source_prefix,
                    "source_prefix",
                    _source_codes(vocabularies),
                )
            return per_request(text, target_prefix, source_prefix, checks=(check, known))

        endpoints["serving_prefix"] = (
            serve_prefix,
            text + [tf.TensorSpec([None], tf.string, "target_prefix")],
        )
        endpoints["serving_languages"] = (
            serve_languages,
            text
            + [
                tf.TensorSpec([None], tf.string, "source_prefix"),
                tf.TensorSpec([None], tf.string, "target_prefix"),
            ],
        )
    return endpoints


def _n_best_count(n_best: int | None, beam_size: int) -> int:
    """Hypotheses the `n_best` signature returns a sentence: `n_best` when above 1, else
    every one of the beam."""
    return beam_size if n_best is None or n_best < 2 else n_best


def _source_codes(vocabularies) -> list[str]:
    """The language codes a source may start with: the source vocabulary's (NLLB-200's), or
    its pieces shaped like one (a multilingual OPUS-MT model's ">>spa<<")."""
    codes = language_codes(vocabularies.source)
    if codes:
        return codes
    pieces = vocabularies.source.get_vocabulary()
    return [piece for piece in pieces if re.fullmatch(LANGUAGE_CODE, piece)]


def _check_language_codes(tokenizer, prefixes, where="target_prefix", codes=None):
    """The graph's `kt.decoding.check_target_prefix` (`check_source_prefix`): an op that
    fails the request (TF Serving answers INVALID_ARGUMENT, HTTP 400, with this message)
    when a word of a prefix (strings `[batch]`) is shaped like a language code and is not
    one of `codes` (default: the vocabulary's), rather than cutting it into pieces as
    text."""
    words = tf.strings.split(prefixes).flat_values  # every prefix's words, [words]
    shaped = tf.strings.regex_full_match(words, LANGUAGE_CODE)
    codes = language_codes(tokenizer) if codes is None else codes
    if codes:
        known = tf.reduce_any(tf.equal(words[:, None], tf.constant(codes)[None, :]), axis=1)
        unknown = tf.boolean_mask(words, shaped & ~known)
        message = (
            f"{where}: not one of this model's {len(codes)} language codes "
            f"({', '.join(codes[:6])}, ...):"
        )
    else:
        unknown = tf.boolean_mask(words, shaped)
        reads = "into" if where == "target_prefix" else "from"
        message = (
            f"{where}: shaped like a language code, and this model's vocabulary has "
            f"none (it translates {reads} one language):"
        )
    return tf.debugging.Assert(tf.size(unknown) == 0, [message, unknown[:3]], summarize=3)


def _prefix_ids(tokenizer, texts):
    """Target prefixes (strings `[batch]`) -> int32 ids `[batch, prefix_len]`, 0-padded."""
    ids = tokenizer.tokenize(tf.convert_to_tensor(texts, tf.string))
    if isinstance(ids, tf.RaggedTensor):
        ids = ids.to_tensor()
    return tf.cast(ids, tf.int32)


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
    beam_size, target_prefix = settings.beam_size, settings.target_prefix
    check_target_prefix(target_prefix, vocabularies.target)
    check_source_prefix(settings.source_prefix, vocabularies.source)
    if target_prefix is not None and not _prefix_ids(vocabularies.target, [target_prefix]).shape[1]:
        raise ValueError(f"target_prefix={target_prefix!r} has no tokens")
    version = next_version(directory) if version is None else version
    final = directory / str(version)
    if final.exists():
        raise FileExistsError(f"{final} exists; versions are never overwritten")
    precision = reduced_precision(model, quantize)  # a copy: `model` stays as it is
    model = precision.model
    directory.mkdir(parents=True, exist_ok=True)
    hypotheses = _n_best_count(settings.n_best, beam_size)  # the n_best signature's
    settings = {
        key: value for key, value in settings.to_dict().items() if key != "target_prefix"
    }  # the prefix is `prefix` below
    if prefix_signature is None:
        prefix_signature = bool(getattr(vocabularies.target, "language_codes", None))
    prefix = {"target_prefix": target_prefix} if target_prefix is not None else {}
    with atomic_directory(final) as temporary:
        endpoints = translation_endpoints(
            model, vocabularies, **settings, **prefix, prefix_signature=prefix_signature
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
                "vocabulary": {
                    "files": sorted(vocabularies.file_names),
                    "source_size": vocabularies.source.vocabulary_size(),
                    "target_size": vocabularies.target.vocabulary_size(),
                    "special_ids": {"pad": 0, "unk": 1, "bos": 2, "eos": EOS_ID},
                },
                "decoding": {
                    **settings,
                    "target_prefix": target_prefix,
                    "max_input_tokens": model.config.max_length - 1,
                },
                "signatures": signature_facts(hypotheses, prefix_signature),
            },
            extra=manifest,
        )
    return final


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
    """`kt.export.export(model, directory, format="savedmodel", ...)` under its former name,
    with its former arguments: the same SavedModel (`write`). A plain alias, kept as it was.

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
    "MANIFEST",
    "export_saved_model",
    "next_version",
    "translation_endpoints",
    "write",
    "write_saved_model",
]

"""The SavedModel's signatures (`kt.export.savedmodel`'s module doc says what each takes and
answers): `translation_endpoints`, the functions `write_saved_model` traces, each over one
`kt.decoding.DecodingPlan` of the export's settings (`serving_xla`'s batches for XLA:
`kt.export.buckets`); the checks of a request (its shape, its ids, its prefixes' language
codes), as ops that fail it with a message.
"""

from __future__ import annotations

import dataclasses
import re

import tensorflow as tf

from keras_transformer._ragged import concat_rows
from keras_transformer.core import rules
from keras_transformer.decoding.plan import DecodingPlan
from keras_transformer.decoding.settings import (
    DEFAULT,
    LANGUAGE_CODE,
    DecodingSettings,
    check_source_prefix,
    language_codes,
)
from keras_transformer.export.buckets import (
    BATCH_BUCKETS,
    CHUNK_ROWS,
    decode_sorted_in_chunks,
    pad_to_bucket,
)
from keras_transformer.text import EOS_ID


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
    kept = rules.kept_source_tokens(max_length)  # then EOS
    over = rows.row_lengths() > kept + 1
    last = rows[:, kept : kept + 1]  # the last id kept: EOS where cut
    last = last.with_flat_values(
        tf.where(tf.gather(over, last.value_rowids()), EOS_ID, last.flat_values)
    )
    return concat_rows(rows[:, :kept], last).to_tensor()


def translation_endpoints(
    model,
    vocabularies,
    *,
    beam_size: int | None = None,
    length_penalty: float | None = None,
    max_extra_length: int | None = None,
    stopping: str | None = None,
    finish_rule: str | None = None,
    target_prefix: str | None = None,
    prefix_signature: bool = False,
    ranking: str | None = None,
    n_best: int | None = None,
    source_prefix: str | None = None,
    decoding: DecodingSettings | None = None,
) -> dict:
    """The four endpoints of a translation model (see the module doc), as
    `kt.export.export` writes them. To serve endpoints of your own beside them, add yours
    to the dictionary and hand it to `write_saved_model` (or each endpoint to a
    `keras.export.ExportArchive`'s `add_endpoint`, whose `write_out` traces each twice).

    Args:
        model: a `keras_transformer.Transformer` or `TransformerSeq2SeqLM`.
        vocabularies: its `keras_transformer.text.Vocabularies`.
        beam_size: int or None. The beam size baked into the graph, with the four below
            and `ranking` (`kt.decoding.DecodingSettings`'s settings); None keeps
            `decoding`'s (the paper's by default).
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
        decoding: `kt.decoding.DecodingSettings` or None. The settings the keywords above
            override (their `n_best` aside: `n_best` is the signature's). Defaults to None
            (the paper's).

    Returns:
        A dict name -> (function, input signature: a list of `tf.TensorSpec`).
    """
    settings = (decoding or DEFAULT).replace(
        beam_size=beam_size,
        length_penalty=length_penalty,
        max_extra_length=max_extra_length,
        stopping=stopping,
        finish_rule=finish_rule,
        ranking=ranking,
        target_prefix=target_prefix,
        source_prefix=source_prefix,
    )
    settings = dataclasses.replace(settings, n_best=1)  # the n_best signature's is `n_best`
    check_source_prefix(settings.source_prefix, vocabularies.source)
    plan = DecodingPlan.make(settings, vocabularies.target)  # the target prefix's ids, once
    return endpoints(
        model,
        vocabularies,
        plan,
        source_prefix=settings.source_prefix,
        n_best=_n_best_count(n_best, plan.beam_size),
        prefix_signature=prefix_signature,
    )


def endpoints(
    model,
    vocabularies,
    plan: DecodingPlan,
    *,
    source_prefix: str | None = None,
    n_best: int = 1,
    prefix_signature: bool = False,
) -> dict:
    """The endpoints of `translation_endpoints` over one `DecodingPlan` (its target prefix
    tokenized and checked), `source_prefix` the text signatures' and `n_best` the `n_best`
    signature's hypotheses a sentence."""
    signatures = _Signatures(model, vocabularies, plan, source_prefix, n_best)
    text = [tf.TensorSpec([None], tf.string, "text")]

    def serve(text):
        return signatures.translate_text(text, signatures.search)

    def serve_xla(text):
        return signatures.translate_text(text, signatures.xla_search)

    def serve_n_best(text):
        return signatures.n_best(text)

    def translate_ids(source_ids):
        return signatures.translate_ids(source_ids)

    found = {
        "serving_default": (serve, text),
        "serving_xla": (serve_xla, text),
        "n_best": (serve_n_best, text),
        "translate_ids": (translate_ids, [tf.TensorSpec([None, None], tf.int32, "source_ids")]),
    }
    if prefix_signature:

        def serve_prefix(text, target_prefix):
            return signatures.per_request(text, target_prefix)

        def serve_languages(text, source_prefix, target_prefix):
            return signatures.per_request(text, target_prefix, source_prefix)

        prefix = tf.TensorSpec([None], tf.string, "target_prefix")
        found["serving_prefix"] = (serve_prefix, text + [prefix])
        source = tf.TensorSpec([None], tf.string, "source_prefix")
        found["serving_languages"] = (serve_languages, text + [source, prefix])
    return found


class _Signatures:
    """What the signatures do, over one plan: text in and out through the task's
    preprocessor (traced into each signature, as in `generate`), the plan's search (one
    `tf.function` for every signature but `n_best`), its XLA form, the checks of a request."""

    def __init__(self, model, vocabularies, plan: DecodingPlan, source_prefix, n_best: int):
        from keras_transformer.models import TransformerSeq2SeqLMPreprocessor

        self.model, self.vocabularies, self.plan = model, vocabularies, plan
        self.source_prefix = source_prefix
        self.max_length = model.config.max_length
        self.preprocessor = TransformerSeq2SeqLMPreprocessor.for_model(model, vocabularies)
        self.n_best_plan = dataclasses.replace(plan, n_best=n_best)
        # One search, traced once, for any batch and length: `serving_default` and
        # `translate_ids` call it, and `serving_xla`'s compiled search is a call of it that
        # XLA compiles (inlined) for each bucket's shape. Traced into each of them instead,
        # it was traced three times and stored three times in the SavedModel.
        self.search = tf.function(
            lambda source_ids: plan.search(model, source_ids),
            input_signature=[tf.TensorSpec([None, None], tf.int32)],
            autograph=False,
        )
        self.compiled_search = tf.function(
            lambda ids: self.search(ids), jit_compile=True, autograph=False
        )
        # Greedy search decodes at least two rows: with one, XLA:CPU turns every matrix
        # product of a step into a matrix-vector loop fused with the layer norm before it
        # (its cpu_instruction_fusion), which made one-sentence requests about 1.4x slower
        # (BENCHMARKS.md).
        self.buckets = [b for b in BATCH_BUCKETS if b >= (2 if plan.beam_size == 1 else 1)]
        self.prefixed_search = tf.function(
            lambda source_ids, prefix_ids: plan.search(model, source_ids, prefix_ids),
            input_signature=[tf.TensorSpec([None, None], tf.int32)] * 2,
            autograph=False,
        )

    def output_length(self, source_ids):
        """The output-length limit of the request's width (`core.rules.output_limit`)."""
        width = tf.shape(source_ids)[1]
        extra = self.plan.settings.max_extra_length
        return rules.output_limit(width, extra, self.max_length, tf.minimum)

    def bucketed_search(self, source_ids):
        padded = pad_to_bucket(source_ids, self.buckets, self.max_length)
        ids, score = self.compiled_search(padded)
        batch = tf.shape(source_ids)[0]
        return ids[:batch, : self.output_length(source_ids)], score[:batch]

    def xla_search(self, source_ids):
        chunk = max(CHUNK_ROWS // self.plan.beam_size, 1)  # sentences a compiled call
        return decode_sorted_in_chunks(
            self.bucketed_search, source_ids, chunk, self.output_length(source_ids)
        )

    def source_ids(self, text, prefix):
        with tf.control_dependencies([_check_shape(text, "text")]):  # before any text op
            text = tf.identity(text)
        return self.preprocessor.generate_preprocess(text, source_prefix=prefix)["source_ids"]

    def answer(self, source_ids, ids, score, plural=""):
        """The outputs: translations ("" where the source held nothing but EOS: nothing to
        translate, `core.rules.nothing_to_translate`) and scores (0 there)."""
        translation = self.preprocessor.generate_postprocess(
            {"target_ids": ids, "source_ids": source_ids}
        )
        # (an empty batch too)
        empty = rules.nothing_to_translate(tf.math.count_nonzero(source_ids, axis=1))
        empty = empty[:, None] if plural else empty
        return {
            f"translation{plural}": translation,
            f"score{plural}": tf.where(empty, tf.zeros_like(score), score),
        }

    def translate_text(self, text, search, prefix=None):
        prefix = self.source_prefix if prefix is None else prefix
        ids = self.source_ids(text, prefix)
        return self.answer(ids, *search(ids))

    def translate_ids(self, source_ids):
        checked = _checked_ids(source_ids, self.max_length, self.model.config.source_vocab)
        ids, score = self.search(checked)
        return {"ids": ids, "score": score}

    def n_best(self, text):
        ids = self.source_ids(text, self.source_prefix)
        outputs, scores = self.n_best_plan.search(self.model, ids)  # (batch, n, len), (batch, n)
        if self.n_best_plan.n_best == 1:  # greedy search: (batch, out_len), (batch,)
            outputs, scores = outputs[:, None, :], scores[:, None]
        return self.answer(ids, outputs, scores, plural="s")

    def per_request(self, text, target_prefix, source_prefix=None):
        """`serving_prefix` (and with `source_prefix`, `serving_languages`): each sentence's
        own prefixes, checked against the vocabularies' language codes in the graph."""
        shapes = [_check_shape(text, "text"), _check_shape(target_prefix, "target_prefix")]
        checks = []
        if source_prefix is not None:
            checks = self._source_checks(text, source_prefix)
        with tf.control_dependencies(shapes):  # before the checks that count entries
            check = tf.debugging.assert_equal(
                tf.size(text),
                tf.size(target_prefix),
                message="text and target_prefix must have one entry per sentence",
            )
            known = _check_language_codes(self.vocabularies.target, target_prefix)
        prefix = self.source_prefix if source_prefix is None else source_prefix
        with tf.control_dependencies([check, known, *checks]):  # before any text op
            prefix_ids = _prefix_ids(self.vocabularies.target, target_prefix)
            text = tf.identity(text)
            if isinstance(prefix, tf.Tensor):
                prefix = tf.identity(prefix)
        search = lambda ids: self.prefixed_search(ids, prefix_ids)  # noqa: E731
        return self.translate_text(text, search, prefix)

    def _source_checks(self, text, source_prefix) -> list:
        shapes = [_check_shape(text, "text"), _check_shape(source_prefix, "source_prefix")]
        with tf.control_dependencies(shapes):
            check = tf.debugging.assert_equal(
                tf.size(text),
                tf.size(source_prefix),
                message="text and source_prefix must have one entry per sentence",
            )
            known = _check_language_codes(
                self.vocabularies.source,
                source_prefix,
                "source_prefix",
                _source_codes(self.vocabularies),
            )
        return [check, known]


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


__all__ = [
    "BATCH_BUCKETS",
    "CHUNK_ROWS",
    "decode_sorted_in_chunks",
    "endpoints",
    "pad_to_bucket",
    "translation_endpoints",
]

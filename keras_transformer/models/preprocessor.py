"""`TransformerSeq2SeqLMPreprocessor`: text pairs in, this library's ids and labels out."""

from __future__ import annotations

import keras
import keras_hub
import numpy as np
import tensorflow as tf

from keras_transformer._ragged import concat_rows
from keras_transformer.config import PAD_ID
from keras_transformer.core import rules
from keras_transformer.decoding.settings import BLANK, KEEPS_ITS_SOURCE, check_source_prefix
from keras_transformer.models.tokenizer import TransformerTokenizer
from keras_transformer.text import BOS_ID, EOS_ID, detokenize

MODEL_INPUTS = ("source_ids", "target_ids")
# Text without its targets: what `call` and `TransformerSeq2SeqLM.fit` answer.
NEEDS_TARGETS = (
    "training needs targets: give fit (source, target) text pairs, x and y, "
    "or x={'encoder_text': ..., 'decoder_text': ...}"
)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSeq2SeqLMPreprocessor(keras_hub.models.Seq2SeqLMPreprocessor):
    """Source and target text to the model's inputs and labels, inside `tf.data` or eagerly.

    From a batch of `(source, target)` text it makes `{"source_ids": source + EOS,
    "target_ids": BOS + target}` and the labels `target + EOS`: int32, 0-padded to the
    batch's longest (not to a fixed length), exactly as `kt.data.make_dataset` makes them,
    so `kt.losses.LabelSmoothedCrossEntropy` leaves padding out by the labels' zeros. Text
    longer than `encoder_sequence_length` (`decoder_sequence_length`) tokens, EOS (BOS)
    included, is cut there, as keras-hub's preprocessors cut it; `kt.data.make_dataset`
    skips such pairs instead and batches by length, the faster input for long training
    runs, and batches it made (a dict that already has "source_ids") pass through unchanged.

    The text comes as keras-hub's `{"encoder_text": ..., "decoder_text": ...}`, or as `x`
    sources with `y` targets (what `fit(sources, targets)` and a `tf.data.Dataset` of
    `(source, target)` pairs give).

    Args:
        tokenizer: `TransformerTokenizer`. The model's vocabularies.
        encoder_sequence_length: int or None. The longest source, EOS included; None takes
            the model's `max_length` (`TransformerSeq2SeqLM` sets it). Defaults to None.
        decoder_sequence_length: int or None. The longest target, BOS (or EOS) included;
            None likewise. Defaults to None.
        **kwargs: other `keras_hub.models.Preprocessor` arguments.

    Examples:
        >>> import keras
        >>> import keras_transformer as kt
        >>> from keras_transformer.models import (
        ...     TransformerSeq2SeqLMPreprocessor, TransformerTokenizer)
        >>> vocabularies = kt.text.Vocabularies.train(
        ...     ["In the beginning God created the heaven and the earth."],
        ...     ["En el principio creó Dios los cielos y la tierra."], 300)
        >>> preprocessor = TransformerSeq2SeqLMPreprocessor(
        ...     TransformerTokenizer(vocabularies),
        ...     encoder_sequence_length=32, decoder_sequence_length=32)
        >>> x, y = preprocessor(["In the beginning"], ["En el principio"])
        >>> source, target, labels = (
        ...     keras.ops.convert_to_numpy(ids)[0].tolist()
        ...     for ids in (x["source_ids"], x["target_ids"], y))
        >>> source[-1], target[0], target[1:] == labels[:-1], labels[-1]  # EOS, BOS, EOS
        (3, 2, True, 3)
    """

    tokenizer_cls = TransformerTokenizer

    def __init__(
        self,
        tokenizer,
        encoder_sequence_length: int | None = None,
        decoder_sequence_length: int | None = None,
        **kwargs,
    ):
        super().__init__(
            tokenizer,
            encoder_sequence_length=encoder_sequence_length,
            decoder_sequence_length=decoder_sequence_length,
            **kwargs,
        )

    def build(self, input_shape):
        self.built = True  # no packers: batches are padded to their longest row

    def call(self, x, y=None, sample_weight=None, **kwargs):
        if kwargs:
            raise ValueError(
                f"unexpected arguments {sorted(kwargs)}: set encoder_sequence_length and "
                "decoder_sequence_length on the preprocessor"
            )
        if isinstance(x, dict) and set(MODEL_INPUTS) <= set(x):
            return keras.utils.pack_x_y_sample_weight(x, y, sample_weight)  # already ids
        if isinstance(x, dict):
            missing = {"encoder_text", "decoder_text"} - set(x)
            if missing:
                raise ValueError(
                    f"a dict of text needs the keys 'encoder_text' and 'decoder_text'; it "
                    f"lacks {sorted(missing)} (it has {sorted(x)})"
                )
            if y is not None:
                raise ValueError("with 'decoder_text' in x, give no y: it is the target")
            sources, targets = x["encoder_text"], x["decoder_text"]
        else:
            if y is None:
                raise ValueError(NEEDS_TARGETS)
            sources, targets = x, y
        source_ids = self.source_ids(sources)
        target = _ragged(self.tokenizer.tokenize_target(_strings(targets)))
        target = target[:, : self._length(self.decoder_sequence_length) - 1]
        bos = tf.RaggedTensor.from_tensor(tf.fill([target.nrows(), 1], BOS_ID))
        eos = tf.RaggedTensor.from_tensor(tf.fill([target.nrows(), 1], EOS_ID))
        inputs = {
            "source_ids": source_ids,
            "target_ids": concat_rows(bos, target).to_tensor(PAD_ID),
        }
        labels = concat_rows(target, eos).to_tensor(PAD_ID)
        return keras.utils.pack_x_y_sample_weight(inputs, labels, sample_weight)

    def source_ids(self, sources, source_prefix=None):
        """Source text to int32 ids `[batch, len]`: invalid UTF-8 replaced (U+FFFD), the
        source prefix put first (`kt.decoding.with_source_prefix`'s rule), tokens cut to
        `encoder_sequence_length - 1`, then EOS, 0-padded to the longest. A blank source
        (whitespace only) is EOS alone, whatever its tokenizer makes of whitespace: nothing
        to translate, which `generate_postprocess` answers with "".

        Args:
            sources: str, list of str or string tensor `[batch]`.
            source_prefix: None, a str (every source's), or a string tensor `[batch]` (each
                source's; "" for none). Defaults to None.
        """
        texts = tf.strings.unicode_transcode(
            _strings(sources), "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        texts = tf.where(tf.strings.regex_full_match(texts, BLANK), "", texts)
        if source_prefix is not None:
            texts = _with_source_prefix(texts, source_prefix)
        tokens = _ragged(self.tokenizer.tokenize(texts))
        tokens = tokens[:, : rules.kept_source_tokens(self._length(self.encoder_sequence_length))]
        eos = tf.RaggedTensor.from_tensor(tf.fill([tokens.nrows(), 1], EOS_ID))
        return concat_rows(tokens, eos).to_tensor(PAD_ID)

    def generate_preprocess(self, x, sequence_length=None, source_prefix=None, **kwargs):
        """Source text (str, list, string tensor or `{"encoder_text": ...}`) to
        `{"source_ids": int32 [batch, len]}`, what `TransformerSeq2SeqLM.generate` decodes:
        every door's way in (`generate`, `kt.evaluation.Translator`, the SavedModel's
        signatures, which trace it). `source_prefix` is `source_ids`'; a str is checked
        against the source vocabulary's language codes (`kt.decoding.DecodingSettings`)."""
        if isinstance(x, dict):
            prompts = x.get("decoder_text", "")
            prompts = [prompts] if isinstance(prompts, (str, bytes)) else list(prompts)
            if any(prompts):
                raise ValueError(
                    "generate continues no target prompt: give 'encoder_text' alone, or "
                    "empty 'decoder_text' (a forced start is the target_prefix setting)"
                )
            x = x["encoder_text"]
        if isinstance(source_prefix, str):
            check_source_prefix(source_prefix, self.tokenizer.source)
        return {"source_ids": self.source_ids(x, source_prefix)}

    def generate_postprocess(self, x):
        """Generated ids to text: `{"target_ids": ..., "source_ids": ...}` (or the target ids
        alone), ids int `[batch, len]` or `[batch, n, len]` (n-best), EOS-terminated and
        0-padded. Eagerly: a list of str (or of lists of n str, best first); inside a
        `tf.function` (the SavedModel's signatures): a string tensor `[batch]` (`[batch,
        n]`). A source that holds nothing but EOS (an empty input, or spaces) gives "":
        nothing to translate."""
        ids = x["target_ids"] if isinstance(x, dict) else x
        source_ids = x.get("source_ids") if isinstance(x, dict) else None
        if not tf.executing_eagerly():
            return self._translations(ids, source_ids)
        ids = np.asarray(keras.ops.convert_to_numpy(ids), "int32")
        n = ids.shape[1] if ids.ndim == 3 else 1  # hypotheses a sentence
        texts = detokenize(self.tokenizer.target, ids.reshape(-1, ids.shape[-1]))
        if source_ids is not None:
            source_ids = np.asarray(keras.ops.convert_to_numpy(source_ids))
            empty = np.repeat(rules.nothing_to_translate(np.count_nonzero(source_ids, axis=1)), n)
            texts = ["" if nothing else text for nothing, text in zip(empty, texts, strict=True)]
        if ids.ndim == 3:
            return [texts[i : i + n] for i in range(0, len(texts), n)]
        return texts

    def _translations(self, ids, source_ids):
        """`generate_postprocess` in the graph: string tensor `[batch]` (`[batch, n]`)."""
        ids = tf.cast(ids, tf.int32)
        shape = tf.shape(ids)
        flat = tf.reshape(ids, [-1, shape[-1]])  # (batch * n, len); an empty batch too
        texts = self.tokenizer.target.detokenize(flat)
        texts = tf.reshape(texts, shape[:-1])
        if source_ids is not None:
            empty = rules.nothing_to_translate(tf.math.count_nonzero(source_ids, axis=1))
            if ids.shape.rank == 3:
                empty = empty[:, None]
            texts = tf.where(empty, tf.constant(""), texts)
        return texts

    @classmethod
    def for_model(cls, model, vocabularies) -> TransformerSeq2SeqLMPreprocessor:
        """The preprocessor of `model` (a task) when `vocabularies` are its own, else one
        over them, cut to the model's `max_length`: the one place where text becomes ids and
        ids text, for `kt.evaluation.Translator` and the SavedModel's signatures."""
        preprocessor = getattr(model, "preprocessor", None)
        if preprocessor is not None and preprocessor.tokenizer.vocabularies is vocabularies:
            return preprocessor
        limit = model.config.max_length
        return cls(
            TransformerTokenizer(vocabularies),
            encoder_sequence_length=limit,
            decoder_sequence_length=limit,
        )

    def _length(self, length):
        if length is None:
            raise ValueError(
                "this preprocessor has no sequence length yet: give encoder_sequence_length "
                "and decoder_sequence_length, or attach it to a TransformerSeq2SeqLM, which "
                "sets them to the model's max_length"
            )
        return length


def _ragged(tokens) -> tf.RaggedTensor:
    """Tokenizer output as a ragged int32 tensor: keras-hub's tokenizers give Python lists
    when run eagerly (their pure-Python path), tensors inside `tf.data` and `tf.function`."""
    if isinstance(tokens, tf.RaggedTensor):
        return tokens
    return tf.ragged.constant(tokens, dtype=tf.int32, ragged_rank=1, inner_shape=())


def _with_source_prefix(texts, prefix):
    """`kt.decoding.with_source_prefix` in the graph: strings `[batch]` with `prefix` (a str,
    or strings `[batch]`, "" for none) and a space first, unless blank or starting with a
    language code (`KEEPS_ITS_SOURCE`)."""
    prefix = tf.convert_to_tensor(prefix, tf.string)
    keeps = tf.strings.regex_full_match(texts, KEEPS_ITS_SOURCE) | tf.equal(prefix, "")
    return tf.where(keeps, texts, tf.strings.join([prefix, texts], " "))


def _strings(texts):
    """Text as a string tensor `[batch]` (a str becomes a batch of one)."""
    texts = tf.convert_to_tensor(texts, tf.string)
    return tf.reshape(texts, [-1]) if texts.shape.rank == 0 else texts


__all__ = ["TransformerSeq2SeqLMPreprocessor"]

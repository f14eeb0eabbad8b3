"""Translating text with a trained model, and scoring translations with sacrebleu.

BLEU and chrF are computed by sacrebleu on detokenized text against untouched references,
and reported with sacrebleu's signature so figures can be compared across papers.
"""

from __future__ import annotations

from keras_transformer._backends import require_tensorflow

require_tensorflow("kt.evaluation")

import keras
import sacrebleu
import tensorflow as tf

from keras_transformer import _backends as backends
from keras_transformer.decoding.plan import DecodingPlan
from keras_transformer.decoding.settings import BATCH_SIZE, DecodingSettings


class Translator:
    """Text in, text out: tokenization, batched cached decoding, detokenization.

    A progress bar over what the task's `generate` does: the settings' `DecodingPlan`, its
    search traced once for any batch and length, and the same batching loop
    (`kt.models.generation.translate_texts`: batches of similar length, put back in input
    order, so little time goes to padding).

    Args:
        model: a trained `keras_transformer.Transformer`, or a `TransformerSeq2SeqLM` task
            (whose tokenizer and decoding settings are then the defaults).
        vocabularies: its `keras_transformer.text.Vocabularies`; None takes the task's.
        decoding: `kt.decoding.DecodingSettings` or None. How to decode; None takes the
            task's settings, or the defaults (the paper's) for a plain model.
        beam_size: int or None. When given, overrides that setting of `decoding` (see
            `kt.decoding.DecodingSettings`), as do the eight below.
        length_penalty: float or None.
        ranking: str or None.
        finish_rule: str or None.
        stopping: str or None.
        max_extra_length: int or None.
        n_best: int or None. Translations a sentence, best first.
        target_prefix: str or None. Text every translation starts with (NLLB-200's target
            language code).
        source_prefix: str or None. Text every source starts with (NLLB-200's source
            language code; `kt.decoding.with_source_prefix`).
        batch_size: int. Sentences per batch. Defaults to 64
            (`kt.decoding.settings.BATCH_SIZE`).

    Examples:
        >>> import keras_transformer as kt
        >>> from keras_transformer.evaluation import Translator, score
        >>> english = ["In the beginning God created the heaven and the earth.", "God is love."]
        >>> spanish = ["En el principio creó Dios los cielos y la tierra.", "Dios es amor."]
        >>> vocabularies = kt.text.Vocabularies.train(english, spanish, 300)
        >>> config = kt.TransformerConfig.preset(
        ...     "tiny", vocab_size=vocabularies.target.vocabulary_size())
        >>> model = kt.build_transformer(config)  # untrained here: fit it first
        >>> translator = Translator(model, vocabularies, beam_size=1)  # greedy, for speed
        >>> translations = translator.translate(english)  # one str for each, in order
        >>> len(translations), sorted(score(translations, spanish))
        (2, ['bleu', 'bleu_signature', 'chrf', 'chrf_signature', 'sentences'])
    """

    def __init__(
        self,
        model,
        vocabularies=None,
        *,
        decoding: DecodingSettings | None = None,
        beam_size: int | None = None,
        length_penalty: float | None = None,
        ranking: str | None = None,
        finish_rule: str | None = None,
        stopping: str | None = None,
        max_extra_length: int | None = None,
        n_best: int | None = None,
        target_prefix: str | None = None,
        source_prefix: str | None = None,
        batch_size: int = BATCH_SIZE,
    ):
        if vocabularies is None:
            vocabularies = _task_vocabularies(model)
        if decoding is None:
            decoding = getattr(model, "decoding", None) or DecodingSettings()
        decoding = decoding.replace(
            beam_size=beam_size,
            length_penalty=length_penalty,
            ranking=ranking,
            finish_rule=finish_rule,
            stopping=stopping,
            max_extra_length=max_extra_length,
            n_best=n_best,
            target_prefix=target_prefix,
            source_prefix=source_prefix,
        )
        self.model = model
        self.vocabularies = vocabularies
        self.decoding = decoding
        self.beam_size = decoding.beam_size
        self.batch_size = batch_size
        # A task's own sampler (compile(sampler="top_k")) draws here as in its `generate`.
        self.sampling = getattr(model, "sampling", None)
        # Text in and out as the task's: its preprocessor, or one over these vocabularies.
        from keras_transformer.models import TransformerSeq2SeqLMPreprocessor

        self.preprocessor = TransformerSeq2SeqLMPreprocessor.for_model(model, vocabularies)
        self.plan = DecodingPlan.make(decoding, vocabularies.target, sampling=self.sampling)
        plan = self.plan
        self._search = backends.traced_search(lambda source_ids: plan.search(model, source_ids))

    def translate_ids(self, source_ids):
        """`(ids, scores)` for a batch of source ids `[batch, src_len]` (with `n_best` above
        1: `[batch, n, out_len]` and `[batch, n]`): the plan's search, as the SavedModel's
        `translate_ids` signature and `kt.decoding.translate_ids` answer."""
        return self._search(tf.convert_to_tensor(source_ids, tf.int32))

    def translate(self, texts, progress: bool = False) -> list:
        """Translations of `texts` (str), in the same order, as the task's `generate` gives
        them (with `n_best` above 1, a list of the n best for each); `progress` shows a
        progress bar."""
        from keras_transformer.models.generation import translate_texts

        texts = list(texts)
        bar = keras.utils.Progbar(len(texts), unit_name="sentence") if progress else None
        translations, _ = translate_texts(
            self.preprocessor,
            self.translate_ids,
            texts,
            source_prefix=self.decoding.source_prefix,
            batch_size=self.batch_size,
            on_batch=None if bar is None else bar.add,
        )
        return translations


def _task_vocabularies(model):
    """The vocabularies of a `TransformerSeq2SeqLM` task's tokenizer."""
    preprocessor = getattr(model, "preprocessor", None)
    if preprocessor is None:
        raise ValueError(
            "vocabularies=None needs a TransformerSeq2SeqLM task with its preprocessor; for a "
            "Transformer, pass its kt.text.Vocabularies"
        )
    return preprocessor.tokenizer.vocabularies


def score(hypotheses, references) -> dict:
    """sacrebleu corpus BLEU and chrF, with their signatures.

    Returns:
        `{"bleu", "chrf", "bleu_signature", "chrf_signature", "sentences"}`.
    """
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references; they must align"
        )
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": round(bleu_score.score, 2),
        "chrf": round(chrf_score.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "sentences": len(hypotheses),
    }


__all__ = ["Translator", "score"]

"""Translating text with a trained model, and scoring translations with sacrebleu.

BLEU and chrF are computed by sacrebleu on detokenized text against untouched references,
and reported with sacrebleu's signature so figures can be compared across papers.
"""

from __future__ import annotations

from keras_transformer.backends import require_tensorflow

require_tensorflow("kt.evaluation")

import keras
import numpy as np
import sacrebleu
import tensorflow as tf

from keras_transformer import decoding
from keras_transformer.data import source_batches
from keras_transformer.text import detokenize


class Translator:
    """Text in, text out: tokenization, batched cached decoding, detokenization.

    Sentences are decoded in batches of similar length (then put back in input order), so
    little time goes to padding. The decoder runs as one `tf.function` traced once for any
    batch and length.

    Args:
        model: a trained `keras_transformer.Transformer`.
        vocabularies: its `keras_transformer.text.Vocabularies`.
        beam_size: int. 1 = greedy search. Defaults to 4 (the paper's).
        length_penalty: float. alpha of Wu et al. (2016). Defaults to 0.6 (the paper's).
        finish_rule: str. Beam search's rule for finished hypotheses, "tensor2tensor" (the
            paper's code) or "fairseq" (see `decoding.beam_search`). Defaults to
            "tensor2tensor".
        stopping: str. When beam search stops, "exact" (tensor2tensor's rule) or "early" (see
            `decoding.beam_search`). Defaults to "exact".
        max_extra_length: int. Output may be this much longer than the input. Defaults to 50.
        batch_size: int. Sentences per batch. Defaults to 64.

    Example:
    >>> translator = Translator(model, vocabularies)  # doctest: +SKIP
    >>> translator.translate(["In the beginning, God created the heavens and the earth."])
    ... # doctest: +SKIP
    """

    def __init__(
        self,
        model,
        vocabularies,
        *,
        beam_size: int = 4,
        length_penalty: float = 0.6,
        finish_rule: str = "tensor2tensor",
        stopping: str = "exact",
        max_extra_length: int = 50,
        batch_size: int = 64,
    ):
        self.model = model
        self.vocabularies = vocabularies
        self.beam_size = beam_size
        self.batch_size = batch_size
        settings = dict(
            beam_size=beam_size,
            length_penalty=length_penalty,
            finish_rule=finish_rule,
            max_extra_length=max_extra_length,
            stopping=stopping,
        )
        self._search = tf.function(
            lambda source_ids: decoding.translate_ids(model, source_ids, **settings),
            input_signature=[tf.TensorSpec([None, None], tf.int32)],
            autograph=False,  # explicit control flow: nothing to convert (kt.decoding)
        )

    def translate_ids(self, source_ids):
        """`(ids, scores)` for a batch of source ids `[batch, src_len]`."""
        return self._search(tf.convert_to_tensor(source_ids, tf.int32))

    def translate(self, texts, progress: bool = False) -> list[str]:
        """Translations of `texts` (str), in the same order; `progress` shows a progress bar."""
        texts = list(texts)
        order = np.argsort([len(text) for text in texts], kind="stable")
        batches = source_batches(
            [texts[i] for i in order],
            self.vocabularies.source,
            max_length=self.model.config.max_length,
            batch_size=self.batch_size,
        )
        translations = []
        bar = keras.utils.Progbar(len(texts), unit_name="sentence") if progress else None
        for source_ids in batches:
            ids, _ = self.translate_ids(source_ids)
            decoded = detokenize(self.vocabularies.target, ids.numpy())
            translations.extend(_blank_without_pieces(source_ids.numpy(), decoded))
            if bar is not None:
                bar.add(len(ids))
        result = [""] * len(texts)
        for position, translation in zip(order, translations, strict=True):
            result[position] = translation
        return result


def _blank_without_pieces(source_ids, translations: list[str]) -> list[str]:
    """`translations`, with "" for each source row `[batch, src_len]` that holds nothing but
    EOS: an input with no piece (empty, or only spaces) has nothing to translate, the
    SavedModel export's rule (`export.savedmodel`), where a model would answer something."""
    nothing = np.count_nonzero(source_ids, axis=1) <= 1  # EOS alone
    return ["" if empty else text for empty, text in zip(nothing, translations, strict=True)]


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

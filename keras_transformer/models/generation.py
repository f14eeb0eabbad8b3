"""What `TransformerSeq2SeqLM.generate` does around its search, and
`kt.evaluation.Translator` with it: the inputs read as sentences (`texts_of`), the one
batching loop over them (`translate_texts`: sorted by length, batched, put back in order),
the scores as floats (`scores_of`, 0 where there was nothing to translate:
`core.rules.nothing_to_translate`), and the settings a keras-hub sampler stands for
(`search_settings`).
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import keras_hub
import numpy as np

from keras_transformer.core import rules
from keras_transformer.decoding.settings import DecodingSettings
from keras_transformer.special_ids import EOS_ID

# keras-hub's sampler names, as a keras-hub user passes them to `compile(sampler=...)`.
SAMPLING = {"top_k", "top_p", "random"}
UNSUPPORTED_SAMPLERS = {"contrastive", "speculative"}
TAKES = "a str, a list of str or a dataset of str"  # what generate translates


def check_arguments(stop_token_ids, max_length, batch_size, return_scores) -> None:
    """`generate`'s arguments besides its inputs and settings: ValueError naming the one
    that is not what `generate` takes."""
    if stop_token_ids not in ("auto", [EOS_ID], (EOS_ID,)):
        raise ValueError(
            f"stop_token_ids={stop_token_ids!r}: this model's searches stop at EOS "
            f"(id {EOS_ID}) only; pass 'auto'"
        )
    if max_length is not None and (
        isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1
    ):
        raise ValueError(f"max_length={max_length!r} must be None or an integer >= 1")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be an integer >= 1")
    if not isinstance(return_scores, bool):
        raise ValueError(f"return_scores={return_scores!r} must be True or False")


def answer(results, scores, *, return_scores: bool, plural: bool):
    """`generate`'s answer: the translations, or with `return_scores` a dict as the
    SavedModel's signatures answer (`translations`/`scores` for n-best lists)."""
    if not return_scores:
        return results
    if plural:
        return {"translations": results, "scores": scores}
    return {"translation": results, "score": scores}


def translate_texts(
    preprocessor,
    search: Callable,
    texts: list,
    *,
    source_prefix: str | None = None,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
) -> tuple[list, list]:
    """`(translations, scores)` of `texts`, in their order: decoded in batches of similar
    length (sorted first, so that little time goes to padding) by `search` (source ids
    `[batch, src_len]` -> `(ids, scores)`, a `DecodingPlan`'s compiled search), the text in
    and out the preprocessor's. `on_batch(count)` is told each batch's size (a progress
    bar)."""
    order = np.argsort([len(text) for text in texts], kind="stable")
    results, scores = [None] * len(texts), [None] * len(texts)
    for start in range(0, len(texts), batch_size):
        positions = order[start : start + batch_size]
        inputs = preprocessor.generate_preprocess(
            [texts[i] for i in positions], source_prefix=source_prefix
        )
        ids, score = search(inputs["source_ids"].numpy())
        translated = preprocessor.generate_postprocess({**inputs, "target_ids": ids})
        score = scores_of(score, inputs["source_ids"].numpy())
        for i, position in enumerate(positions):
            results[position], scores[position] = translated[i], score[i]
        if on_batch is not None:
            on_batch(len(positions))
    return results, scores


def scores_of(scores, source_ids) -> list:
    """A batch's scores `[batch]` (`[batch, n]`) as Python floats (lists of n), 0 where the
    source held nothing to translate, as its translation is "" (the SavedModel's rule)."""
    scores = np.asarray(keras.ops.convert_to_numpy(scores), "float32")
    empty = rules.nothing_to_translate(np.count_nonzero(source_ids, axis=1))
    scores = np.where(empty.reshape(-1, *[1] * (scores.ndim - 1)), 0.0, scores)
    return scores.tolist()


def texts_of(inputs) -> tuple[list[str], bool]:
    """`generate`'s inputs as a list of str, and whether one str was given: each sentence
    checked as the translators check theirs (`kt.serving.common.text_of`)."""
    # Here, not at the top: `import keras_transformer` leaves kt.serving to its first use.
    from keras_transformer.serving.common import lines_of, text_of

    if isinstance(inputs, dict):
        if "encoder_text" not in inputs:
            raise ValueError(
                "inputs: a dict takes keras-hub's 'encoder_text' (the sources); got "
                f"{sorted(inputs)}"
            )
        prompts = inputs.get("decoder_text", "")
        prompts = [prompts] if isinstance(prompts, (str, bytes)) else list(prompts)
        if any(text_of(p) for p in prompts):
            raise ValueError(
                "generate continues no target prompt: give 'encoder_text' alone, or empty "
                "'decoder_text' (a forced target prefix is not supported yet)"
            )
        inputs = inputs["encoder_text"]
    if isinstance(inputs, (str, bytes)):
        return [text_of(inputs)], True
    if type(inputs).__name__.endswith("Dataset") and hasattr(inputs, "as_numpy_iterator"):
        texts = []
        for element in inputs.as_numpy_iterator():
            element = np.asarray(element)
            texts.extend(text_of(t, f"inputs[{len(texts)}]") for t in element.reshape(-1))
        return texts, False
    if inputs is None or isinstance(inputs, (list, tuple)):  # checked as the translators check
        return lines_of(inputs, "inputs", decode=True, takes=TAKES), False
    array = np.asarray(keras.ops.convert_to_numpy(inputs) if hasattr(inputs, "numpy") else inputs)
    if array.ndim == 0:
        return [text_of(array.item())], True
    if array.ndim != 1:
        raise ValueError(f"generate takes text [batch]; got an array of shape {array.shape}")
    return [
        text_of(t.item() if hasattr(t, "item") else t, f"inputs[{i}]") for i, t in enumerate(array)
    ], False


def search_settings(sampler, settings: DecodingSettings):
    """`(decoding settings, sampling settings or None)` for `compile(sampler=...)`."""
    if isinstance(sampler, DecodingSettings):
        return sampler, None
    if isinstance(sampler, str):
        if sampler in UNSUPPORTED_SAMPLERS:
            raise ValueError(
                f"sampler={sampler!r} is not one this model's searches run; use 'greedy', "
                "'beam', 'top_k', 'top_p', 'random' or a kt.decoding.DecodingSettings"
            )
        if sampler == "beam":  # by name: the settings' beam search, whatever chose greedy
            beams = settings.beam_size if settings.beam_size > 1 else DecodingSettings.beam_size
            return settings.replace(beam_size=beams, n_best=1), None  # the best translation
        try:
            sampler = keras_hub.samplers.get(sampler)
        except (KeyError, ValueError) as error:
            raise ValueError(f"sampler={sampler!r} is not a keras-hub sampler: {error}") from None
    if not isinstance(sampler, keras_hub.samplers.Sampler):
        raise ValueError(
            f"sampler={sampler!r} must be a keras-hub sampler (name or instance) or a "
            "kt.decoding.DecodingSettings"
        )
    config = sampler.get_config()
    temperature = config.get("temperature", 1.0)
    name = type(sampler).__name__
    if isinstance(sampler, keras_hub.samplers.GreedySampler | keras_hub.samplers.BeamSampler):
        if temperature != 1.0:
            raise ValueError(
                f"{name}(temperature={temperature}): a search over log-probabilities does "
                "not change with the temperature; leave it at 1.0"
            )
        if isinstance(sampler, keras_hub.samplers.GreedySampler):
            return settings.replace(beam_size=1, n_best=1), None
        beams = config["num_beams"]
        n_best = beams if config.get("return_all_beams") else 1
        return settings.replace(beam_size=beams, n_best=n_best), None
    if isinstance(sampler, keras_hub.samplers.TopKSampler):
        return settings, {"temperature": temperature, "top_k": config["k"], "seed": config["seed"]}
    if isinstance(sampler, keras_hub.samplers.TopPSampler):
        return settings, {
            "temperature": temperature,
            "top_p": config["p"],
            "top_k": config.get("k") or 0,
            "seed": config["seed"],
        }
    if isinstance(sampler, keras_hub.samplers.RandomSampler):
        return settings, {"temperature": temperature, "seed": config["seed"]}
    raise ValueError(
        f"sampler {name} is not one this model's searches run; use GreedySampler, "
        "BeamSampler, TopKSampler, TopPSampler, RandomSampler or a kt.decoding.DecodingSettings"
    )


__all__ = [
    "answer",
    "check_arguments",
    "scores_of",
    "search_settings",
    "texts_of",
    "translate_texts",
]

"""A small random decoder-only language model and prompts of different lengths, for the
generation tests on TensorFlow (tests/test_generate.py) and JAX (tests/jax/), and the tie
rule of their comparisons (`alike_but_at_ties`): no TensorFlow here."""

import keras
import numpy as np

import keras_transformer as kt
from keras_transformer.decoding.settings import DEFAULT
from tests import ties

VOCAB, MAX_LENGTH = 40, 16
PROMPTS = [[2, 5, 6, 7, 8, 9], [2, 11], [2, 13, 14, 15]]  # start token 2, then the prompt


def language_model(seed: int = 0) -> keras.Model:
    """Ids `[batch, len]` (0 = padding) to next-token logits, as examples/language_model.py
    builds it: learned positions, pre-norm, GELU, the tied projection."""
    keras.utils.set_random_seed(seed)
    ids = keras.Input((None,), dtype="int32", name="ids")
    embedding = kt.layers.TransformerEmbedding(
        VOCAB, 16, max_length=MAX_LENGTH, positional="learned", name="embedding"
    )
    decoder = kt.layers.Decoder(2, 2, 32, activation="gelu", norm_first=True, name="decoder")
    hidden = decoder(embedding(ids), padding_mask=kt.ops.padding_mask(ids))
    return keras.Model(ids, embedding(hidden, reverse=True), name="language_model")


def log_prob_of(model, prompts, continuations) -> np.ndarray:
    """log P(continuation | prompt) `[batch]` from the model's full forward pass on each
    prompt + continuation alone, unpadded (0s in a continuation end it)."""
    totals = []
    for prompt, continuation in zip(prompts, np.asarray(continuations), strict=True):
        tokens = [int(t) for t in continuation if t != 0]
        sequence = np.array([[*prompt, *tokens]], "int32")
        logits = keras.ops.convert_to_numpy(model(sequence[:, :-1]))[0].astype("float64")
        top = logits.max(-1, keepdims=True)
        log_probs = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
        picked = log_probs[np.arange(len(prompt) - 1, sequence.shape[1] - 1), tokens]
        totals.append(picked.sum())
    return np.array(totals)


def replay_settings(prompt, method="greedy", max_new_tokens=32, **settings):
    """`ties.replay_beam`'s settings for `generate(model, [prompt], method=method,
    max_new_tokens=max_new_tokens, **settings)` (its defaults where `settings` names none;
    padding the only token never chosen, any token at the limit), or None but for beam
    search."""
    if method != "beam":
        return None
    rules = ("beam_size", "length_penalty", "finish_rule", "stopping")
    replay = {name: settings.get(name, getattr(DEFAULT, name)) for name in rules}
    limit = min(max_new_tokens, MAX_LENGTH - len(prompt))
    n_best = settings.get("num_hypotheses") or 1
    return {
        **replay,
        "limit": limit,
        "n_best": n_best,
        "ranking": "gnmt",  # generate's length penalty: ((5 + |Y|) / 6) ** alpha
        "never": (ties.PAD_ID,),
        "force_stop": False,
    }


def alike_but_at_ties(
    model, ids, other_ids, scores=None, other_scores=None, *, atol=1e-5, **settings
):
    """Two computations of `generate(model, PROMPTS, **settings)`: each row's ids equal (and
    its scores within `atol`), but a row where the two part at a choice within
    `ties.SCORE_TOLERANCE` (`ties.rows_alike_but_at_ties`: greedy's two tokens, beam
    search's replay), where the two computations' last bits may order it either way.
    Returns how many rows are alike. With `stop_ids=()` (greedy), rows are compared whole:
    no token ends them, EOS's id neither."""
    if settings.get("stop_ids", (ties.EOS_ID,)) == ():
        alike = _whole_rows_alike_but_at_ties(model, ids, other_ids)
    else:
        alike = ties.rows_alike_but_at_ties(
            lambda row: ties.prompted(model, PROMPTS[row]),
            ids,
            other_ids,
            lambda row: replay_settings(PROMPTS[row], **settings),
        )
    if scores is not None:
        np.testing.assert_allclose(
            np.asarray(scores)[alike], np.asarray(other_scores)[alike], atol=atol
        )
    return int(alike.sum())


def _whole_rows_alike_but_at_ties(model, ids, other_ids):
    """Greedy rows without a stop token, compared whole: equal, or where they first part
    the model's logits of the two tokens are within `ties.SCORE_TOLERANCE`
    (`ties.tokens_part_at_a_tie`). Raises AssertionError naming the first row that parts
    elsewhere; returns which rows are alike, bool `[batch]`."""
    alike = []
    for row, (a, b) in enumerate(zip(np.asarray(ids), np.asarray(other_ids), strict=True)):
        a, b = [int(t) for t in a], [int(t) for t in b]
        if a != b:
            step = next(t for t, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
            logits = ties.prompted(model, PROMPTS[row])([[ties.BOS_ID, *a[:step]]])[0]
            assert ties.tokens_part_at_a_tie(logits, a[step], b[step], tie=ties.SCORE_TOLERANCE), (
                row,
                a,
                b,
            )
        alike.append(a == b)
    return np.array(alike, bool)

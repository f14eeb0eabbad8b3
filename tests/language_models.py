"""A small random decoder-only language model and prompts of different lengths, for the
generation tests on TensorFlow (tests/test_generate.py) and JAX (tests/jax/): no TensorFlow
here."""

import keras
import numpy as np

import keras_transformer as kt

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

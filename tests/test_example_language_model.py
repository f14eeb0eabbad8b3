"""examples/language_model.py: the decoder-only language model beats a uniform guess on
unseen books, its cached steps give the full model's logits, and it samples text."""

import numpy as np
import pytest

from examples import language_model

SMALL = [
    "--train-sentences", "3000", "--vocab-size", "500", "--max-length", "40",
    "--d-model", "64", "--num-layers", "2", "--num-heads", "2", "--d-ff", "128",
    "--batch-size", "32", "--steps", "100", "--samples", "2",
]  # fmt: skip


@pytest.mark.slow
def test_language_model_learns_and_samples():
    figures = language_model.main([*SMALL, "--prompt", "Y dijo"])
    assert np.isfinite(figures["dev_perplexity"])
    assert figures["dev_perplexity"] < figures["uniform_perplexity"] / 2
    assert len(figures["samples"]) == 2
    for text in figures["samples"]:
        assert text.startswith("Y dijo") and len(text) > len("Y dijo")


def test_cached_steps_equal_the_full_model():
    model = language_model.build_language_model(
        50, max_length=16, d_model=16, num_layers=2, num_heads=2, d_ff=32, dropout=0.1
    )
    ids = np.random.default_rng(0).integers(4, 50, size=(2, 7)).astype("int32")
    full = np.asarray(model(ids))  # (batch, len, vocab), no cache
    cache = model.get_layer("decoder").init_cache(length=16, batch_size=2)
    logits, cache = language_model.step(model, ids[:, :3], 0, cache)  # a prompt at once
    np.testing.assert_allclose(logits, full[:, 2], atol=1e-4)
    for t in range(3, 7):
        logits, cache = language_model.step(model, ids[:, t : t + 1], t, cache)
        np.testing.assert_allclose(logits, full[:, t], atol=1e-4)

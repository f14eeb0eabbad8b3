"""examples/language_model.py: the decoder-only language model beats a uniform guess on
unseen books and continues prompts of different lengths in one batch, with the library's
generation (its agreement with the full model: tests/test_generate.py)."""

import numpy as np
import pytest

from examples import language_model

SMALL = [
    "--train-sentences", "3000", "--vocab-size", "500", "--max-length", "40",
    "--d-model", "64", "--num-layers", "2", "--num-heads", "2", "--d-ff", "128",
    "--batch-size", "32", "--steps", "100", "--samples", "2", "--max-new-tokens", "12",
]  # fmt: skip
PROMPTS = ["Y dijo", "En el principio creó Dios los cielos"]


@pytest.mark.slow
@pytest.mark.exact
def test_language_model_learns_and_continues_a_batch_of_prompts():
    figures = language_model.main([*SMALL, "--prompt", PROMPTS[0], "--prompt", PROMPTS[1]])
    assert np.isfinite(figures["dev_perplexity"])
    assert figures["dev_perplexity"] < figures["uniform_perplexity"] / 2
    samples = figures["samples"]
    assert len(samples) == 4  # two continuations of each prompt, one batch
    for text, prompt in zip(samples, [p for p in PROMPTS for _ in range(2)], strict=True):
        assert text.startswith(prompt) and len(text) > len(prompt)

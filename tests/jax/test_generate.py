"""`kt.decoding.generate` on JAX (compiled by `jax.jit`, as every search there): each row of
a mixed-length batch generates what it generates alone, the cached steps give the uncached
model's log-probabilities, and seeded sampling repeats. The exhaustive checks run on
TensorFlow (tests/test_generate.py), with the `exact` tests' rule: on the seeded model, ids
equal, but a row where two computations part at a choice within `ties.SCORE_TOLERANCE`
(`alike_but_at_ties`, tests/language_models.py), all but one row alike (all when written)."""

import numpy as np
import pytest

from keras_transformer.decoding import generate
from keras_transformer.decoding.language_model import prompt_tensor
from tests.language_models import PROMPTS, alike_but_at_ties, language_model, log_prob_of

SHORT = {"max_new_tokens": 6}


@pytest.fixture(scope="module")
def model():
    return language_model()


@pytest.mark.parametrize("method", ["greedy", "beam"])
@pytest.mark.exact
def test_each_row_generates_as_alone_and_as_the_uncached_model(model, method):
    settings = {**SHORT, "method": method, "beam_size": 3, "length_penalty": 0.0}
    ids, scores = generate(model, PROMPTS, **settings)
    batch = prompt_tensor(PROMPTS)
    # Alone, each in a batch of one of the same width (one program for the three).
    alone = [generate(model, batch[row : row + 1], **settings) for row in range(len(PROMPTS))]
    alone_ids, alone_scores = (np.concatenate([a[i] for a in alone]) for i in range(2))
    full_ids, full_scores = generate(model, PROMPTS, use_cache=False, **settings)
    for other_ids, other_scores in ((alone_ids, alone_scores), (full_ids, full_scores)):
        assert other_ids.shape == ids.shape
        alike = alike_but_at_ties(model, ids, other_ids, scores, other_scores, **settings)
        assert alike >= len(PROMPTS) - 1, alike
    np.testing.assert_allclose(scores, log_prob_of(model, PROMPTS, ids), atol=1e-4)


@pytest.mark.exact
def test_seeded_sampling_repeats_and_top_k_1_is_greedy(model):
    settings = {**SHORT, "method": "sample", "top_p": 0.9, "seed": 3}
    first, scores = generate(model, PROMPTS, **settings)
    np.testing.assert_array_equal(generate(model, PROMPTS, **settings)[0], first)
    np.testing.assert_allclose(scores, log_prob_of(model, PROMPTS, first), atol=1e-4)
    greedy = generate(model, PROMPTS, **SHORT)[0]
    # Another program than greedy's: apart only at two tokens within ties.SCORE_TOLERANCE.
    top_1 = generate(model, PROMPTS, **settings, top_k=1)[0]
    assert alike_but_at_ties(model, top_1, greedy) >= len(PROMPTS) - 1


def test_greedy_and_beam_leave_keras_random_state_as_it_was(model):
    """Only sampling draws a seed from Keras's global generator when given none."""
    import keras

    keras.utils.set_random_seed(1)
    expected = np.asarray(keras.random.normal((3,)))
    keras.utils.set_random_seed(1)
    generate(model, PROMPTS, **SHORT)
    generate(model, PROMPTS, **SHORT, method="beam", beam_size=2)
    np.testing.assert_array_equal(np.asarray(keras.random.normal((3,))), expected)

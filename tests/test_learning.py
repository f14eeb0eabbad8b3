"""A small model learns a toy transduction: reversing random sequences.

Judged on held-out sequences by greedy decoding (each token predicted from the model's own
previous outputs), not by teacher-forced accuracy. The model is the session's
`reversal_model` fixture (tests/conftest.py), trained as tests/reversal.py describes.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import greedy_search
from tests.reversal import MAX_LEN, held_out_data


@pytest.mark.slow
@pytest.mark.exact
def test_a_small_model_learns_to_reverse_sequences(reversal_model):
    held_out_source, held_out_target = held_out_data()
    assert len(held_out_source) > 450

    search = tf.function(lambda source: greedy_search(reversal_model, source), jit_compile=True)
    predicted, _ = search(tf.constant(held_out_source))
    predicted = np.asarray(predicted)[:, : MAX_LEN + 1]  # BOS dropped, like the labels below
    real = held_out_target[:, 1:] != 0
    accuracy = (predicted == held_out_target[:, 1:])[real].mean()
    assert accuracy >= 0.95, f"held-out token accuracy {accuracy:.3f}"

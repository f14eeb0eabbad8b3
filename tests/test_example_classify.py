"""examples/classify.py: the encoder-only classifier, trained briefly, does better than the
majority class on books it never saw, and its saved model and vocabulary reload."""

import keras
import numpy as np
import pytest

import keras_transformer as kt
from examples import classify

pytestmark = pytest.mark.slow

SMALL = [
    "--train-sentences", "3000", "--vocab-size", "500", "--max-length", "48",
    "--d-model", "64", "--num-layers", "1", "--num-heads", "2", "--d-ff", "128",
    "--batch-size", "32", "--steps", "150",
]  # fmt: skip


@pytest.mark.exact
def test_classifier_beats_the_majority_baseline_on_unseen_books(tmp_path):
    figures = classify.main([*SMALL, "--out", str(tmp_path)])
    # Dev (Esther, Galatians) is near balance: a constant answer cannot score well on it.
    assert 0.5 < figures["dev_baseline"] < 0.6
    assert figures["dev_accuracy"] > figures["dev_baseline"] + 0.1
    # Test is mostly Proverbs; a constant answer has a balanced accuracy of one half.
    assert figures["test_baseline"] > 0.5
    assert figures["dev_balanced_accuracy"] > 0.6
    assert figures["test_balanced_accuracy"] > 0.6

    # The saved model and vocabulary give the same dev accuracy.
    model = keras.saving.load_model(tmp_path / "classifier.keras")
    tokenizer = kt.text.make_tokenizer(tmp_path / "vocab.model")
    texts, labels = classify.read_verses(classify.DATA, "dev")
    logits = model.predict(classify.encode(tokenizer, texts, 48), verbose=0)
    assert np.mean(logits.argmax(-1) == labels) == pytest.approx(figures["dev_accuracy"])


def test_padding_does_not_change_the_prediction():
    model = classify.build_classifier(
        50, max_length=16, d_model=16, num_layers=1, num_heads=2, d_ff=32, dropout=0.0
    )
    ids = np.array([[5, 9, 14, 0, 0, 0]], "int32")
    np.testing.assert_allclose(model(ids), model(ids[:, :3]), atol=1e-5)

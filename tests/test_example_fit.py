"""examples/fit.py, the model.fit user's path, on a slice of the bundled corpus in seconds."""

import math

import keras
import numpy as np
import pytest

import keras_transformer as kt
from examples import fit

TINY = [
    "--train-pairs", "1000",
    "--vocab-size", "400",
    "--steps", "20",
    "--steps-per-epoch", "10",
    "--tokens-per-batch", "512",
    "--max-length", "32",
    "--no-jit-compile",  # XLA would compile each bucket's shape: longer than these 20 steps
    "--beam-size", "1",
    "--sentence", "God is love.",
]  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fit")
    return out, fit.main([*TINY, "--out", str(out)])


@pytest.mark.exact
def test_the_loss_falls_and_every_figure_is_reported(run):
    _, figures = run
    assert figures["train_pairs"] == 1000 and figures["dev_pairs"] == 316
    assert figures["steps"] == 20
    assert figures["final_loss"] < figures["first_epoch_loss"]  # no margin
    assert math.isfinite(figures["dev_loss"]) and 0 <= figures["dev_accuracy"] <= 1
    translations = figures["translations"]
    assert list(translations) == ["God is love."]
    assert isinstance(translations["God is love."], str)


def test_the_saved_model_reloads_without_custom_objects_and_gives_the_same_logits(run):
    out, figures = run
    assert figures["reloaded_max_logit_difference"] <= 1e-6
    assert (out / "vocab" / "shared.model").exists()  # the model needs its vocabulary
    vocabularies = kt.text.Vocabularies.load(out / "vocab")
    reloaded = keras.saving.load_model(out / "model.keras")
    assert isinstance(reloaded, kt.Transformer)
    assert reloaded.config.vocab_size == vocabularies.target.vocabulary_size()
    assert reloaded.count_params() == figures["parameters"]
    assert int(reloaded.optimizer.iterations.numpy()) == 20  # the optimizer's state came too


def test_a_reloaded_model_whose_logits_differ_is_refused(tmp_path, monkeypatch):
    model = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=300))
    inputs = {"source_ids": np.array([[5, 6, 7, 3]]), "target_ids": np.array([[2, 8, 9]])}
    reloaded, difference = fit.save_and_reload(model, tmp_path / "same.keras", inputs)
    assert difference == 0.0 and reloaded is not model
    load_model = keras.saving.load_model

    def perturbed(path):
        model = load_model(path)
        embeddings = model.get_layer("embedding").trainable_weights[0]  # [vocab, d_model]
        noise = np.random.default_rng(0).normal(0, 0.01, embeddings.shape).astype("float32")
        embeddings.assign(embeddings + noise)
        return model

    monkeypatch.setattr(keras.saving, "load_model", perturbed)
    with pytest.raises(RuntimeError, match="logits differ"):
        fit.save_and_reload(model, tmp_path / "perturbed.keras", inputs)

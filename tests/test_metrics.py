"""MaskedAccuracy and Perplexity: references, padding, and global figures under
MirroredStrategy."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from tests.test_losses import LABELS, LOGITS, TOKENS, _token_model


def reference_accuracy(labels, logits):
    mask = labels != 0
    return (logits.argmax(-1) == labels)[mask].mean()


def reference_perplexity(labels, logits):
    logits = logits.astype("float64")
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_p, labels[..., None], -1)[..., 0]
    return np.exp(nll[labels != 0].mean())


def test_masked_accuracy_counts_real_tokens_only():
    metric = kt.metrics.MaskedAccuracy()
    metric.update_state(LABELS, LOGITS)
    np.testing.assert_allclose(
        float(metric.result()), reference_accuracy(LABELS, LOGITS), rtol=1e-6
    )
    # Predicting padding right does not help: only real tokens count.
    metric.reset_state()
    cheat = LOGITS.copy()
    cheat[..., 0] += 100 * (LABELS == 0)
    metric.update_state(LABELS, cheat)
    np.testing.assert_allclose(
        float(metric.result()), reference_accuracy(LABELS, LOGITS), rtol=1e-6
    )


def test_perplexity_of_real_tokens():
    metric = kt.metrics.Perplexity()
    metric.update_state(LABELS, LOGITS)
    np.testing.assert_allclose(
        float(metric.result()), reference_perplexity(LABELS, LOGITS), rtol=1e-5
    )


def test_metrics_accumulate_over_batches_by_token_count():
    metric = kt.metrics.MaskedAccuracy()
    for row in range(3):
        metric.update_state(LABELS[row : row + 1], LOGITS[row : row + 1])
    np.testing.assert_allclose(
        float(metric.result()), reference_accuracy(LABELS, LOGITS), rtol=1e-6
    )


def test_config_round_trip():
    for metric in (kt.metrics.MaskedAccuracy(pad_id=2), kt.metrics.Perplexity(mask_token_id=2)):
        revived = keras.metrics.deserialize(keras.metrics.serialize(metric))
        assert type(revived) is type(metric) and revived.get_config() == metric.get_config()


def test_mirrored_evaluation_gives_global_figures(mirrored):
    weights = [w.numpy() for w in _token_model().weights]
    results = []
    for strategy in (tf.distribute.get_strategy(), mirrored):
        with strategy.scope():
            model = _token_model()
            model.set_weights(weights)
            model.compile(
                loss=kt.losses.LabelSmoothedCrossEntropy(label_smoothing=0.0),
                metrics=[kt.metrics.MaskedAccuracy(), kt.metrics.Perplexity()],
            )
        results.append(model.evaluate(TOKENS, TOKENS, batch_size=4, verbose=0, return_dict=True))
    single, distributed = results
    logits = np.asarray(model(TOKENS))
    np.testing.assert_allclose(
        single["perplexity"], reference_perplexity(TOKENS, logits), rtol=1e-5
    )
    for name in ("masked_accuracy", "perplexity", "loss"):
        np.testing.assert_allclose(distributed[name], single[name], rtol=1e-5)


@pytest.mark.parametrize("distributed", [False, True])
def test_token_count_is_global_and_survives_validation(distributed, mirrored):
    strategy = mirrored if distributed else tf.distribute.get_strategy()
    with strategy.scope():
        model = _token_model()
        model.compile(
            optimizer="sgd",
            loss=kt.losses.LabelSmoothedCrossEntropy(),
            metrics=[kt.metrics.TokenCount()],
            jit_compile=not distributed,
        )
    train = tf.data.Dataset.from_tensors((TOKENS, TOKENS)).repeat()
    validation = tf.data.Dataset.from_tensors((TOKENS[:2], TOKENS[:2]))  # 2 tokens against 14
    history = model.fit(
        train, steps_per_epoch=1, validation_data=validation, epochs=2, shuffle=False, verbose=0
    )
    assert history.history["tokens"] == [14.0, 14.0]
    assert history.history["val_tokens"] == [2.0, 2.0]
    revived = keras.metrics.deserialize(keras.metrics.serialize(kt.metrics.TokenCount(pad_id=5)))
    assert revived.pad_id == 5

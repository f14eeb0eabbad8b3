"""LabelSmoothedCrossEntropy: NumPy reference, padding, the global-batch mean under
MirroredStrategy, and the stock (autodiff) and fast (hand-written gradient) paths agreeing."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.fast import switched as fast_path

RNG = np.random.default_rng(0)
LOGITS = RNG.normal(size=(3, 5, 11)).astype("float32") * 3
LABELS = np.array([[4, 2, 9, 0, 0], [1, 1, 0, 0, 0], [3, 8, 7, 6, 5]], "int32")


@pytest.fixture(params=[False, True], ids=["stock", "fast"])
def path(request):
    """Runs a test on the stock path and again with `kt.fast` on."""
    with fast_path(request.param):
        yield request.param


def smoothed_target(labels, shape, eps, pad=0):
    """The smoothed target distribution: 1 - eps on the label, eps spread evenly over every
    id but padding (never a target)."""
    target = np.full(shape, eps / (shape[-1] - 1))
    target[..., pad] = 0.0
    labels = labels[..., None]
    np.put_along_axis(target, labels, np.take_along_axis(target, labels, -1) + 1 - eps, -1)
    return target


def reference(labels, logits, eps, pad=0):
    logits = logits.astype("float64")
    logits = logits - logits.max(-1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    per_token = -(smoothed_target(labels, logits.shape, eps, pad) * log_p).sum(-1)
    mask = labels != pad
    return per_token[mask].sum() / mask.sum()


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_equals_the_reference(eps, path):
    loss = kt.losses.LabelSmoothedCrossEntropy(label_smoothing=eps)
    np.testing.assert_allclose(
        float(loss(LABELS, LOGITS)), reference(LABELS, LOGITS, eps), rtol=1e-5
    )


def test_without_smoothing_equals_keras_crossentropy_over_real_tokens():
    ours = kt.losses.LabelSmoothedCrossEntropy(label_smoothing=0.0)
    keras_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")
    mask = (LABELS != 0).astype("float32")
    expected = float(keras_loss(LABELS, LOGITS, sample_weight=mask)) / mask.sum()
    np.testing.assert_allclose(float(ours(LABELS, LOGITS)), expected, rtol=1e-5)


def test_padding_logits_do_not_matter():
    loss = kt.losses.LabelSmoothedCrossEntropy()
    changed = LOGITS.copy()
    changed[LABELS == 0] = 1e4
    assert float(loss(LABELS, changed)) == pytest.approx(float(loss(LABELS, LOGITS)))


def test_sample_weight_scales_sequences():
    loss = kt.losses.LabelSmoothedCrossEntropy()
    weights = np.array([1.0, 0.0, 1.0], "float32")
    mask = LABELS != 0
    per_token = loss.call(LABELS, LOGITS).numpy() * mask.sum()  # undo the mean
    expected = (per_token * weights[:, None]).sum() / mask.sum()
    np.testing.assert_allclose(
        float(loss(LABELS, LOGITS, sample_weight=weights)), expected, rtol=1e-5
    )


def reference_gradient(labels, logits, eps, weights):
    """d loss / d logits of the NumPy reference: (softmax - smoothed target) per real token."""
    logits = logits.astype("float64")
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    target = smoothed_target(labels, logits.shape, eps)
    mask = labels != 0
    return (probs - target) * (mask * weights[:, None])[..., None] / mask.sum()


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_gradient_equals_the_reference(eps, path):
    loss = kt.losses.LabelSmoothedCrossEntropy(label_smoothing=eps)
    weights = np.array([1.0, 0.5, 2.0], "float32")
    logits = tf.constant(LOGITS)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        value = loss(LABELS, logits, sample_weight=weights)
    np.testing.assert_allclose(
        tape.gradient(value, logits).numpy(),
        reference_gradient(LABELS, LOGITS, eps, weights),
        atol=1e-7,
        rtol=1e-5,
    )


def test_gradient_under_xla_with_unknown_batch(path):
    loss = kt.losses.LabelSmoothedCrossEntropy()

    @tf.function(
        jit_compile=True,
        input_signature=[tf.TensorSpec([None, 5], tf.int32), tf.TensorSpec([None, 5, 11])],
    )
    def gradient(labels, logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            value = loss(labels, logits)
        return tape.gradient(value, logits)

    np.testing.assert_allclose(
        gradient(LABELS, LOGITS).numpy(),
        reference_gradient(LABELS, LOGITS, 0.1, np.ones(3)),
        atol=1e-7,
        rtol=1e-5,
    )


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_far_apart_logits_give_finite_loss_and_gradient(eps, path):
    """Logits hundreds apart: the labels' probabilities underflow to 0 in float32, yet the
    loss is the label's distance below the log-normalizer, not inf or NaN."""
    logits = LOGITS * 100  # spreads of up to ~1,800
    loss = kt.losses.LabelSmoothedCrossEntropy(label_smoothing=eps)
    weights = np.ones(3, "float32")
    tensor = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(tensor)
        value = loss(LABELS, tensor)
    np.testing.assert_allclose(float(value), reference(LABELS, logits, eps), rtol=1e-5)
    np.testing.assert_allclose(
        tape.gradient(value, tensor).numpy(),
        reference_gradient(LABELS, logits, eps, weights),
        atol=1e-7,
        rtol=1e-5,
    )


def test_half_precision_logits_are_upcast(path):
    loss = kt.losses.LabelSmoothedCrossEntropy()
    half = keras.ops.cast(LOGITS, "float16")
    np.testing.assert_allclose(float(loss(LABELS, half)), reference(LABELS, LOGITS, 0.1), rtol=1e-3)


def _loss_and_gradient(labels, logits, eps, weights, compiled):
    loss = kt.losses.LabelSmoothedCrossEntropy(label_smoothing=eps)

    def value_and_gradient(labels, logits, weights):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            value = loss(labels, logits, sample_weight=weights)
        return value, tape.gradient(value, logits)

    if compiled:  # traced here, under the switch as it is now
        value_and_gradient = tf.function(value_and_gradient, jit_compile=True)
    return value_and_gradient(tf.constant(labels), tf.constant(logits), tf.constant(weights))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "xla"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("scale", [1, 100], ids=["near", "far-apart"])
@pytest.mark.exact
def test_fast_and_stock_paths_agree(compiled, eps, scale):
    # The hand-written gradient against autodiff's: float32 rounding apart (rtol 1e-5; atol
    # 1e-8 for the far-apart logits' vanishing entries).
    logits = LOGITS * scale
    weights = np.array([1.0, 0.5, 2.0], "float32")
    with fast_path(False):
        value, gradient = _loss_and_gradient(LABELS, logits, eps, weights, compiled)
    with fast_path(True):
        fast_value, fast_gradient = _loss_and_gradient(LABELS, logits, eps, weights, compiled)
    np.testing.assert_allclose(float(fast_value), float(value), rtol=1e-5)
    np.testing.assert_allclose(fast_gradient, gradient, rtol=1e-5, atol=1e-8)


@pytest.mark.exact
def test_per_token_losses_of_both_paths_agree_on_any_leading_shape():
    """`smoothed_cross_entropy` itself, on `[batch, len]` and on flat `[tokens]` labels."""
    for labels, logits in ((LABELS, LOGITS), (LABELS.reshape(-1), LOGITS.reshape(-1, 11))):
        with fast_path(False):
            stock = kt.losses.smoothed_cross_entropy(labels, tf.constant(logits), 0.1)
        with fast_path(True):
            fast = kt.losses.smoothed_cross_entropy(labels, tf.constant(logits), 0.1)
        assert fast.shape == labels.shape
        np.testing.assert_allclose(fast, stock, rtol=1e-5)


def test_the_loss_takes_the_stock_path_by_default():
    """No test leaves the switch on (tests/test_fast.py checks that a fresh process starts
    with it off), and with it off the loss is the plain expression of paper 5.4, the
    smoothing's mean over every id but padding (or every id, with `pad_id=None`)."""
    assert not kt.fast.is_enabled()
    value = kt.losses.smoothed_cross_entropy(tf.constant(LABELS), tf.constant(LOGITS), 0.1)
    log_probs = tf.nn.log_softmax(LOGITS)
    nll = -tf.gather(log_probs, LABELS, batch_dims=2)
    uniform = -tf.reduce_mean(log_probs[..., 1:], -1)
    np.testing.assert_allclose(value, 0.9 * nll + 0.1 * uniform, rtol=1e-6)
    every = kt.losses.smoothed_cross_entropy(LABELS, tf.constant(LOGITS), 0.1, pad_id=None)
    np.testing.assert_allclose(every, 0.9 * nll + 0.1 * -tf.reduce_mean(log_probs, -1), rtol=1e-6)


@pytest.mark.parametrize("pad_id", [0, None])
@pytest.mark.exact
def test_both_paths_agree_with_and_without_padding_in_the_mean(pad_id):
    with fast_path(False):
        stock = kt.losses.smoothed_cross_entropy(LABELS, tf.constant(LOGITS), 0.1, pad_id)
    with fast_path(True):
        fast = kt.losses.smoothed_cross_entropy(LABELS, tf.constant(LOGITS), 0.1, pad_id)
    np.testing.assert_allclose(fast, stock, rtol=1e-5)


def test_a_model_that_never_predicts_padding_is_not_charged_for_it(path):
    """An imported OPUS-MT model's padding row is out of the softmax (an output bias of
    -1e4): its loss is the one of the same logits without that row, as transformers'
    loss over Marian's own ids is."""
    excluded = LOGITS.copy()
    excluded[..., 0] = -1e4
    loss = kt.losses.LabelSmoothedCrossEntropy()
    # The other 10 ids alone: smoothing spread over all of them.
    others = LOGITS[..., 1:].astype("float64")
    log_p = others - np.log(np.exp(others).sum(-1, keepdims=True))
    mask = LABELS != 0
    nll = -np.take_along_axis(log_p, np.maximum(LABELS - 1, 0)[..., None], -1)[..., 0]
    per_token = 0.9 * nll + 0.1 * -log_p.mean(-1)
    without_the_row = per_token[mask].sum() / mask.sum()
    np.testing.assert_allclose(float(loss(LABELS, excluded)), without_the_row, rtol=1e-5)


def test_config_round_trip():
    loss = kt.losses.LabelSmoothedCrossEntropy(label_smoothing=0.2, pad_id=3, name="x")
    revived = keras.losses.deserialize(keras.losses.serialize(loss))
    assert revived.get_config() == loss.get_config()


def test_bad_smoothing():
    with pytest.raises(ValueError, match="label_smoothing=1.0"):
        kt.losses.LabelSmoothedCrossEntropy(label_smoothing=1.0)


# -- Global-batch reduction under MirroredStrategy ----------------------------------------------

VOCAB = 13
# Replica 0 gets the first two rows (1 real token each), replica 1 the last two (6 each): the
# per-replica means weigh these tokens very differently from the global mean.
TOKENS = np.array(
    [[3, 0, 0, 0, 0, 0], [5, 0, 0, 0, 0, 0], [1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]], "int32"
)


def _token_model():
    tokens = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(VOCAB, 8)(tokens)
    return keras.Model(tokens, keras.layers.Dense(VOCAB)(hidden))


class _PerReplicaMean(keras.losses.Loss):
    """The naive alternative: each replica averages over its own tokens."""

    def call(self, y_true, y_pred):
        y_true = keras.ops.cast(y_true, "int32")
        nll = keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)
        mask = keras.ops.cast(y_true != 0, "float32")
        return nll * mask / keras.ops.sum(mask) * keras.ops.cast(keras.ops.size(mask), "float32")


def _one_step(strategy, weights, loss):
    with strategy.scope():
        model = _token_model()
        model.set_weights(weights)
        model.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss)
    # Labels = inputs: replica 0 has 2 real labels, replica 1 has 12.
    model.fit(TOKENS, TOKENS, batch_size=4, epochs=1, shuffle=False, verbose=0)
    return [w.numpy() for w in model.weights]


def test_mirrored_update_equals_the_single_device_update(mirrored):
    import tensorflow as tf

    initial = [w.numpy() for w in _token_model().weights]
    single = tf.distribute.get_strategy()
    loss = kt.losses.LabelSmoothedCrossEntropy
    expected = _one_step(single, initial, loss())
    for got, want in zip(_one_step(mirrored, initial, loss()), expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)
    # The check is sensitive: per-replica means move the weights elsewhere.
    naive = _one_step(mirrored, initial, _PerReplicaMean())
    naive_single = _one_step(single, initial, _PerReplicaMean())
    assert max(np.abs(a - b).max() for a, b in zip(naive, naive_single, strict=True)) > 1e-3

"""Label-smoothed cross-entropy over real target tokens (paper 5.4)."""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.config import PAD_ID


def global_sum(value):
    """Sums a per-replica value over all replicas in sync (identity with one replica).

    Losses normalised by a token count need the count of the whole global batch: under
    `MirroredStrategy` or `MultiWorkerMirroredStrategy` each replica sees only its share.
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce(tf.distribute.ReduceOp.SUM, value)


def _smoothed_cross_entropy(labels, logits, label_smoothing):
    """Per-token `(1 - eps) * -log p(y) + eps * mean_v(-log p(v))`, with a hand-written
    gradient that never reads the logits.

    Automatic differentiation of the same expression builds the gradient from three
    `[..., vocab]` terms (the log-normalizer's softmax, a scatter for the label, the mean's
    broadcast), each a buffer the size of the logits. Written out,
    `softmax(logits) - (1 - eps) * onehot(y) - eps / vocab` is one elementwise pass, and it
    is taken over `exp(logits - max)`, which the forward pass writes out anyway (XLA's CPU
    backend sums it in a separate kernel): with the logits dead after the forward pass, XLA
    computes the exponentials in the logits' buffer and the gradient in theirs, so the
    vocabulary-sized memory of the loss is one buffer, not two. For the paper's base model
    on 4,096 target tokens and 37,000 pieces (600 MB of logits) see BENCHMARKS.md.

    Everything is computed on `[tokens, vocab]`, the shape of the output projection's
    matrix product: a reshape between two elementwise passes would keep XLA from writing
    one in place of the other.

    Args:
        labels: int32 `[...]`. logits: float32 `[..., vocab]`. label_smoothing: float eps.

    Returns:
        float32 `[...]`, one loss a position.
    """
    eps = label_smoothing
    vocab = tf.shape(logits)[-1]
    rows = tf.reshape(logits, [-1, vocab])  # (tokens, vocab)
    row_labels = tf.reshape(labels, [-1])  # (tokens,)

    @tf.custom_gradient
    def per_token(rows):
        label_logits = tf.gather(rows, row_labels[:, None], batch_dims=1)[:, 0]
        # The label's logit is in the row, so this is the row maximum; taking it here puts
        # the gather before the exponentials, which may then overwrite the logits.
        peak = tf.maximum(tf.reduce_max(rows, axis=-1), label_logits)
        peak = tf.where(tf.math.is_finite(peak), peak, 0.0)  # as tf.reduce_logsumexp
        exponentials = tf.exp(rows - peak[:, None])  # (tokens, vocab)
        total = tf.reduce_sum(exponentials, axis=-1)
        log_normalizer = peak + tf.math.log(total)
        nll = log_normalizer - label_logits  # -log p(y)
        uniform = log_normalizer - tf.reduce_mean(rows, axis=-1)  # mean_v -log p(v)

        def grad(upstream):
            is_label = tf.range(vocab) == row_labels[:, None]
            target = tf.where(is_label, 1.0 - eps, 0.0) + eps / tf.cast(vocab, tf.float32)
            probs = exponentials * (1.0 / total)[:, None]
            return upstream[:, None] * (probs - target)

        return (1.0 - eps) * nll + eps * uniform, grad

    return tf.reshape(per_token(rows), tf.shape(labels))


@keras.saving.register_keras_serializable(package="keras_transformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Cross-entropy against smoothed targets, averaged over the non-padding tokens.

    The target distribution puts 1 - eps on the reference token and eps spread uniformly
    over the vocabulary (paper 5.4, eps_ls = 0.1; Szegedy et al., 2016):

        loss = (1 - eps) * -log p(y) + eps * mean_v(-log p(v)),

    computed from logits in float32 without materialising one-hot targets. Positions whose
    label is `pad_id` count for nothing.

    The mean is over the tokens of the *global* batch: with several replicas in sync each one
    divides its sum by the all-reduced token count, and Keras sums the replicas' gradients, so
    the update equals the single-device one whatever the split. `sample_weight` (per sequence
    or per token) scales each token's term.

    Args:
        label_smoothing: float. eps in [0, 1). Defaults to 0.1.
        pad_id: int. Label id to ignore. Defaults to 0.
        name: str. Defaults to "label_smoothed_cross_entropy".

    Call arguments:
        y_true: int `[batch, tgt_len]` target ids (the decoder input shifted left).
        y_pred: logits `[batch, tgt_len, vocab]`.
        sample_weight: optional `[batch]` or `[batch, tgt_len]` weights.

    Returns:
        A scalar: the mean loss per real target token.

    Example:
    >>> import numpy as np
    >>> loss = LabelSmoothedCrossEntropy(label_smoothing=0.0)
    >>> float(loss(np.array([[1, 0]]), np.zeros((1, 2, 4), "float32")))  # -log(1/4)
    1.3862943649291992
    """

    def __init__(
        self,
        label_smoothing: float = 0.1,
        pad_id: int = PAD_ID,
        name: str = "label_smoothed_cross_entropy",
    ):
        if not 0 <= label_smoothing < 1:
            raise ValueError(f"label_smoothing={label_smoothing} must be in [0, 1)")
        # "sum": call() already divides by the global token count.
        super().__init__(name=name, reduction="sum", dtype="float32")
        self.label_smoothing = label_smoothing
        self.pad_id = pad_id

    def __call__(self, y_true, y_pred, sample_weight=None):
        if sample_weight is not None and len(ops.shape(sample_weight)) == 1:
            sample_weight = ops.expand_dims(sample_weight, -1)  # one weight per sequence
        return super().__call__(y_true, y_pred, sample_weight=sample_weight)

    def call(self, y_true, y_pred):
        labels = ops.cast(y_true, "int32")  # Loss.__call__ hands labels over as float32
        logits = ops.cast(y_pred, "float32")  # (batch, tgt_len, vocab)
        losses = _smoothed_cross_entropy(labels, logits, self.label_smoothing)
        mask = ops.cast(ops.not_equal(labels, self.pad_id), "float32")
        tokens = ops.maximum(global_sum(ops.sum(mask)), 1.0)
        return losses * mask / tokens

    def get_config(self):
        return {"label_smoothing": self.label_smoothing, "pad_id": self.pad_id, "name": self.name}

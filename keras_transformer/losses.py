"""Label-smoothed cross-entropy over real target tokens (paper 5.4)."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer import _backends as backends
from keras_transformer import fast
from keras_transformer.config import PAD_ID

# The key of `x` under which `kt.data.accumulation_groups` hands the Transformer's training
# step the token count that normalises a batch's loss under gradient accumulation.
TOKEN_NORMALIZER = "token_normalizer"


def global_sum(value):
    """Sums a per-replica value over all replicas in sync (identity with one replica).

    Losses normalised by a token count need the count of the whole global batch: under
    `MirroredStrategy` or `MultiWorkerMirroredStrategy` each replica sees only its share.
    (Under JAX's `keras.distribution`, one program sees the global batch: the value is
    already global; `keras_transformer._backends`.)
    """
    return backends.global_sum(value)


def smoothed_cross_entropy(labels, logits, label_smoothing: float, pad_id: int | None = PAD_ID):
    """Per-token `(1 - eps) * -log p(y) + eps * mean_v(-log p(v))` (paper 5.4), the mean
    over every id but `pad_id`.

    Padding is never a target, so the smoothing mass goes to the ids that can be (as in The
    Annotated Transformer and OpenNMT): a model that never predicts padding, such as an
    imported OPUS-MT one (whose padding row the import takes out of the softmax), is not
    charged for it.

    Args:
        labels: int32 `[...]`. logits: float32 `[..., vocab]`. label_smoothing: float eps.
        pad_id: int or None. The id left out of the mean; None spreads it over every id.
            Defaults to 0.

    Returns:
        float32 `[...]`, one loss a position.
    """
    if fast.is_enabled():
        return fast.smoothed_cross_entropy(labels, logits, label_smoothing, pad_id)
    log_probs = ops.log_softmax(logits, axis=-1)  # (..., vocab)
    nll = -ops.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
    total, count = ops.sum(log_probs, axis=-1), ops.cast(ops.shape(logits)[-1], "float32")
    if pad_id is not None:
        total, count = total - log_probs[..., pad_id], count - 1.0
    return (1.0 - label_smoothing) * nll + label_smoothing * (-total / count)


@keras.saving.register_keras_serializable(package="keras_transformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Cross-entropy against smoothed targets, averaged over the non-padding tokens.

    The target distribution puts 1 - eps on the reference token and eps spread uniformly
    over the vocabulary but padding, which is never a target (paper 5.4, eps_ls = 0.1;
    Szegedy et al., 2016; `smoothed_cross_entropy`):

        loss = (1 - eps) * -log p(y) + eps * mean_{v != pad}(-log p(v)),

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

    Examples:
        >>> import numpy as np
        >>> from keras_transformer.losses import LabelSmoothedCrossEntropy
        >>> loss = LabelSmoothedCrossEntropy(label_smoothing=0.0)
        >>> labels = np.array([[1, 0]])  # one real token, then padding
        >>> round(float(loss(labels, np.zeros((1, 2, 4), "float32"))), 4)  # -log(1/4)
        1.3863
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
        losses = smoothed_cross_entropy(labels, logits, self.label_smoothing, self.pad_id)
        mask = ops.cast(ops.not_equal(labels, self.pad_id), "float32")
        tokens = ops.maximum(global_sum(ops.sum(mask)), 1.0)
        return losses * mask / tokens

    def get_config(self):
        return {"label_smoothing": self.label_smoothing, "pad_id": self.pad_id, "name": self.name}


__all__ = ["LabelSmoothedCrossEntropy", "smoothed_cross_entropy"]

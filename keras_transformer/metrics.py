"""Token-level metrics that ignore padding: accuracy and perplexity.

Both keep running sums in variables that Keras aggregates with SUM across replicas, so the
figures are those of the global batch under `MirroredStrategy`.
"""

from __future__ import annotations

import keras
import keras_hub
from keras import ops

from keras_transformer.config import PAD_ID


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedAccuracy(keras.metrics.SparseCategoricalAccuracy):
    """Share of non-padding target tokens whose arg-max prediction is the label.

    Args:
        pad_id: int. Label id to ignore. Defaults to 0.
        name: str. Defaults to "masked_accuracy".
        dtype: dtype of the running sums. Defaults to None (float32).

    Example:
    >>> import numpy as np
    >>> metric = MaskedAccuracy()
    >>> metric.update_state(np.array([[1, 2, 0]]), np.eye(3)[None, [1, 0, 0]])
    >>> float(metric.result())  # 1 of the 2 real tokens; the padding is not counted
    0.5
    """

    def __init__(self, pad_id: int = PAD_ID, name: str = "masked_accuracy", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.pad_id = pad_id

    def update_state(self, y_true, y_pred, sample_weight=None):
        mask = ops.cast(ops.not_equal(y_true, self.pad_id), self.dtype)
        if sample_weight is not None:
            mask = mask * ops.cast(sample_weight, self.dtype)
        return super().update_state(y_true, y_pred, sample_weight=mask)

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}


@keras.saving.register_keras_serializable(package="keras_transformer")
class Perplexity(keras_hub.metrics.Perplexity):
    """exp(mean negative log-likelihood) of the non-padding target tokens.

    keras-hub's `Perplexity` with this project's defaults: logits in, padding id 0 ignored.
    The likelihood is that of the model, not the label-smoothed training target.

    Args:
        from_logits: bool. Defaults to True.
        mask_token_id: int. Label id to ignore. Defaults to 0.
        name: str. Defaults to "perplexity".
        **kwargs: other `keras_hub.metrics.Perplexity` arguments.

    Example:
    >>> import numpy as np
    >>> metric = Perplexity()
    >>> metric.update_state(np.array([[1, 0]]), np.zeros((1, 2, 4), "float32"))
    >>> round(float(metric.result()), 4)  # uniform over 4 tokens
    4.0
    """

    def __init__(
        self,
        from_logits: bool = True,
        mask_token_id: int = PAD_ID,
        name: str = "perplexity",
        **kwargs,
    ):
        super().__init__(from_logits=from_logits, mask_token_id=mask_token_id, name=name, **kwargs)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TokenCount(keras.metrics.Sum):
    """The number of non-padding target tokens seen since the last reset (a global count
    under distribution strategies). Training loops divide it by time for tokens per second.

    Args:
        pad_id: int. Label id that is not counted. Defaults to 0.
        name: str. Defaults to "tokens".
        dtype: dtype of the count. Defaults to None (float32).

    Example:
    >>> import numpy as np
    >>> metric = TokenCount()
    >>> metric.update_state(np.array([[5, 6, 0]]), np.zeros((1, 3, 9)))
    >>> float(metric.result())
    2.0
    """

    def __init__(self, pad_id: int = PAD_ID, name: str = "tokens", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.pad_id = pad_id

    def update_state(self, y_true, y_pred, sample_weight=None):
        return super().update_state(ops.cast(ops.not_equal(y_true, self.pad_id), self.dtype))

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}

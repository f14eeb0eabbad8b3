"""Token-level metrics that ignore padding: accuracy and perplexity.

Both keep running sums in variables that Keras aggregates with SUM across replicas, so the
figures are those of the global batch under `MirroredStrategy`.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.config import PAD_ID


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedAccuracy(keras.metrics.SparseCategoricalAccuracy):
    """Share of non-padding target tokens whose arg-max prediction is the label.

    Args:
        pad_id: int. Label id to ignore. Defaults to 0.
        name: str. Defaults to "masked_accuracy".
        dtype: dtype of the running sums. Defaults to None (float32).

    Examples:
        >>> import numpy as np
        >>> from keras_transformer.metrics import MaskedAccuracy
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
class Perplexity(keras.metrics.Metric):
    """exp(mean negative log-likelihood) of the non-padding target tokens.

    The sums and configuration of keras-hub's `Perplexity`, with this project's defaults
    (logits in, padding id 0 ignored), written here so that the metrics need no keras-hub: a
    saved model that lists it loads once `keras_transformer` is imported. The likelihood is
    that of the model, not the label-smoothed training target.

    Args:
        from_logits: bool. Whether `y_pred` holds logits rather than probabilities. Defaults
            to True.
        mask_token_id: int or None. Label id to ignore; None counts every label. Defaults
            to 0.
        dtype: a float dtype for the running sums. Defaults to "float32".
        name: str. Defaults to "perplexity".

    Examples:
        >>> import numpy as np
        >>> from keras_transformer.metrics import Perplexity
        >>> metric = Perplexity()
        >>> metric.update_state(np.array([[1, 0]]), np.zeros((1, 2, 4), "float32"))
        >>> round(float(metric.result()), 4)  # uniform over 4 tokens
        4.0
    """

    def __init__(
        self,
        from_logits: bool = True,
        mask_token_id: int | None = PAD_ID,
        dtype="float32",
        name: str = "perplexity",
    ):
        super().__init__(name=name, dtype=dtype)
        if "float" not in self.dtype:
            raise ValueError(f"dtype={dtype!r} must be a floating-point type")
        self.from_logits = from_logits
        self.mask_token_id = mask_token_id
        self._crossentropy = keras.losses.SparseCategoricalCrossentropy(
            from_logits=from_logits, reduction="sum"
        )
        # keras-hub's variable names, so that the state of a model saved with it loads.
        self._aggregate_crossentropy = self.add_variable(
            shape=(), initializer="zeros", dtype=self.dtype, name="aggregate_crossentropy"
        )
        self._number_of_samples = self.add_variable(
            shape=(), initializer="zeros", dtype=self.dtype, name="number_of_samples"
        )

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, self.dtype)
        y_pred = ops.cast(y_pred, self.dtype)
        if sample_weight is not None:
            sample_weight = ops.cast(sample_weight, self.dtype)
        if self.mask_token_id is not None:
            mask = ops.cast(ops.not_equal(y_true, self.mask_token_id), self.dtype)
            sample_weight = mask if sample_weight is None else mask * sample_weight
        nll_sum = ops.cast(
            self._crossentropy(y_true, y_pred, sample_weight=sample_weight), self.dtype
        )
        if sample_weight is None:
            tokens = ops.cast(ops.size(y_true), self.dtype)
        else:
            tokens = ops.sum(sample_weight)
        self._aggregate_crossentropy.assign_add(nll_sum)
        self._number_of_samples.assign_add(tokens)

    def result(self):
        count = ops.convert_to_tensor(self._number_of_samples)
        return ops.where(ops.equal(count, 0), 0.0, ops.exp(self._aggregate_crossentropy / count))

    def reset_state(self):
        self._aggregate_crossentropy.assign(0.0)
        self._number_of_samples.assign(0.0)

    def get_config(self):
        return {
            **super().get_config(),
            "from_logits": self.from_logits,
            "mask_token_id": self.mask_token_id,
        }


@keras.saving.register_keras_serializable(package="keras_transformer")
class TokenCount(keras.metrics.Sum):
    """The number of non-padding target tokens seen since the last reset (a global count
    under distribution strategies). Training loops divide it by time for tokens per second.

    Args:
        pad_id: int. Label id that is not counted. Defaults to 0.
        name: str. Defaults to "tokens".
        dtype: dtype of the count. Defaults to None (float32).

    Examples:
        >>> import numpy as np
        >>> from keras_transformer.metrics import TokenCount
        >>> metric = TokenCount()
        >>> metric.update_state(np.array([[5, 6, 0]]), np.zeros((1, 3, 9)))
        >>> float(metric.result())  # the real target tokens: padding is not counted
        2.0
    """

    def __init__(self, pad_id: int = PAD_ID, name: str = "tokens", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.pad_id = pad_id

    def update_state(self, y_true, y_pred, sample_weight=None):
        return super().update_state(ops.cast(ops.not_equal(y_true, self.pad_id), self.dtype))

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}


__all__ = ["MaskedAccuracy", "Perplexity", "TokenCount"]

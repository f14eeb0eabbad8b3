"""Workarounds for Keras defects that this package's model meets; each names its upstream
issue and goes when Keras fixes it. Nothing else in the package touches Keras's internals.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops


class MultiWorkerFit:
    """Mixed into `Transformer` so that `model.fit` works under `MultiWorkerMirroredStrategy`.

    Keras's TensorFlow trainer, under a distribution strategy, takes the first batch of the
    input and averages it across replicas with `strategy.reduce("MEAN", batch)` to learn the
    input shapes (`_maybe_symbolic_build`). With two or more workers that reduction fails
    for any batch that is a structure rather than one tensor, `(inputs, labels)` included:
    "Attempt to convert a value (...PerReplica...) to a Tensor" (keras-team/keras#20329,
    open). This model's inputs and labels are always int32 `[batch, len]`, so the shapes
    are known without a batch: the loss, metrics and optimizer are built from them. This is
    the one private Keras method the package overrides; it goes when #20329 is fixed.
    """

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if self._distribute_strategy is None:
            return  # built when the train/test function is traced, as Keras does
        if data_batch is None:
            ids = keras.KerasTensor((None, None), "int32")
            data_batch = ({"source_ids": ids, "target_ids": ids}, ids)
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=data_batch)


def reducible_logs(strategy, logs: dict) -> dict:
    """A train/test step's logs in a form Keras can average across workers.

    Under `MultiWorkerMirroredStrategy`, Keras averages each step's logs across workers with
    `reduce("MEAN", value, axis=0)`, which fails on scalars (keras-team/keras#20585). Given
    rank-1 values it reduces them to the cross-worker mean scalar. Other strategies get the
    logs unchanged.
    """
    if not _multi_worker(strategy):
        return logs
    return {name: ops.reshape(value, [1]) for name, value in logs.items()}


def _multi_worker(strategy) -> bool:
    """Whether `strategy` is a MultiWorkerMirroredStrategy over more than one worker."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return False
    cluster = strategy.cluster_resolver.cluster_spec().as_dict()
    return sum(len(tasks) for tasks in cluster.values()) > 1

"""Dropout whose masks differ across replicas and workers (paper 5.4's residual dropout)."""

from __future__ import annotations

import keras

from keras_transformer import _backends as backends
from keras_transformer import fast


@keras.saving.register_keras_serializable(package="keras_transformer")
class PerReplicaDropout(keras.layers.Dropout):
    """`keras.layers.Dropout` (same arguments, config and seed generator), with each replica
    drawing its own masks.

    Under `tf.distribute` (MirroredStrategy, MultiWorkerMirroredStrategy), Keras's seed
    generator is a variable that every replica holds in the same state, and every worker
    seeds it the same way: all replicas would drop the same positions of their batches,
    which is the same mask repeated, not independent dropout. Here the replica's id in the
    sync group (global across workers) is folded into the seed, so replica r draws from its
    own stream, the same one in every run with the same seed. (Under JAX's
    `keras.distribution.DataParallel`, one program draws the mask of the global batch, whose
    shards on the devices differ already: Keras's dropout as it is.) With one replica, the
    layer is Keras's dropout exactly; with the speed switch on (`kt.fast`), the draws are its 16-bit
    ones (`kt.fast.dropout`).

    Its arguments (`rate`, `noise_shape`, `seed` and the layer's own) are
    `keras.layers.Dropout`'s. It was named `Dropout`, as Keras's layer: that name still works
    for one release, with a `DeprecationWarning`, and files saved under it load.

    Examples:
        >>> import keras
        >>> import numpy as np
        >>> from keras_transformer.layers import PerReplicaDropout
        >>> drop = PerReplicaDropout(0.5, seed=1)
        >>> y = keras.ops.convert_to_numpy(drop(np.ones((4, 1000), "float32"), training=True))
        >>> sorted(set(y.ravel().tolist()))  # dropped, or kept and scaled by 1 / (1 - 0.5)
        [0.0, 2.0]
    """

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        replica = backends.replica_id()
        if replica is None and (not fast.is_enabled() or self.noise_shape is not None):
            return super().call(inputs, training=training)
        import tensorflow as tf  # only under tf.distribute or kt.fast: TensorFlow's

        seed = self.seed_generator.next()
        if replica is not None:
            seed = tf.random.experimental.stateless_fold_in(seed, replica)
        # Seeds of stateless ops must be int32 under XLA: reduce as Keras's TF dropout does.
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), "int32")
        if fast.is_enabled() and self.noise_shape is None:
            return fast.dropout(inputs, self.rate, seed)
        noise_shape = self.noise_shape and self._noise_shape_for(inputs)
        return tf.nn.experimental.stateless_dropout(
            inputs, rate=self.rate, noise_shape=noise_shape, seed=seed
        )

    def _noise_shape_for(self, inputs):
        """`noise_shape` with its None entries taken from `inputs` (as Keras does)."""
        shape = keras.ops.shape(inputs)
        return [shape[i] if size is None else size for i, size in enumerate(self.noise_shape)]


def __getattr__(name: str):
    # PEP 562: the layer's name before its rename, for one release (layers/_renamed.py).
    if name == "Dropout":
        from keras_transformer.layers import _renamed

        return _renamed.deprecated(__name__, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["PerReplicaDropout"]

"""Workarounds for Keras and TensorFlow defects that this package meets; each names its upstream
issue (or the evidence, where none was found) and goes when the defect is fixed. Nothing else in
the package touches Keras's internals.
"""

from __future__ import annotations

import functools
import hashlib

import keras
import numpy as np
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


def without_autotune_thread(options):
    """`options` with tf.data's autotuning off, so an iterator is destroyed at once.

    With autotuning on, each iterator runs a model thread that sleeps between optimization
    rounds (`Model::OptimizeLoop`), for a period that doubles up to 60 s. Destroying the
    iterator waits for that thread, and in TensorFlow 2.21 the wait sometimes lasts the
    thread's whole sleep: in about one `model.fit` of three on the demo, `fit` returned 40 to
    50 s after its last step and dev evaluation (gdb: the main thread in
    `RootDataset::Iterator::~Iterator` -> `UnboundedThreadPool::LogicalThreadWrapper`
    destructor, the model thread in `OptimizeLoop`'s timed wait). No upstream issue found.
    `AUTOTUNE` parallelism and prefetching then take TensorFlow's static defaults; the
    training pipeline delivered as many batches a second without autotuning as with it
    (1,500 demo batches: 5.4 to 6.2 s against 6.2 to 6.6 s).
    """
    options.autotune.enabled = False
    return options


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
    import tensorflow as tf

    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return False
    cluster = strategy.cluster_resolver.cluster_spec().as_dict()
    return sum(len(tasks) for tasks in cluster.values()) > 1


def sublayers(layer: keras.layers.Layer) -> list[keras.layers.Layer]:
    """Every layer inside `layer`, at any depth, `layer` excluded.

    Keras has no public walk over a layer's sublayers (a `keras.Model` has `layers`, its top
    level only); the docstring of `keras.dtype_policies.DTypePolicyMap` does this walk with
    `_flatten_layers` to record quantized sublayers, as `layers.quantization` does. Goes when
    Keras has a public one.
    """
    return list(layer._flatten_layers(include_self=False))


def keep_sentencepiece_model(tokenizer, proto: bytes) -> None:
    """Gives `tokenizer` a SentencePiece model that reseeding TensorFlow does not destroy.

    tensorflow-text's `SentencepieceTokenizer` holds its model in a resource owned by the
    kernel of the op that made it (its source: "TODO(b/318839908): Switch to using a
    ref-counted resource instead of this kernel-owned resource"), and that kernel lives in the
    eager kernel cache, which `tf.random.set_seed` (so `keras.utils.set_random_seed`) clears:
    the resource goes with it, and the tokenizer's next in-graph use (`tf.data`,
    `tf.function`) fails with "Resource localhost/_0_SentencepieceOp/... does not exist"
    (tensorflow/text#570, closed without a fix). The same op given a `shared_name` puts the
    model in the resource manager instead, where clearing the cache leaves it. The name is the
    model's sha256: tokenizers of one model share one read-only resource, so a process holds
    one copy of each model it has used. Goes when tensorflow-text's resource is ref-counted.

    Args:
        tokenizer: a keras-hub `SentencePieceTokenizer` or a tensorflow-text
            `SentencepieceTokenizer`, made from `proto`.
        proto: bytes. The serialized SentencePiece model.
    """
    segmenter = getattr(tokenizer, "_sentence_piece", tokenizer)  # keras-hub's holds one
    segmenter._model_resource = _shared_sentencepiece_model_class()(proto)


@functools.cache
def _shared_sentencepiece_model_class():
    """The resource class of `keep_sentencepiece_model`, made on first use (TensorFlow's)."""
    import tensorflow as tf

    class SharedSentencepieceModel(tf.saved_model.experimental.TrackableResource):
        """tensorflow-text's SentencePiece model resource, under a `shared_name` (see
        `keep_sentencepiece_model`); a SavedModel makes it again the same way."""

        def __init__(self, proto: bytes):
            super().__init__()
            self._proto = proto
            digest = hashlib.sha256(proto).hexdigest()
            self._shared_name = f"keras_transformer_sentencepiece_{digest}"
            _ = self.resource_handle  # made now, as tensorflow-text does

        def _create_resource(self):
            from tensorflow_text.python.ops.sentencepiece_tokenizer import (
                gen_sentencepiece_tokenizer,
            )

            return gen_sentencepiece_tokenizer.sentencepiece_op(
                model=self._proto, shared_name=self._shared_name
            )

    return SharedSentencepieceModel


class ReversibleEmbedding(keras.layers.ReversibleEmbedding):
    """Keras's `ReversibleEmbedding`, whose reverse (logits) product is one 2-D product and
    whose tables are written to weight files with one copy of each in memory instead of two.

    The logits of `x [batch, len, d_model]` are taken as `x [batch * len, d_model] @ E^T`
    and reshaped back: the same product. Keras takes them as one 3-D `matmul`, whose
    gradient for the table under JAX is one `dot_general` contracting two axes (batch and
    length); XLA's CPU compiler (jaxlib 0.10.2) lays that product out by first copying the
    logits' gradient, vocabulary-sized, into a transposed `[vocab, batch * len]` array, a
    strided copy, the largest single op in a profile of JAX's training step on the CPU. With one
    contracting axis it takes the transposed operand as is, as it does the gradient of
    TensorFlow's `MatMul`. The dependence of XLA:CPU's speed on a `dot_general`'s form is
    jax-ml/jax#19327 (open); this goes when the 3-D product's gradient compiles without the
    copy. Shapes not known when traced (TensorFlow's unknown batch) and quantized tables
    (Keras's own `quantized_call`) keep Keras's product.

    Keras's weight stores take each variable as `np.array(variable)`: the variable's
    `__array__` makes a NumPy copy, and `np.array` copies that again, so saving NLLB-200's
    1 GB table (256,206 pieces by 1,024) needs 2 GB at once, more than any other weight.
    Here the store gets `_RowBlocks`, which fills one new array from slices of the table;
    NumPy takes it as is (NumPy 2 asks `__array__` for a copy and does not copy again).
    Quantized or LoRA tables keep Keras's own writing. No upstream issue found (Keras
    3.15: `saving_lib.H5IOStore.__setitem__` calls `backend.convert_to_numpy`, which is
    `np.array`); goes when Keras writes a variable without the extra copy.
    """

    def call(self, inputs, reverse=False):
        leading = tuple(inputs.shape[:-1])  # (batch, len)
        if not reverse or len(leading) < 2 or None in leading:
            return super().call(inputs, reverse=reverse)
        rows = ops.reshape(inputs, (-1, inputs.shape[-1]))  # (batch * len, d_model)
        return ops.reshape(super().call(rows, reverse=True), (*leading, -1))

    def quantize(self, mode=None, type_check=True, config=None):
        # Keras refuses its subclasses here (they may compute otherwise); this one computes
        # as Keras's layer does and only writes its tables otherwise.
        super().quantize(mode, type_check=False, config=config)

    def save_own_variables(self, store):
        if not self.built or self.quantization_mode is not None or self.lora_enabled:
            super().save_own_variables(store)
            return
        for index, name in enumerate(self.variable_serialization_spec[None]):
            store[str(index)] = _RowBlocks(getattr(self, name))


class _RowBlocks:
    """A 2-D variable's value as NumPy, copied a block of rows at a time (`ROWS`: 16 MB of
    NLLB-200's table) into one new array when NumPy asks for it."""

    ROWS = 4096

    def __init__(self, variable):
        self.variable = variable

    def __array__(self, dtype=None, copy=None):
        value, rows = self.variable.value, int(self.variable.shape[0])
        first = ops.convert_to_numpy(value[: self.ROWS])  # its dtype: bfloat16 included
        array = np.empty((rows, *first.shape[1:]), first.dtype)
        array[: len(first)] = first
        for start in range(self.ROWS, rows, self.ROWS):
            array[start : start + self.ROWS] = ops.convert_to_numpy(
                value[start : start + self.ROWS]
            )
        return array if dtype is None else array.astype(dtype, copy=False)

"""Ragged rows joined end to end without TensorFlow's ragged concatenation.

`tf.concat([a, b], axis=1)` on ragged tensors transposes their int64 row splits, and the first
int64 `Transpose` in a graph makes TensorFlow's oneDNN build log, once a process and whatever
the CPU, "E ... util.cc:131] oneDNN supports DT_INT64 only on platforms with AVX-512. Falling
back to the default Eigen-based implementation": an ERROR line on every translation command,
which reads like a fault. `concat_rows` gives the same tensor with a stable sort instead.
"""

from __future__ import annotations

from keras_transformer._backends import require_tensorflow_package

require_tensorflow_package("kt.ragged")

import tensorflow as tf


def concat_rows(first: tf.RaggedTensor, second: tf.RaggedTensor) -> tf.RaggedTensor:
    """Row i of `first` followed by row i of `second`: `tf.concat([first, second], axis=1)`
    for two ragged `[rows, (len)]` tensors of the same dtype and number of rows.

    Examples:
        >>> import tensorflow as tf
        >>> from keras_transformer._ragged import concat_rows
        >>> a = tf.ragged.constant([[1, 2], [3], []])
        >>> b = tf.ragged.constant([[9], [], [8, 7]])
        >>> concat_rows(a, b).to_list()
        [[1, 2, 9], [3], [8, 7]]
    """
    # Each value's key: its row, first's before second's; the stable sort keeps their order.
    keys = tf.concat([first.value_rowids() * 2, second.value_rowids() * 2 + 1], 0)
    order = tf.argsort(keys, stable=True)
    values = tf.gather(tf.concat([first.values, second.values], 0), order)
    return tf.RaggedTensor.from_row_lengths(values, first.row_lengths() + second.row_lengths())

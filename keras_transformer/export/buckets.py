"""How the SavedModel's `serving_xla` signature batches a request for XLA: sorted by length
and decoded in chunks (`decode_sorted_in_chunks`), each padded to a shape bucket
(`pad_to_bucket`), so that a server compiles few programs and short sentences do not wait
for the longest.
"""

from __future__ import annotations

import tensorflow as tf

# Batch sizes the XLA signature pads a request to (larger batches: to a multiple of the last).
BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
# Decoder rows (sentences x beam) one compiled call decodes at most: the XLA signature sorts
# a request by length and decodes it in chunks of this many rows (BENCHMARKS.md).
CHUNK_ROWS = 32


def pad_to_bucket(source_ids, batch_buckets, max_length: int):
    """Source ids `[batch, width]` padded to a shape bucket: the batch to the first of
    `batch_buckets` that holds it (or a multiple of the last), the width to a multiple of 16
    (at most `max_length`).

    XLA compiles one program per input shape: buckets bound the programs a server compiles.
    Padding rows repeat the last sentence, so they finish with it (a row of padding would
    decode up to its length limit and hold up the batch); an empty batch is padded with rows
    of zeros. Padding columns are zeros, which every attention masks.
    """
    batch, width = tf.shape(source_ids)[0], tf.shape(source_ids)[1]
    batches, largest = tf.constant(batch_buckets), batch_buckets[-1]
    beyond = (tf.maximum(batch, 1) + largest - 1) // largest * largest
    batch_bucket = tf.reduce_min(
        tf.concat([tf.boolean_mask(batches, batches >= batch), [beyond]], 0)
    )
    width_bucket = tf.minimum((width + 15) // 16 * 16, max_length)
    rows = tf.minimum(tf.range(batch_bucket), tf.maximum(batch - 1, 0))
    with_zeros = tf.concat([source_ids, tf.zeros([1, width], source_ids.dtype)], 0)
    padded = tf.gather(with_zeros, rows)  # (batch_bucket, width)
    return tf.pad(padded, [[0, 0], [0, width_bucket - width]])


def decode_sorted_in_chunks(search, source_ids, chunk: int, out_len):
    """`search` run on a request's sentences sorted by length, `chunk` sentences a call.

    A batch decodes until its longest sentence ends, so in a request of mixed lengths most
    rows would wait, step after step, for the longest one. Sorted and cut into chunks (each
    chunk cut to its own width), short sentences finish together and long ones together;
    CTranslate2 sorts and splits a batch the same way (its `max_batch_size`). The chunks are
    iterations of a `tf.while_loop` that depend on each other only where their results are
    written, so TensorFlow runs two or more at once (`parallel_iterations`): a small model's
    search keeps about one core busy, and the other decodes the next chunk. (On the demo
    model that overlap is the whole gain: one chunk at a time, the sorted chunks were as
    fast as the whole request; BENCHMARKS.md.)

    Args:
        search: `source_ids [n, width] -> (ids int32 [n, <= out_len], score float32 [n])`.
        source_ids: int32 `[batch, width]`, 0-padded at the end.
        chunk: int. Sentences a call.
        out_len: int32 scalar. The width of the returned ids.

    Returns:
        `(ids int32 [batch, out_len], score float32 [batch])` in the request's order, ids
        0-padded on the right.
    """
    batch = tf.shape(source_ids)[0]
    lengths = tf.math.count_nonzero(source_ids, axis=1, dtype=tf.int32)  # (batch,)
    order = tf.argsort(lengths, stable=True)

    def body(start, ids, score):
        rows = order[start : start + chunk]
        part = tf.gather(source_ids, rows)[:, : tf.reduce_max(tf.gather(lengths, rows))]
        part_ids, part_score = search(part)
        part_ids = tf.pad(part_ids, [[0, 0], [0, out_len - tf.shape(part_ids)[1]]])
        rows = rows[:, None]
        return (
            start + chunk,
            tf.tensor_scatter_nd_update(ids, rows, part_ids),
            tf.tensor_scatter_nd_update(score, rows, part_score),
        )

    empty = (tf.zeros([batch, out_len], tf.int32), tf.zeros([batch], tf.float32))
    _, ids, score = tf.while_loop(lambda start, *_: start < batch, body, (0, *empty))
    return ids, score


__all__ = ["BATCH_BUCKETS", "CHUNK_ROWS", "decode_sorted_in_chunks", "pad_to_bucket"]

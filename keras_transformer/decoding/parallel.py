"""Decoding the slices of a batch side by side, each as its own XLA program."""

from __future__ import annotations

from keras_transformer import _backends as backends


def parallel_search(search, *, shards: int = 2):
    """`search` compiled with XLA and run on `shards` slices of each batch at the same time.

    On a CPU, a decoding step of a few dozen sentences is a chain of about a hundred and fifty
    small XLA operations run one after another; only the matrix products among them are
    split over the cores, so one program leaves cores idle much of the time. Here each
    slice of the batch is decoded by its own XLA program, and TensorFlow's executor runs the
    programs side by side on its inter-op threads, so that one's single-threaded work
    overlaps the other's (BENCHMARKS.md has the figures). Sentences are independent in
    `greedy_search` and `beam_search`, so the results are those of the whole batch, up to
    float rounding; `sample` with a seed draws differently when the batch is cut differently.

    Args:
        search: `search(source_ids) -> (ids [batch, out_len], scores [batch])`, e.g.
            `lambda source_ids: greedy_search(model, source_ids)`. XLA compiles it once for
            each slice shape it meets.
        shards: int >= 1. How many slices to cut a batch into: equal, or the first ones one
            sentence longer (a batch smaller than `shards` leaves some empty). One per CPU
            core is the usual choice; 1 runs the batch whole under XLA. Defaults to 2.

    Returns:
        A `tf.function` `source_ids int32 [batch, src_len] -> (ids, scores)`, rows in the
        order of the input.

    Examples:
        >>> from keras_transformer import TransformerConfig, build_transformer
        >>> from keras_transformer.decoding import greedy_search, parallel_search
        >>> model = build_transformer(TransformerConfig.preset("tiny", vocab_size=20))
        >>> search = parallel_search(lambda s: greedy_search(model, s, max_extra_length=3))
        >>> ids, scores = search([[5, 6, 7, 0], [8, 9, 0, 0], [4, 0, 0, 0], [4, 5, 0, 0]])
        >>> tuple(ids.shape), tuple(scores.shape)  # two slices of 2 sentences, one program
        ((4, 7), (4,))
    """
    backends.require_tensorflow("kt.decoding.parallel_search")
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ValueError(f"shards={shards!r} must be an integer >= 1")
    import tensorflow as tf

    compiled = tf.function(search, jit_compile=True, autograph=False)

    @tf.function(
        input_signature=[tf.TensorSpec([None, None], tf.int32, "source_ids")], autograph=False
    )
    def run(source_ids):
        if shards == 1:
            return compiled(source_ids)
        batch = tf.shape(source_ids)[0]
        sizes = tf.stack([(batch + shards - 1 - i) // shards for i in range(shards)])
        # Independent calls: the executor runs them concurrently, each on its own thread.
        results = [compiled(part) for part in tf.split(source_ids, sizes, num=shards)]
        return tuple(tf.concat(parts, axis=0) for parts in zip(*results, strict=True))

    return run


__all__ = ["parallel_search"]

"""The `tf.data` input pipeline: text pairs in, padded id batches out.

    (source, target) strings -> shard -> shuffle -> repeat -> tokenize (in graph, batched)
    -> add EOS / BOS -> drop over-long pairs -> bucket by length -> token-sized batches
    -> shuffle batches -> prefetch

Rules that users rely on:
- Source ids are the source tokens followed by EOS. The decoder input is BOS followed by the
  target tokens; the labels are the target tokens followed by EOS.
- Training drops a pair when either side, EOS/BOS included, is longer than `max_length`
  (truncating would teach the model to drop words); `length_report` counts them. Inference
  truncates the source to `max_length - 1` tokens plus EOS.
- Batches hold about `tokens_per_batch` positions (batch size x padded length, the paper's
  "about 25,000 source and 25,000 target tokens"). Each bucket pads to its fixed length, so
  there are only a few distinct shapes and XLA compiles each once.

The functions that `tf.data` traces are marked `plain`: they have no Python control flow for
AutoGraph to convert, and its conversion (parsing and rewriting each function a trace reaches,
keras-hub's tokenizer included) took seconds at each program's start.
"""

from __future__ import annotations

from keras_transformer._backends import require_tensorflow

require_tensorflow("kt.data")

import tensorflow as tf

from keras_transformer import _workarounds as workarounds
from keras_transformer._ragged import concat_rows
from keras_transformer.config import PAD_ID
from keras_transformer.losses import TOKEN_NORMALIZER
from keras_transformer.text import BOS_ID, EOS_ID

plain = tf.autograph.experimental.do_not_convert

# Padded lengths of the buckets; the ones above max_length are dropped and max_length added.
BUCKET_LENGTHS = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
_TOKENIZE_BATCH = 1024


def bucket_lengths(max_length: int) -> list[int]:
    """The padded lengths of the buckets for sequences of at most `max_length` tokens."""
    return sorted({length for length in BUCKET_LENGTHS if length < max_length} | {max_length})


def bucket_batch_sizes(tokens_per_batch: int, max_length: int, multiple: int = 1) -> list[int]:
    """Examples per batch in each bucket: as many as fit in `tokens_per_batch` positions,
    rounded down to a multiple of `multiple` (the number of replicas) and at least that."""
    if tokens_per_batch < max_length:
        raise ValueError(
            f"tokens_per_batch={tokens_per_batch} cannot hold one sequence of "
            f"max_length={max_length}"
        )
    return [
        max(multiple, tokens_per_batch // length // multiple * multiple)
        for length in bucket_lengths(max_length)
    ]


def _ordered(pairs: tf.data.Dataset, shard, shuffle_buffer: int, seed, repeat: bool):
    """This worker's shard of the pairs, then shuffled and repeated as asked."""
    if shard is not None:
        pairs = pairs.shard(*shard)
    if shuffle_buffer:
        pairs = pairs.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    return pairs.repeat() if repeat else pairs


def _examples(pairs: tf.data.Dataset, vocabularies, max_length: int) -> tf.data.Dataset:
    """(source, target) strings -> (source + EOS, BOS + target, target + EOS) ids, ragged per
    example; a pair longer than `max_length` on either side (EOS/BOS included) dropped."""

    @plain
    def tokenize(sources, targets):
        return vocabularies.source.tokenize(sources), vocabularies.target.tokenize(targets)

    tokens = pairs.batch(_TOKENIZE_BATCH).map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)
    return (
        tokens.unbatch()
        .filter(_fits(max_length))
        .map(_with_specials, num_parallel_calls=tf.data.AUTOTUNE)
    )


@plain
def _with_specials(source, target):
    """Source + EOS; decoder input BOS + target; labels target + EOS."""
    eos, bos = tf.constant([EOS_ID]), tf.constant([BOS_ID])
    return (
        tf.concat([source, eos], 0),
        tf.concat([bos, target], 0),
        tf.concat([target, eos], 0),
    )


def _fits(max_length):
    @plain
    def fits(source, target):
        return tf.logical_and(tf.size(source) + 1 <= max_length, tf.size(target) + 1 <= max_length)

    return fits


def make_dataset(
    pairs: tf.data.Dataset,
    vocabularies,
    *,
    max_length: int,
    tokens_per_batch: int,
    training: bool = True,
    batch_multiple: int = 1,
    shuffle_buffer: int | None = None,
    seed: int | None = None,
    deterministic: bool = True,
    repeat: bool | None = None,
    drop_remainder: bool | None = None,
    shard: tuple[int, int] | None = None,
) -> tf.data.Dataset:
    """Token-batched, bucketed batches from a dataset of (source, target) strings.

    `training` picks the defaults of `shuffle_buffer`, `repeat` and `drop_remainder`: a
    training set is shuffled, cycles forever and drops each bucket's last partial batch; a
    dev or test set (`training=False`) comes once, in a fixed order, with every pair that
    fits `max_length` (over-long pairs are dropped in both). An argument given explicitly
    wins over its default.

    Args:
        pairs: `tf.data.Dataset` of (source, target) scalar strings.
        vocabularies: `keras_transformer.text.Vocabularies`.
        max_length: int. Longest sequence kept, EOS/BOS included.
        tokens_per_batch: int. Padded positions per batch (batch size x length).
        training: bool. Training defaults (True) or evaluation defaults (False) for the
            three arguments below it that are left None. Defaults to True.
        batch_multiple: int. Batch sizes are multiples of this (the replicas in sync).
            Defaults to 1.
        shuffle_buffer: int or None. Pairs in the shuffle buffer; 0 disables shuffling.
            Defaults to None: 100000 when training, else 0.
        seed: int or None. Shuffle seed. Defaults to None.
        deterministic: bool. Same batches in the same order on every run with the same seed,
            so a resumed run can skip exactly what was consumed; False lets parallel steps
            deliver out of order (a little faster). Defaults to True.
        repeat: bool or None. Cycle forever (reshuffled each pass). Defaults to None:
            `training`.
        drop_remainder: bool or None. Drop each bucket's last partial batch, so every batch
            of a bucket has one static shape (training); False keeps every pair (evaluation).
            Defaults to None: `training`.
        shard: (num_shards, index) or None. Keep every num_shards-th pair starting at index,
            before any other work: one shard per worker. Defaults to None.

    Returns:
        A dataset of `({"source_ids": [batch, len], "target_ids": [batch, len]}, labels
        [batch, len])`, int32, 0-padded, where len is the bucket length.

    Examples:
        >>> import tensorflow as tf
        >>> import keras_transformer as kt
        >>> from keras_transformer.data import make_dataset
        >>> english = ["In the beginning God created the heaven and the earth.", "God is love."]
        >>> spanish = ["En el principio creó Dios los cielos y la tierra.", "Dios es amor."]
        >>> vocabularies = kt.text.Vocabularies.train(english, spanish, 300)
        >>> pairs = tf.data.Dataset.from_tensor_slices((english, spanish))
        >>> dev = make_dataset(pairs, vocabularies, max_length=64, tokens_per_batch=256,
        ...                    training=False)  # every pair once, in a fixed order
        >>> batches = list(dev)
        >>> sum(len(labels) for _, labels in batches)
        2
        >>> inputs, labels = batches[0]
        >>> sorted(inputs), labels.dtype.name
        (['source_ids', 'target_ids'], 'int32')

        A training set (`training=True`, the default) is shuffled and repeats forever:
        `model.fit(make_dataset(pairs, vocabularies, max_length=256, tokens_per_batch=4096,
        seed=0), steps_per_epoch=...)`.
    """
    if shuffle_buffer is None:
        shuffle_buffer = 100_000 if training else 0
    repeat = training if repeat is None else repeat
    drop_remainder = training if drop_remainder is None else drop_remainder
    pairs = _ordered(pairs, shard, shuffle_buffer, seed, repeat)
    examples = _examples(pairs, vocabularies, max_length)
    batches = _bucketed(examples, max_length, tokens_per_batch, batch_multiple, drop_remainder)
    if shuffle_buffer:
        batches = batches.shuffle(64, seed=seed, reshuffle_each_iteration=True)
    batches = batches.map(_as_model_inputs, num_parallel_calls=tf.data.AUTOTUNE)
    options = _options(deterministic, sharded=shard is not None)
    return batches.with_options(options).prefetch(tf.data.AUTOTUNE)


def _bucketed(
    examples: tf.data.Dataset,
    max_length: int,
    tokens_per_batch: int,
    batch_multiple: int,
    drop_remainder: bool,
) -> tf.data.Dataset:
    """Examples grouped by length into batches of about `tokens_per_batch` positions, each
    padded to its bucket's length."""
    return examples.bucket_by_sequence_length(
        element_length_func=plain(
            lambda source, decoder_input, labels: tf.maximum(
                tf.size(source), tf.size(decoder_input)
            )
        ),
        bucket_boundaries=[length + 1 for length in bucket_lengths(max_length)],
        # The last size is for the overflow bucket, which stays empty: pairs were filtered.
        bucket_batch_sizes=bucket_batch_sizes(tokens_per_batch, max_length, batch_multiple)
        + [batch_multiple],
        pad_to_bucket_boundary=True,
        drop_remainder=drop_remainder,
    )


def _options(deterministic: bool, sharded: bool) -> tf.data.Options:
    options = workarounds.without_autotune_thread(tf.data.Options())
    options.deterministic = deterministic
    if sharded:  # already split between workers: tf.distribute must not split again
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options


@plain
def _as_model_inputs(source, decoder_input, labels):
    return {"source_ids": source, "target_ids": decoder_input}, labels


def source_batches(texts, tokenizer, *, max_length: int, batch_size: int = 64) -> tf.data.Dataset:
    """Batches of source ids for decoding, in input order: tokens truncated to
    `max_length - 1`, then EOS, 0-padded to the longest in the batch."""

    @plain
    def encode(text):
        tokens = tokenizer.tokenize(text)[:, : max_length - 1]
        eos = tf.fill([tokens.nrows(), 1], EOS_ID)
        return concat_rows(tokens, tf.RaggedTensor.from_tensor(eos)).to_tensor()

    texts = tf.data.Dataset.from_tensor_slices(tf.constant(list(texts), tf.string))
    return texts.batch(batch_size).map(encode).prefetch(tf.data.AUTOTUNE)


def length_report(pairs: tf.data.Dataset, vocabularies, *, max_length: int) -> dict[str, int]:
    """Counts what `make_dataset` keeps and drops, in one pass over `pairs`.

    Returns:
        `{"pairs", "kept", "too_long", "source_tokens", "target_tokens"}`, token counts over
        the kept pairs, EOS included.
    """
    report = dict(pairs=0, kept=0, too_long=0, source_tokens=0, target_tokens=0)

    @plain
    def lengths(sources, targets):
        return (
            vocabularies.source.tokenize(sources).row_lengths() + 1,
            vocabularies.target.tokenize(targets).row_lengths() + 1,
        )

    batches = pairs.batch(_TOKENIZE_BATCH).map(lengths, num_parallel_calls=tf.data.AUTOTUNE)
    for source_lengths, target_lengths in batches.as_numpy_iterator():
        fits = (source_lengths <= max_length) & (target_lengths <= max_length)
        report["pairs"] += len(fits)
        report["kept"] += int(fits.sum())
        report["source_tokens"] += int(source_lengths[fits].sum())
        report["target_tokens"] += int(target_lengths[fits].sum())
    report["too_long"] = report["pairs"] - report["kept"]
    return report


def accumulation_groups(batches: tf.data.Dataset, steps: int) -> tf.data.Dataset:
    """Batches marked so that an update under gradient accumulation is the mean over all the
    target tokens of its `steps` batches.

    Keras's optimizer with `gradient_accumulation_steps=N` averages the gradients of N
    batches. With a loss that is a mean over each batch's tokens, an update is then a mean of
    N batch means, which gives a token of a batch with few real tokens (much padding) more
    weight than one of a full batch. Here each batch's inputs get, under
    `losses.TOKEN_NORMALIZER`, one share an example that sums over the batch to the mean
    target tokens a batch of its group of N: `Transformer` (compiled with
    `LabelSmoothedCrossEntropy`) divides the batch's token loss sum by it, so that the N
    averaged gradients make the token-weighted mean, as one batch of all the group's tokens
    would. The reported loss stays the mean over tokens.

    Args:
        batches: `(x, labels)` batches as `make_dataset` gives them (labels 0-padded).
        steps: int. N, the optimizer's `gradient_accumulation_steps`; 1 returns `batches`
            unchanged. Groups start at the first batch: skip batches before grouping, and
            an incomplete last group of a finite dataset is dropped.

    Returns:
        A `tf.data.Dataset` of the same batches, with `x[TOKEN_NORMALIZER]` float32 `[batch]`.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r} must be an integer >= 1")
    if steps == 1:
        return batches

    def tokens(labels):
        return tf.reduce_sum(tf.cast(labels != PAD_ID, tf.float32))

    @plain
    def mark(inputs, labels):
        group_tokens = labels.reduce(0.0, plain(lambda total, batch: total + tokens(batch)))

        @plain
        def with_shares(x, y):
            examples = tf.shape(y)[0]
            share = group_tokens / steps / tf.cast(examples, tf.float32)
            return {**x, TOKEN_NORMALIZER: tf.fill([examples], share)}, y

        return tf.data.Dataset.zip(inputs, labels).map(with_shares)

    grouped = batches.window(steps, drop_remainder=True).flat_map(mark)
    return grouped.prefetch(tf.data.AUTOTUNE)


__all__ = [
    "BUCKET_LENGTHS",
    "accumulation_groups",
    "bucket_batch_sizes",
    "bucket_lengths",
    "length_report",
    "make_dataset",
    "source_batches",
]

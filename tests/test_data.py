"""The tf.data pipeline: specials, length rule, buckets and token budgets, determinism,
sharding, inference batches."""

import numpy as np
import pytest

from keras_transformer import data, text
from tests import bible

MAX_LENGTH = 48


@pytest.fixture(scope="module")
def corpus():
    return bible.pairs("train", 1500)


@pytest.fixture
def vocab():
    return bible.vocabularies()


def one_pass(corpus, vocab, **kwargs):
    options = dict(
        max_length=MAX_LENGTH,
        tokens_per_batch=1024,
        shuffle_buffer=0,
        repeat=False,
        drop_remainder=False,
    )
    return list(
        data.make_dataset(corpus.to_dataset(), vocab, **{**options, **kwargs}).as_numpy_iterator()
    )


def test_bucket_lengths_and_batch_sizes():
    assert data.bucket_lengths(48) == [8, 12, 16, 24, 32, 48]
    assert data.bucket_lengths(50) == [8, 12, 16, 24, 32, 48, 50]
    assert data.bucket_batch_sizes(1024, 48, multiple=2) == [128, 84, 64, 42, 32, 20]
    assert data.bucket_batch_sizes(100, 64, multiple=4)[-1] == 4  # at least one a replica
    with pytest.raises(ValueError, match="tokens_per_batch=40 cannot hold one sequence"):
        data.bucket_batch_sizes(40, 48)


def test_every_pair_comes_through_once_with_specials(corpus, vocab):
    report = data.length_report(corpus.to_dataset(), vocab, max_length=MAX_LENGTH)
    targets = []
    for inputs, labels in one_pass(corpus, vocab):
        source, decoder_input = inputs["source_ids"], inputs["target_ids"]
        assert source.shape == decoder_input.shape == labels.shape
        assert source.shape[1] in data.bucket_lengths(MAX_LENGTH)
        assert np.all(decoder_input[:, 0] == text.BOS_ID)
        real = labels != 0
        # labels = decoder input shifted left, ending with EOS at the last real position
        words = (real & (labels != text.EOS_ID))[:, :-1]
        np.testing.assert_array_equal(labels[:, :-1][words], decoder_input[:, 1:][words])
        last = real.sum(1) - 1
        assert np.all(labels[np.arange(len(labels)), last] == text.EOS_ID)
        source_last = (source != 0).sum(1) - 1
        assert np.all(source[np.arange(len(source)), source_last] == text.EOS_ID)
        assert real.sum(1).max() <= MAX_LENGTH and (source != 0).sum(1).max() <= MAX_LENGTH
        targets += text.detokenize(vocab.target, labels)
    # The rule: a pair is kept when both sides fit in MAX_LENGTH tokens, EOS included.
    lengths = [
        (len(vocab.source.tokenize(s)) + 1, len(vocab.target.tokenize(t)) + 1, t)
        for s, t in zip(corpus.sources, corpus.targets, strict=True)
    ]
    kept = [(s, t, target) for s, t, target in lengths if max(s, t) <= MAX_LENGTH]
    assert 0 < len(kept) < len(corpus)  # the slice has pairs of both kinds
    assert report == {
        "pairs": len(corpus),
        "kept": len(kept),
        "too_long": len(corpus) - len(kept),
        "source_tokens": sum(s for s, _, _ in kept),
        "target_tokens": sum(t for _, t, _ in kept),
    }
    assert sorted(targets) == sorted(target for _, _, target in kept)


def test_a_dev_set_comes_once_in_order_with_its_last_partial_batches(vocab):
    """`training=False` (a dev set): no shuffling, no repeat, no partial batch dropped; the
    one rule left is training's length limit."""
    dev = bible.pairs("dev", 300)

    def dev_pass():
        batches = data.make_dataset(
            dev.to_dataset(), vocab, max_length=MAX_LENGTH, tokens_per_batch=1024, training=False
        )
        return [labels for _, labels in batches.take(1000).as_numpy_iterator()]  # or cycles

    first, second = dev_pass(), dev_pass()
    targets = [t for labels in first for t in text.detokenize(vocab.target, labels)]
    fits = [
        max(len(vocab.source.tokenize(s)), len(vocab.target.tokenize(t))) + 1 <= MAX_LENGTH
        for s, t in zip(dev.sources, dev.targets, strict=True)
    ]
    kept = [t for t, fit in zip(dev.targets, fits, strict=True) if fit]
    assert 0 < len(kept) <= len(dev)
    assert sorted(targets) == sorted(kept)  # each kept pair exactly once
    assert len(first) == len(second)  # and in the same order every pass
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)


def test_batches_respect_the_token_budget_and_replica_multiple(corpus, vocab):
    batches = data.make_dataset(
        corpus.to_dataset(),
        vocab,
        max_length=MAX_LENGTH,
        tokens_per_batch=1024,
        batch_multiple=2,
        seed=0,
    )
    for _, labels in batches.take(40).as_numpy_iterator():
        batch, length = labels.shape
        assert batch * length <= 1024 and batch % 2 == 0
        assert (
            batch
            == data.bucket_batch_sizes(1024, MAX_LENGTH, 2)[
                data.bucket_lengths(MAX_LENGTH).index(length)
            ]
        )


def test_deterministic_mode_repeats_exactly(corpus, vocab):
    def first_batches(seed):
        batches = data.make_dataset(
            corpus.to_dataset(),
            vocab,
            max_length=MAX_LENGTH,
            tokens_per_batch=1024,
            seed=seed,
            deterministic=True,
        )
        return [labels for _, labels in batches.take(10).as_numpy_iterator()]

    one, two, other = first_batches(7), first_batches(7), first_batches(8)
    for a, b in zip(one, two, strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(
        a.shape != c.shape or not np.array_equal(a, c) for a, c in zip(one, other, strict=True)
    )


def test_batches_run_without_tf_data_autotuning(corpus, vocab):
    """Its model thread can hold up the end of `fit` (keras_transformer._workarounds)."""
    batches = data.make_dataset(
        corpus.to_dataset(), vocab, max_length=MAX_LENGTH, tokens_per_batch=1024
    )
    assert batches.options().autotune.enabled is False
    assert len(list(batches.take(3))) == 3


def test_shards_partition_the_pairs(corpus, vocab):
    def targets(shard):
        return {
            t
            for _, labels in one_pass(corpus, vocab, shard=shard)
            for t in text.detokenize(vocab.target, labels)
        }

    first, second = targets((2, 0)), targets((2, 1))
    assert not first & second
    assert len(first | second) == len(
        {t for _, labels in one_pass(corpus, vocab) for t in text.detokenize(vocab.target, labels)}
    )


def test_source_batches_keep_order_and_truncate(vocab):
    texts = ["God said.", "And the evening and the morning were the third day.", "Amen."]
    first, second = list(data.source_batches(texts, vocab.source, max_length=6, batch_size=2))
    assert first.shape == (2, 6) and second.shape[0] == 1
    long = np.array(vocab.source.tokenize(texts[1]))
    np.testing.assert_array_equal(first.numpy()[1], np.append(long[:5], text.EOS_ID))
    truncated = text.detokenize(vocab.source, long[None, :5])[0]
    assert texts[1].startswith(truncated) and len(truncated) < len(texts[1])
    assert text.detokenize(vocab.source, first.numpy()) == [texts[0], truncated]
    assert text.detokenize(vocab.source, second.numpy()) == ["Amen."]

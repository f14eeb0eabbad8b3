"""The tie rule's replay (tests/ties.py) is our beam search: `ties.replay_beam`, with each
of the search's finish rules, stoppings and rankings, returns `kt.decoding.beam_search`'s
n-best and scores on the sentences where it meets no choice within `ties.SCORE_TOLERANCE`
(one engine, ours: its float32 sums and the replay's float64 ones), so a difference the rule
allows is one our own search could make too."""

import itertools

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.decoding import FINISH_RULES, RANKINGS, STOPPING, beam_search
from tests import ties
from tests.reversal import BOS

# Held-out symbols followed by unknown tokens (tests/test_decoding.py's UNFAMILIAR_SOURCE):
# the reversal model's hypotheses there are close, its beams reordered, EOS ranked low.
# With random sequences of 10 symbols beside them the rules part: "early" and "exact" give
# other 3-bests than "k_finished" on about half, "tensor2tensor" or "gnmt" another best on
# some (tests/test_decoding.py's k_finished test).
CLOSE = np.concatenate(
    [
        np.concatenate(
            [np.random.default_rng(5).integers(4, 20, (8, 6)), np.ones((8, 4), "int64")], axis=1
        ),
        np.random.default_rng(9).integers(4, 20, (8, 10)),
    ]
)
RANDOM = np.array([[5, 6, 7, 8, 0, 0], [9, 10, 11, 12, 13, 14], [4, 0, 0, 0, 0, 0]])
SEARCH = dict(beam_size=3, length_penalty=1.0, max_extra_length=4)
N_BEST = 3


@pytest.fixture(scope="module")
def random_model():
    """A seeded random model over 20 tokens: EOS often among a step's 2k best, so the finish
    rules part; near-uniform, so hypotheses also run into the length limit."""
    keras.utils.set_random_seed(0)
    return kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=20))


def next_logits(model, sentence, memo):
    """`ties.replay_beam`'s model: the logits after each prefix, by teacher forcing the
    whole prefix (memoised: the settings share most prefixes)."""

    def call(prefixes):
        missing = [p for p in prefixes if (sentence.tobytes(), tuple(p)) not in memo]
        if missing:
            logits = model(
                {
                    "source_ids": np.tile(sentence, [len(missing), 1]),
                    "target_ids": np.array(missing),
                }
            )
            for prefix, row in zip(missing, np.asarray(logits)[:, -1], strict=True):
                memo[sentence.tobytes(), tuple(prefix)] = row
        return np.stack([memo[sentence.tobytes(), tuple(p)] for p in prefixes])

    return call


@pytest.mark.exact
@pytest.mark.parametrize(
    "finish_rule, stopping, ranking", list(itertools.product(FINISH_RULES, STOPPING, RANKINGS))
)
def test_the_replay_is_our_beam_search(
    reversal_model, random_model, finish_rule, stopping, ranking
):
    """The replay's n-best ids and scores are beam search's on the trained reversal model's
    close sentences and a seeded random model's, but where the replay meets a choice within
    SCORE_TOLERANCE (counted: most sentences have none)."""
    rules = dict(finish_rule=finish_rule, stopping=stopping, ranking=ranking)
    compared = skipped = 0
    for model, source in ((reversal_model, CLOSE), (random_model, RANDOM)):
        memo = {}
        ids, scores = beam_search(model, source, num_hypotheses=N_BEST, **SEARCH, **rules)
        for sentence, row, row_scores in zip(source, ids.numpy(), scores.numpy(), strict=True):
            limit = min(
                int((sentence != 0).sum()) + SEARCH["max_extra_length"], model.config.max_length
            )
            replay = ties.replay_beam(
                next_logits(model, sentence, memo),
                beam_size=SEARCH["beam_size"],
                length_penalty=SEARCH["length_penalty"],
                limit=limit,
                n_best=N_BEST,
                **rules,
            )
            if replay.smallest_margin < ties.SCORE_TOLERANCE:
                skipped += 1
                continue
            compared += 1
            for rank, (hypothesis, score) in enumerate(zip(row, row_scores, strict=True)):
                if rank >= len(replay.finished):  # fewer than n finished
                    assert score < -1e8, (sentence, rank)
                    continue
                expected_score, expected_ids = replay.finished[rank]
                end = list(hypothesis).index(ties.EOS_ID)
                assert hypothesis[:end].tolist() == list(expected_ids), (sentence, rank)
                np.testing.assert_allclose(score, expected_score, atol=ties.SCORE_TOLERANCE)
    assert compared >= 6, (compared, skipped)
    assert BOS == ties.BOS_ID

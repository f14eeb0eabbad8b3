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
from tests import bible, ties
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


class ScriptedModel:
    """A model whose logits after a prefix depend on its last token and the source's first
    (`TABLE`): after BOS, tokens 4 and 5 are 5e-5 apart (a tie within SCORE_TOLERANCE) where
    the source starts with 7, 0.5 apart otherwise, 6 far below; after any other token, EOS."""

    config = kt.TransformerConfig.preset("tiny", vocab_size=8, max_length=10)
    TABLE = np.tile(-5.0 - np.arange(8, dtype="float32"), (8, 1))  # apart: no other tie
    TABLE[ties.BOS_ID, [4, 5, 6]] = [2.0, 1.5, 0.0]
    TABLE[4:, ties.EOS_ID] = 3.0

    def __call__(self, inputs, training=False):
        target = np.asarray(inputs["target_ids"])
        logits = self.TABLE[target]
        at_a_tie = (np.asarray(inputs["source_ids"])[:, :1] == 7) & (target == ties.BOS_ID)
        logits[..., 5] = np.where(at_a_tie, 2.0 - 5e-5, logits[..., 5])
        return logits


def test_rows_parted_at_ties_lets_two_searches_part_only_at_a_tie():
    """`ties.rows_parted_at_ties` lists the rows whose outputs differ at a choice within
    SCORE_TOLERANCE (greedy: two tokens' logits; beam: the replay's n-best order), and
    fails on one that differs elsewhere; `search_settings` and `tokenized_back` give it
    the settings' replay and a text's ids."""
    model, source = ScriptedModel(), np.array([[7, 3, 0], [6, 7, 3]])  # a tie in row 0
    alike = np.array([[4, 3, 0], [4, 3, 0]])
    assert ties.rows_parted_at_ties(model, source, alike, alike.copy()) == []
    tied = np.array([[5, 3, 0], [4, 3, 0]])  # row 0 takes the other token of its tie
    assert ties.rows_parted_at_ties(model, source, alike, tied) == [0]
    beam = kt.decoding.DecodingSettings(beam_size=2, max_extra_length=3)
    assert ties.rows_parted_at_ties(model, source, alike, tied, beam) == [0]
    assert ties.rows_parted_at_ties(model, source, alike, tied, (beam, beam.replace(n_best=2))) == [
        0
    ]
    for settings in (None, beam, (None, beam)):
        for other in ([[4, 3], [5, 3]], [[4, 3], [6, 3]]):  # row 1 has no tie
            with pytest.raises(AssertionError, match="row 1 .* not at a choice within"):
                ties.rows_parted_at_ties(model, source, alike, other, settings)
    assert ties.search_settings(beam, source[1], max_length=4, prefix=[5]) == {
        "beam_size": 2,
        "length_penalty": 0.6,
        "limit": 4,  # 3 tokens + 3 extra, cut to max_length
        "n_best": 1,
        "finish_rule": "tensor2tensor",
        "stopping": "early",
        "ranking": "gnmt",
        "prefix": [5],
    }
    assert ties.search_settings(beam.replace(beam_size=1), source[1], max_length=4) is None
    target = bible.vocabularies().target
    amen = list(target.tokenize(["Amen."])[0])
    assert ties.tokenized_back(target, "Amen.").tolist() == [*amen, ties.EOS_ID]
    assert ties.tokenized_back(target, ["Amen.", ""], prefix=[9]).tolist() == [
        [9, *amen, ties.EOS_ID],
        [9, ties.EOS_ID] + [0] * len(amen),
    ]

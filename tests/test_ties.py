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


def test_a_ranking_may_trade_places_only_within_the_tolerance():
    """`ties.ranked_but_at_ties`: the n best in order, or neighbours within the tolerance
    swapped; never a wider swap, a better hypothesis left out, or one twice."""
    scores = np.array([-1.0, -2.0, -1.00005, -3.0, -2.5])
    tolerance = ties.SCORE_TOLERANCE
    assert ties.ranked_but_at_ties(scores, [0, 2, 1])
    assert ties.ranked_but_at_ties(scores, [2, 0, 1])  # 5e-5 apart: either order
    assert not ties.ranked_but_at_ties(scores, [0, 1, 2])  # -2 above -1.00005
    assert not ties.ranked_but_at_ties(scores, [0, 1])  # -1.00005 left out
    assert not ties.ranked_but_at_ties(scores, [0, 0, 2])
    assert ties.ranked_but_at_ties(scores, [0, 2, 1, 4, 3])
    assert not ties.ranked_but_at_ties(scores + [0, 0, 0, 0, -3 * tolerance], [0, 2, 1, 3, 4])
    assert ties.ranked_but_at_ties([-1.0, -1.0 - tolerance / 2], [1])


def _uniform(draw, rows, row):
    """The uniform of `row` that `draw` (a seeded sampler of `rows` rows) uses, by bisection
    with the probes (p, 1 - p): token 0 where u < p."""
    low, high = 0.0, 1.0
    for _ in range(40):
        middle = (low + high) / 2
        probe = np.full((rows, 20), -np.inf, "float32")
        probe[:, :2] = np.log([middle, 1 - middle])
        if int(np.asarray(draw(probe))[row]) == 0:
            high = middle
        else:
            low = middle
    return (low + high) / 2


def test_a_seeded_draw_parts_only_where_its_uniform_is_at_a_boundary():
    """`ties.draws_part_at_a_boundary` on TensorFlow's seeded sampler (the searches'): one
    uniform per row whatever the distribution, the token whose interval of cumulative
    probabilities (vocabulary order) holds it; two distributions whose boundary lies within
    the tolerance of it may draw either side, and none farther."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    tolerance = ties.SCORE_TOLERANCE
    for seed in range(4):

        def draw(logits, seed=seed):
            return tf.random.stateless_categorical(logits, 1, [seed, 7], tf.int32)[:, 0]

        for row in range(3):
            u = _uniform(draw, 3, row)
            for _ in range(3):  # the sampler is the inverse of the cumulative probabilities
                logits = rng.normal(size=(3, 20)).astype("float32")
                cdf = np.cumsum(np.exp(logits[row].astype("float64")))
                expected = int(np.searchsorted(cdf / cdf[-1], u, side="right"))
                assert int(np.asarray(draw(logits))[row]) == expected
            for shift, parts in (
                (tolerance / 2, True),
                (-tolerance / 2, True),
                (3 * tolerance, False),
            ):
                boundary = min(max(u + shift, 1e-6), 1 - 1e-6)
                log_probs = np.full(20, -np.inf)
                log_probs[:2] = np.log([boundary, 1 - boundary])
                assert ties.draws_part_at_a_boundary(draw, log_probs, 3, row, 0, 1) is parts
            assert ties.draws_part_at_a_boundary(draw, log_probs, 3, row, 1, 1)


def test_the_replay_is_generate_s_beam_search():
    """`ties.replay_beam` with generate's rules (padding the only token never chosen, any
    token at the length limit: `tests.language_models.replay_settings`) over
    `ties.prompted`'s logits returns `kt.decoding.generate`'s beam n-best on the seeded
    language model, but where it meets a choice within SCORE_TOLERANCE (9 of 9 compared
    when written)."""
    from keras_transformer.decoding import generate
    from tests.language_models import PROMPTS, language_model, replay_settings

    model = language_model()
    compared = 0
    for settings in (
        {"beam_size": 3, "length_penalty": 0.0},
        {"beam_size": 3, "num_hypotheses": 2, "stopping": "early"},
        {"beam_size": 2, "finish_rule": "fairseq", "stopping": "exact"},
    ):
        settings = {"method": "beam", "max_new_tokens": 6, **settings}
        ids, scores = generate(model, PROMPTS, **settings)
        for prompt, row, row_scores in zip(
            PROMPTS, np.asarray(ids), np.asarray(scores), strict=True
        ):
            search = replay_settings(prompt, **settings)
            replay = ties.replay_beam(ties.prompted(model, prompt), **search)
            if replay.smallest_margin < ties.SCORE_TOLERANCE:
                continue
            compared += 1
            best = replay.finished[: search["n_best"]]
            expected = [
                list(ids_) + [ties.EOS_ID] * (len(ids_) < search["limit"]) for _, ids_ in best
            ]
            assert ties.output_ids(row) == expected, (prompt, row, best)
            np.testing.assert_allclose(np.ravel(row_scores), [s for s, _ in best], atol=1e-4)
    assert compared >= 6, compared

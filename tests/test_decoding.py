"""Greedy search, beam search and sampling: cached = uncached, beam 1 = greedy = top-k 1,
scores, EOS and padding, length limits, batch independence, beam search's two finish rules
and two stopping rules, graph mode and XLA, the `kt.fast` path, mixed precision, and the
trained reversal model decoding reversed sequences. The cache itself: tests/test_cache.py.

Most tests run on the session's `reversal_model` (tests/conftest.py, one layer each side),
whose distributions are peaked as a trained model's are; some on a random tiny model (two
layers each side), whose near-uniform ones rarely produce EOS, so it runs into the length
limits.

The `exact` tests hold ids between two computations (cache or none, batch, graph, XLA,
`kt.fast`, parallel slices, one loop, a NumPy reference) and scores to 1e-4 (1e-5 or 1e-6
where the computations are closer). Two computations' last bits are each CPU's own, and so
are the weights of the reversal model, trained in the session: a sentence may part only at
a choice within `ties.SCORE_TOLERANCE` (`_alike_but_at_ties`; an exhaustive ranking:
`_assert_exhaustive_ranking`; a seeded draw: at a boundary of the cumulative probabilities,
`_draws_alike_but_at_boundaries`), and each test counts the sentences alike, with a floor
(tests/README.md).
"""

import itertools

import keras
import numpy as np
import pytest
import sacrebleu
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.decoding import (
    EOS_ID,
    FINISH_RULES,
    STOPPING,
    beam_search,
    greedy_search,
    loop,
    parallel_search,
    sample,
)
from keras_transformer.decoding.loop import NEG_INF
from keras_transformer.decoding.settings import DEFAULT
from keras_transformer.fast import switched as fast_path
from tests import ties
from tests.deprecation import warns
from tests.reversal import BOS, EOS, held_out_data
from tests.test_keras_tools import quantize

HELD_OUT_SOURCE, HELD_OUT_TARGET = held_out_data()
SOURCE = HELD_OUT_SOURCE[:8]  # (8, 10): lengths 4..10, 0-padded
RANDOM_SOURCE = np.array([[5, 6, 7, 8, 0, 0], [9, 10, 11, 12, 13, 14], [4, 0, 0, 0, 0, 0]])
# Held-out symbols followed by unknown tokens (id 1), which the reversal model never saw: its
# hypotheses are close and change ranks, so beams get reordered and EOS ranks low.
UNFAMILIAR_SOURCE = np.concatenate(
    [np.random.default_rng(5).integers(4, 20, (8, 6)), np.ones((8, 4), "int64")], axis=1
)
SEARCHES = {"greedy": greedy_search, "beam": beam_search}
SHORT = {"max_extra_length": 5}  # keeps the random model's long outputs short


@pytest.fixture(scope="module")
def random_model():
    keras.utils.set_random_seed(0)
    return kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=20))


@pytest.fixture(scope="module")
def large_vocab_model():
    """A random tiny model over 4,000 pieces, one layer each side: close scores over a large
    vocabulary (the searches' handling of several layers: `random_model`'s tests)."""
    keras.utils.set_random_seed(0)
    config = kt.TransformerConfig.preset(
        "tiny", vocab_size=4000, num_encoder_layers=1, num_decoder_layers=1
    )
    return kt.build_transformer(config)


LARGE_VOCAB_SOURCE = np.random.default_rng(0).integers(4, 4000, (4, 6))


@pytest.fixture(params=["reversal", "unfamiliar", "random"])
def model_and_source(request):
    if request.param == "random":
        return request.getfixturevalue("random_model"), RANDOM_SOURCE
    source = SOURCE if request.param == "reversal" else UNFAMILIAR_SOURCE
    return request.getfixturevalue("reversal_model"), source


def _lengths(ids):
    """Number of tokens in each row, EOS included."""
    return (np.asarray(ids) != 0).sum(axis=1)


def _source_lengths(source):
    return (np.asarray(source) != 0).sum(axis=1)


def _lp(length, alpha=0.6):
    return ((5 + length) / 6) ** alpha


def _log_prob(model, source, ids):
    """log P(ids | source) by teacher forcing through the full model, `[batch]`."""
    ids = np.asarray(ids)
    target = np.concatenate([np.full((len(ids), 1), BOS), ids[:, :-1]], axis=1)
    logits = model({"source_ids": np.asarray(source), "target_ids": target}, training=False)
    log_probs = tf.gather(tf.nn.log_softmax(logits), ids, batch_dims=2)  # (batch, len)
    return np.where(ids != 0, log_probs, 0.0).sum(axis=1)


_DECODED = {}


def decoded(search, model, source, **settings):
    """`search(model, source, **settings)`, run eagerly once a module: the searches are
    deterministic, and tests check different properties of the same decodes (a test that
    compares the eager decode with another computation still runs that other one itself)."""
    source = np.asarray(source)
    key = (search, model, source.tobytes(), source.shape, tuple(sorted(settings.items())))
    if key not in _DECODED:
        _DECODED[key] = search(model, source, **settings)
    return _DECODED[key]


def _replay_settings(model, sentence, search, **settings):
    """`ties.replay_beam`'s settings for `SEARCHES[search](model, [sentence], **settings)`
    (beam search's defaults where `settings` names none; `target_prefix` one prefix for every
    row), or None for greedy search."""
    if search == "greedy":
        return None
    rules = ("beam_size", "length_penalty", "finish_rule", "stopping", "ranking")
    replay = {name: settings.get(name, getattr(DEFAULT, name)) for name in rules}
    extra = settings.get("max_extra_length", DEFAULT.max_extra_length)
    limit = min(_source_lengths([sentence])[0] + extra, model.config.max_length)
    prefix = [int(t) for t in np.ravel(settings.get("target_prefix", []))]
    return {**replay, "limit": int(limit), "n_best": 1, "prefix": prefix}


def _alike_but_at_ties(
    model, source, search, ids, other_ids, scores, other_scores, *, atol=1e-4, **settings
):
    """Two computations of our search of `source` (`SEARCHES[search]` with `settings`): each
    sentence's ids equal and its scores within `atol`, but a sentence where the two part at
    a choice within `ties.SCORE_TOLERANCE` (`ties.ours_part_at_a_tie`: which choices are that
    close depends on the weights, and a trained model's are each CPU's own). Returns how
    many sentences were compared alike."""
    alike = 0
    for sentence, a, b, score, other in zip(
        np.asarray(source),
        np.asarray(ids),
        np.asarray(other_ids),
        np.asarray(scores),
        np.asarray(other_scores),
        strict=True,
    ):
        if ties.output_ids(a) == ties.output_ids(b):
            np.testing.assert_allclose(score, other, atol=atol)
            alike += 1
            continue
        next_logits = ties.teacher_forced(model, sentence)
        replay = _replay_settings(model, sentence, search, **settings)
        assert ties.ours_part_at_a_tie(next_logits, a, b, replay), (sentence, a, b)
    return alike


def _assert_well_formed(ids, scores, batch):
    """int32 ids `[batch, len]`: tokens, one EOS, then only padding; float32 finite scores."""
    assert ids.dtype == tf.int32 and scores.dtype == tf.float32
    assert ids.shape[0] == batch and scores.shape == (batch,)
    assert np.isfinite(scores).all()
    for row in np.asarray(ids):
        assert (row == EOS_ID).sum() == 1, row
        end = list(row).index(EOS_ID)
        assert (row[:end] != 0).all() and (row[end + 1 :] == 0).all(), row


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.exact
def test_cached_and_uncached_decoding_agree(model_and_source, search):
    model, source = model_and_source
    ids, scores = decoded(SEARCHES[search], model, source, max_extra_length=5)
    ids_full, scores_full = SEARCHES[search](model, source, max_extra_length=5, use_cache=False)
    assert ids.shape == ids_full.shape
    alike = _alike_but_at_ties(
        model, source, search, ids, ids_full, scores, scores_full, max_extra_length=5
    )
    assert alike > len(source) // 2, alike  # all when written: 8, 8 and 3 sentences


@pytest.mark.exact
def test_scores_are_the_log_probabilities_of_the_ids(model_and_source):
    model, source = model_and_source
    ids, scores = decoded(greedy_search, model, source, max_extra_length=5)
    np.testing.assert_allclose(scores, _log_prob(model, source, ids), atol=1e-4)
    # Beam search's, under both finish rules: test_both_finish_rules_... below.


@pytest.mark.exact
def test_greedy_takes_the_most_likely_token_at_each_step(large_vocab_model):
    """Against the full model's teacher-forced argmax over 4,000 pieces, eagerly and under
    XLA: each step's token is the argmax, or a token whose logit is within
    `ties.SCORE_TOLERANCE` of it (the search's logits and the full pass's differ in their
    last bits, which may order two that close either way); all but one sentence the argmax
    at every step."""
    model, source = large_vocab_model, LARGE_VOCAB_SOURCE
    xla = tf.function(lambda s: greedy_search(model, s, max_extra_length=4), jit_compile=True)
    for ids, _ in (greedy_search(model, source, max_extra_length=4), xla(source)):
        ids = np.asarray(ids)
        target = np.concatenate([np.full((len(ids), 1), BOS), ids[:, :-1]], axis=1)
        logits = model({"source_ids": source, "target_ids": target}, training=False)
        logits = np.array(logits)
        logits[:, :, [0, BOS]] = -np.inf  # never padding or the start token
        best = np.argmax(logits, axis=-1)
        exact = 0
        for row, expected, row_logits, length in zip(ids, best, logits, _lengths(ids), strict=True):
            # The last token is EOS, forced at the length limit.
            steps = np.arange(length - 1)
            chosen = row_logits[steps, row[steps]]
            assert (chosen >= row_logits[steps].max(axis=-1) - ties.SCORE_TOLERANCE).all(), row
            exact += (row[steps] == expected[steps]).all()
        assert exact >= len(ids) - 1, exact  # all 4 when written


@pytest.mark.exact
def test_beam_size_one_is_greedy_but_for_an_earlier_eos_that_scores_better(model_and_source):
    """One alive hypothesis, extended by its best token, as greedy. But beam search also
    keeps a hypothesis ended by an EOS ranked second (among its 2 x beam candidates), and
    returns it when it scores better than the alive one's continuation: then its row is
    greedy's up to that EOS, with the higher score."""
    model, source = model_and_source
    greedy_ids, greedy_scores = decoded(greedy_search, model, source, max_extra_length=5)
    beam_ids, beam_scores = beam_search(
        model, source, beam_size=1, length_penalty=0.0, max_extra_length=5
    )
    greedy_ids, beam_ids = np.asarray(greedy_ids), np.asarray(beam_ids)
    greedy_scores, beam_scores = np.asarray(greedy_scores), np.asarray(beam_scores)
    assert beam_ids.shape == greedy_ids.shape
    same = (beam_ids == greedy_ids).all(axis=1)
    np.testing.assert_allclose(beam_scores[same], greedy_scores[same], atol=1e-5)
    for row in np.flatnonzero(~same):
        end = _lengths(beam_ids[row : row + 1])[0] - 1  # where beam search's EOS is
        assert end < _lengths(greedy_ids[row : row + 1])[0] - 1
        np.testing.assert_array_equal(beam_ids[row, :end], greedy_ids[row, :end])
        assert beam_ids[row, end] == EOS_ID and greedy_ids[row, end] != EOS_ID
        assert beam_scores[row] > greedy_scores[row]
    np.testing.assert_allclose(beam_scores, _log_prob(model, source, beam_ids), atol=1e-4)


def _every_hypothesis(limit):
    """Every output over the tokens {1, 4} of at most `limit` tokens, EOS included, padded
    to `limit`."""
    return [
        [*prefix, EOS] + [0] * (limit - length)
        for length in range(1, limit + 1)
        for prefix in itertools.product([1, 4], repeat=length - 1)
    ]


def _assert_exhaustive_ranking(ids, scores, hypotheses, all_scores):
    """A beam's n-best `ids` `[n, limit]` (or its best `[limit]`) and `scores` against every
    hypothesis's teacher-forced score: the n best in order, but where two within
    `ties.SCORE_TOLERANCE` trade places (`ties.ranked_but_at_ties`: the beam's float32 sums
    and the full pass's differ in their last bits), each score within 1e-4 of its
    hypothesis's. Returns whether the order is exactly the teacher-forced one."""
    index = {tuple(h): i for i, h in enumerate(hypotheses)}
    rows = [tuple(int(t) for t in r) for r in np.atleast_2d(np.asarray(ids))]
    assert all(r in index for r in rows), rows  # each one of the hypotheses
    ranked = [index[r] for r in rows]
    assert ties.ranked_but_at_ties(all_scores, ranked), (ranked, all_scores)
    np.testing.assert_allclose(np.ravel(scores), all_scores[ranked], atol=1e-4)
    return ranked == np.argsort(-all_scores, kind="stable")[: len(ranked)].tolist()


@pytest.mark.exact
def test_a_beam_holding_every_hypothesis_finds_the_best_one():
    """Vocabulary {pad, 1, BOS, EOS, 4}, at most 4 output tokens: 15 hypotheses (padding and
    the start token are never generated), of which a beam of 36 drops none, so beam search
    must return the argmax of logP / lp (teacher forced), or a hypothesis within
    `ties.SCORE_TOLERANCE` of it (`_assert_exhaustive_ranking`); all but one of the six
    the argmax (all when written)."""
    keras.utils.set_random_seed(0)
    model = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=5))
    source = np.array([[4, 1, 0], [4, 0, 0]])
    exact = 0
    for alpha in (0.0, 0.6, 2.0):
        ids, scores = beam_search(
            model, source, beam_size=36, length_penalty=alpha, max_extra_length=2
        )
        for row, (sentence, limit) in enumerate(zip(source, [4, 3], strict=True)):
            hypotheses = _every_hypothesis(limit)
            candidates = np.tile(sentence, [len(hypotheses), 1])
            all_scores = _log_prob(model, candidates, hypotheses)
            all_scores /= _lp(_lengths(hypotheses), alpha)
            exact += _assert_exhaustive_ranking(
                ids[row, :limit], scores[row], hypotheses, all_scores
            )
    assert exact >= 5, exact


@pytest.mark.exact
def test_n_best_of_a_beam_holding_every_hypothesis_are_the_exact_n_best():
    """The setting above, `num_hypotheses=6`: the six best hypotheses of all 15, in order,
    but where two within `ties.SCORE_TOLERANCE` trade places (`_assert_exhaustive_ranking`);
    one of the two sentences at most not in the exact order (neither when written)."""
    keras.utils.set_random_seed(0)
    model = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=5))
    source = np.array([[4, 1, 0], [4, 0, 0]])
    ids, scores = beam_search(model, source, beam_size=36, max_extra_length=2, num_hypotheses=6)
    assert ids.shape == (2, 6, 5) and scores.shape == (2, 6)
    exact = 0
    for row, (sentence, limit) in enumerate(zip(source, [4, 3], strict=True)):
        hypotheses = _every_hypothesis(limit)
        all_scores = _log_prob(model, np.tile(sentence, [len(hypotheses), 1]), hypotheses)
        all_scores /= _lp(_lengths(hypotheses))
        exact += _assert_exhaustive_ranking(
            ids[row, :, :limit], scores[row], hypotheses, all_scores
        )
    assert exact >= 1, exact


@pytest.mark.exact
def test_length_ranking_of_a_beam_holding_every_hypothesis_gives_the_exact_n_best():
    """The setting above with `ranking="length"`: the six best of all 15 hypotheses by logP /
    |Y| ** alpha, |Y| counting EOS (CTranslate2's and transformers' rank), in order; and the
    two rankings order them differently. Two within `ties.SCORE_TOLERANCE` may trade places
    (`_assert_exhaustive_ranking`); all but one of the twelve n-bests in the exact order
    (all when written)."""
    keras.utils.set_random_seed(0)
    model = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=5))
    source = np.array([[4, 1, 0], [4, 0, 0]])
    orders = {"gnmt": [], "length": []}
    exact = 0
    for alpha, ranking in itertools.product((0.6, 1.0, 2.0), orders):
        ids, scores = beam_search(
            model,
            source,
            beam_size=36,
            length_penalty=alpha,
            max_extra_length=2,
            num_hypotheses=6,
            ranking=ranking,
        )
        for row, (sentence, limit) in enumerate(zip(source, [4, 3], strict=True)):
            hypotheses = _every_hypothesis(limit)
            all_scores = _log_prob(model, np.tile(sentence, [len(hypotheses), 1]), hypotheses)
            lengths = _lengths(hypotheses)
            all_scores /= lengths**alpha if ranking == "length" else _lp(lengths, alpha)
            exact += _assert_exhaustive_ranking(
                ids[row, :, :limit], scores[row], hypotheses, all_scores
            )
            orders[ranking].append(np.argsort(-all_scores, kind="stable")[:6].tolist())
    assert exact >= 11, exact
    assert orders["gnmt"] != orders["length"]


def _reference_k_finished_beam(model, sentence, beam_size, alpha, max_extra_length):
    """CTranslate2's beam search in plain Python, each step's log-probabilities by teacher
    forcing the whole prefix: the 2k best extensions; the k best not ending in EOS stay
    alive; those ending in EOS among the k best finish (fairseq's rule); at the length limit
    only EOS may come; it stops once k have finished, and ranks them by logP / |Y| ** alpha,
    |Y| counting EOS. Returns the finished hypotheses' ids, EOS included, best first."""
    limit = min(int((sentence != 0).sum()) + max_extra_length, model.config.max_length)
    alive, finished = [([], 0.0)], []
    for t in range(limit):
        target = np.array([[BOS, *ids] for ids, _ in alive])
        logits = model({"source_ids": np.tile(sentence, [len(alive), 1]), "target_ids": target})
        log_probs = tf.nn.log_softmax(logits[:, -1]).numpy()  # (alive, vocab)
        log_probs[:, [0, BOS]] = -np.inf  # padding and the start token are never generated
        if t + 1 >= limit:
            log_probs[:, np.arange(log_probs.shape[1]) != EOS] = -np.inf
        candidates = sorted(
            (
                (score + log_probs[a, token], a, token)
                for a, (_, score) in enumerate(alive)
                for token in range(log_probs.shape[1])
            ),
            key=lambda c: -c[0],
        )[: 2 * beam_size]
        finished += [
            (alive[a][0] + [token], s) for s, a, token in candidates[:beam_size] if token == EOS
        ]
        alive = [(alive[a][0] + [token], s) for s, a, token in candidates if token != EOS]
        alive = alive[:beam_size]
        if len(finished) >= beam_size or not alive:
            break
    return [ids for ids, score in sorted(finished, key=lambda h: -h[1] / len(h[0]) ** alpha)]


@pytest.mark.exact
def test_k_finished_stopping_with_length_ranking_is_ctranslate2s_beam_search(reversal_model):
    """`finish_rule="fairseq"`, `stopping="k_finished"`, `ranking="length"`: the k best of
    `_reference_k_finished_beam`, in order, on sentences whose hypotheses are close (where
    "early" and "exact" stopping, which stop elsewhere, give other 3-bests on half of
    them, and "tensor2tensor" finishing or "gnmt" ranking another best on some). One engine
    in two computations (float32 sums in other orders): a sentence's 3-best may differ only
    where the search, replayed (`ties.replay_beam`, these rules), meets a choice within
    SCORE_TOLERANCE; >= 12 of 16 alike (16 when written)."""
    from tests import ties

    source = np.concatenate([UNFAMILIAR_SOURCE, np.random.default_rng(9).integers(4, 20, (8, 10))])
    settings = dict(beam_size=3, length_penalty=1.0, max_extra_length=4)
    rules = dict(finish_rule="fairseq", stopping="k_finished", ranking="length")
    ids, _ = beam_search(reversal_model, source, num_hypotheses=3, **rules, **settings)
    alike = 0
    for row, sentence in enumerate(source):
        expected = _reference_k_finished_beam(
            reversal_model, sentence, settings["beam_size"], 1.0, settings["max_extra_length"]
        )
        got = [
            ids.numpy()[row, rank, : len(hypothesis)].tolist()
            for rank, hypothesis in enumerate(expected[:3])
        ]
        if got == expected[:3]:
            alike += 1
            continue
        replay = ties.replay_beam(
            ties.teacher_forced(reversal_model, sentence),
            beam_size=settings["beam_size"],
            length_penalty=settings["length_penalty"],
            limit=ties.length_limit(
                sentence, settings["max_extra_length"], reversal_model.config.max_length
            ),
            n_best=3,
            **rules,
        )
        assert replay.smallest_margin < ties.SCORE_TOLERANCE, (row, got, expected[:3])
    assert alike >= 12, alike


def test_n_best_starts_with_the_best_and_keeps_beam_size_hypotheses(model_and_source):
    """With exact stopping both searches run until nothing can beat what they return, so the
    n-best's first is the search's best (early stopping stops the 1-best search sooner)."""
    model, source = model_and_source
    exact = {**SHORT, "stopping": "exact"}
    best_ids, best_scores = decoded(beam_search, model, source, **exact)
    ids, scores = beam_search(model, source, num_hypotheses=4, **exact)
    assert ids.shape[:2] == scores.shape == (len(source), 4)
    np.testing.assert_array_equal(ids[:, 0], best_ids)
    np.testing.assert_allclose(scores[:, 0], best_scores, rtol=1e-5)
    assert np.all(np.diff(scores, axis=1) <= 0) and np.all(scores.numpy() > -1e8)
    one_ids, _ = beam_search(model, source, num_hypotheses=1, **exact)
    np.testing.assert_array_equal(one_ids[:, 0], best_ids)


@pytest.mark.parametrize("n", [0, 5, True, 2.0])
def test_num_hypotheses_must_be_within_the_beam(random_model, n):
    with pytest.raises(ValueError, match="num_hypotheses=.* must be None or an integer from 1"):
        beam_search(random_model, RANDOM_SOURCE, beam_size=4, num_hypotheses=n)


@pytest.mark.exact
def test_beam_size_one_with_length_penalty_keeps_the_greedy_tokens(reversal_model):
    """Beam 1 with the default length penalty (0.6) takes greedy's tokens on the reversal
    model, whose EOS never ranks close to the best token before the reversal's end: a
    sentence may part only where the replay of beam 1 meets a choice within
    `ties.SCORE_TOLERANCE` (a tie between the two best tokens, or an earlier EOS scored as
    the alive hypothesis), and most are alike (8 of 8 when written)."""
    greedy_ids, _ = decoded(greedy_search, reversal_model, SOURCE)
    beam_ids, _ = beam_search(reversal_model, SOURCE, beam_size=1)
    assert beam_ids.shape == greedy_ids.shape
    alike = 0
    for sentence, beam_row, greedy_row in zip(
        SOURCE, beam_ids.numpy(), greedy_ids.numpy(), strict=True
    ):
        if ties.output_ids(beam_row) == ties.output_ids(greedy_row):
            alike += 1
            continue
        next_logits = ties.teacher_forced(reversal_model, sentence)
        replay = _replay_settings(reversal_model, sentence, "beam", beam_size=1)
        assert ties.ours_part_at_a_tie(next_logits, beam_row, greedy_row, replay), sentence
    assert alike > len(SOURCE) // 2, alike


@pytest.fixture(scope="module")
def held_out_decodings(reversal_model):
    """Greedy and beam search (the paper's beam 4, alpha 0.6) over 240 held-out sources."""
    source = HELD_OUT_SOURCE[:240]
    greedy = tf.function(lambda source: greedy_search(reversal_model, source))(source)
    beam = tf.function(lambda source: beam_search(reversal_model, source))(source)
    return source, greedy, beam


@pytest.mark.exact
def test_beam_search_scores_at_least_as_well_as_greedy(held_out_decodings):
    _, (greedy_ids, greedy_scores), (_, beam_scores) = held_out_decodings
    greedy_normalised = np.asarray(greedy_scores) / _lp(_lengths(greedy_ids))
    assert (np.asarray(beam_scores) >= greedy_normalised - 1e-5).all()


@pytest.mark.exact
def test_both_finish_rules_give_their_hypotheses_scores_and_tensor2tensor_the_best(
    model_and_source,
):
    """Well-formed hypotheses scored logP / lp under either rule. The alive hypotheses are
    the same under both, and tensor2tensor's finished set takes every EOS extension that
    fairseq's does (and those ranked k+1..2k), so its best score is never lower."""
    model, source = model_and_source
    best = {}
    for rule in FINISH_RULES:
        ids, scores = beam_search(model, source, finish_rule=rule, max_extra_length=5)
        _assert_well_formed(ids, scores, len(source))
        expected = _log_prob(model, source, ids) / _lp(_lengths(ids))
        np.testing.assert_allclose(scores, expected, atol=1e-4)
        best[rule] = np.asarray(scores)
    assert (best["tensor2tensor"] >= best["fairseq"] - 1e-6).all()


# A hand-made next-token distribution over {pad, unk, BOS, EOS, A, B}: FIRST after BOS,
# LATER at every later position, whatever the prefix.
A, B = 4, 5
FIRST = [1e-6, 0.02, 0.03, 0.20, 0.40, 0.35]
LATER = [1e-6, 0.02, 0.03, 0.35, 0.30, 0.30]


class _PositionModel:
    """A stand-in for a `Transformer` in uncached search (`use_cache=False` calls only the
    model on the whole prefix, and reads its config): log FIRST at the first target
    position, log LATER at the others."""

    def __init__(self):
        self.config = kt.TransformerConfig.preset("tiny", vocab_size=len(FIRST))

    def __call__(self, inputs, training=False):
        target = tf.convert_to_tensor(inputs["target_ids"])  # (n, T)
        n, length = tf.shape(target)[0], tf.shape(target)[1]
        first = tf.range(length)[None, :, None] == 0  # (1, T, 1)
        logits = tf.where(first, tf.math.log([[FIRST]]), tf.math.log([[LATER]]))  # (1, T, V)
        return tf.broadcast_to(logits, [n, length, len(FIRST)])


def test_finish_rules_differ_on_an_eos_ranked_between_k_and_2k():
    """Beam 2. After BOS the 4 best extensions are A (0.40), B (0.35), EOS (0.20), BOS:
    tensor2tensor finishes [EOS] (rank 3), fairseq does not, and the best hypothesis it
    finishes later, [A, EOS] (0.40 * 0.35), scores below it even after the length penalty:
    log 0.14 / lp(2) = -1.79 < log 0.20 / lp(1) = -1.61."""
    model, source = _PositionModel(), np.array([[A, B, A]])
    results = {
        rule: beam_search(
            model, source, beam_size=2, finish_rule=rule, max_extra_length=3, use_cache=False
        )
        for rule in FINISH_RULES
    }
    (t2t_ids, t2t_scores), (fairseq_ids, fairseq_scores) = (
        results["tensor2tensor"],
        results["fairseq"],
    )
    np.testing.assert_array_equal(t2t_ids, [[EOS, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(fairseq_ids, [[A, EOS, 0, 0, 0, 0]])
    for ids, scores in results.values():
        expected = _log_prob(model, source, ids) / _lp(_lengths(ids))
        np.testing.assert_allclose(scores, expected, rtol=1e-5)
    np.testing.assert_allclose(t2t_scores, [np.log(0.20)], rtol=1e-5)
    np.testing.assert_allclose(fairseq_scores, [np.log(0.40 * 0.35) / _lp(2)], rtol=1e-5)
    assert t2t_scores[0] > fairseq_scores[0]


@pytest.mark.exact
def test_early_stopping_finds_what_exact_stopping_finds_up_to_where_it_stops(model_and_source):
    """Both rules run the same steps until "early" stops, and the finished set only improves
    after that, so early's best is a hypothesis scored logP / lp, never above exact's."""
    model, source = model_and_source
    best = {}
    for stopping in STOPPING:
        ids, scores = beam_search(model, source, length_penalty=1.0, stopping=stopping, **SHORT)
        _assert_well_formed(ids, scores, len(source))
        expected = _log_prob(model, source, ids) / _lp(_lengths(ids), 1.0)
        np.testing.assert_allclose(scores, expected, atol=1e-4)
        best[stopping] = np.asarray(scores)
    assert (best["exact"] >= best["early"] - 1e-6).all()


class _StepModel(_PositionModel):
    """`_PositionModel` with one distribution a target position (the last one repeated)."""

    def __init__(self, distributions):
        super().__init__()
        self.distributions = tf.math.log(tf.constant(distributions))  # (positions, vocab)

    def __call__(self, inputs, training=False):
        target = tf.convert_to_tensor(inputs["target_ids"])  # (n, T)
        positions = tf.minimum(tf.range(tf.shape(target)[1]), len(self.distributions) - 1)
        logits = tf.gather(self.distributions, positions)[None]  # (1, T, V)
        return tf.broadcast_to(logits, [tf.shape(target)[0], *logits.shape[1:]])


def test_early_stopping_stops_where_only_a_longer_hypothesis_would_win():
    """Beam 2, alpha 3. [EOS] finishes first at log 0.5 = -0.69; the best alive, [A] at
    log 0.3, could reach at most log 0.3 / lp(2) = -0.76 by ending at the next step, so
    "early" stops there. "exact" goes on (lp(6) would lift [A] to -0.20) and finds
    [A, A, EOS]: log(0.3 * 0.97 * 0.97) / lp(3) = -0.53."""
    model = _StepModel(
        [
            [1e-6, 0.02, 0.03, 0.50, 0.30, 0.15],  # after BOS
            [1e-6, 0.005, 0.005, 0.01, 0.97, 0.01],  # then A is almost certain
            [1e-6, 0.005, 0.005, 0.97, 0.01, 0.01],  # then EOS
        ]
    )
    source = np.array([[A, B, A]])
    found = {
        stopping: beam_search(
            model,
            source,
            beam_size=2,
            length_penalty=3.0,
            max_extra_length=3,
            use_cache=False,
            stopping=stopping,
        )
        for stopping in STOPPING
    }
    np.testing.assert_array_equal(found["early"][0], [[EOS, 0, 0, 0, 0, 0]])
    np.testing.assert_allclose(found["early"][1], [np.log(0.5)], rtol=1e-5)
    np.testing.assert_array_equal(found["exact"][0], [[A, A, EOS, 0, 0, 0]])
    np.testing.assert_allclose(
        found["exact"][1], [np.log(0.3 * 0.97 * 0.97) / _lp(3, 3.0)], rtol=1e-5
    )


def test_decoding_stops_at_eos_and_pads_after_it(model_and_source):
    model, source = model_and_source
    for ids, scores in (
        decoded(greedy_search, model, source, max_extra_length=5),
        decoded(beam_search, model, source, max_extra_length=5),
        sample(model, source, seed=0, max_extra_length=5),
    ):
        _assert_well_formed(ids, scores, len(source))


def test_output_length_limits_force_eos(random_model):
    limits = _source_lengths(RANDOM_SOURCE) + 3
    for search in (greedy_search, beam_search):
        ids, _ = search(random_model, RANDOM_SOURCE, max_extra_length=3)
        assert ids.shape[1] == RANDOM_SOURCE.shape[1] + 3
        lengths = _lengths(ids)
        assert (lengths <= limits).all()
        assert (lengths == limits).any()  # the random model rarely chooses EOS itself
        ids, _ = search(random_model, RANDOM_SOURCE, max_extra_length=3, max_length=4)
        assert ids.shape[1] == 4 and (_lengths(ids) <= np.minimum(limits, 4)).all()
        _assert_well_formed(ids, tf.zeros(len(ids)), len(ids))


def test_the_searches_masking_gives_the_selects_values_bit_for_bit():
    """`loop._masked` (products and sums, for LiteRT's kernels) gives `where(allowed, scores,
    NEG_INF)`'s bits: sums of log-probabilities, zeros of either sign, NEG_INF and below (a
    dead hypothesis's), each allowed and not."""
    rng = np.random.default_rng(0)
    special = [0.0, -0.0, -1e-30, NEG_INF, NEG_INF - 64.0, -3.5e4]
    scores = np.concatenate([-rng.exponential(10.0, 500), special * 2]).astype("float32")
    allowed = rng.random(scores.shape) < 0.5
    allowed[-2 * len(special) :] = [True] * len(special) + [False] * len(special)
    got = np.asarray(loop._masked(scores, allowed))
    want = np.where(allowed, scores, np.float32(NEG_INF))
    np.testing.assert_array_equal(got.view("int32"), want.view("int32"))


def test_allowed_tokens_are_rows_of_the_limit_s_table():
    """`loop._allowed_tokens` with `at_limit` of any shape: never a `never` token, and where
    the limit holds only a stop token, as the mask it replaced computed them."""
    vocab, never, stops = 9, (0, 2), (3,)
    at_limit = np.array([[True, False, False], [False, False, True]])  # (batch, beam)
    got = np.asarray(loop._allowed_tokens(vocab, never, stops, at_limit))
    token = np.arange(vocab)
    allowed = ~np.isin(token, never)
    want = allowed & (~at_limit[..., None] | np.isin(token, stops))
    assert got.shape == (2, 3, vocab)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(loop._allowed_tokens(vocab, never, stops), allowed)


def test_model_max_length_caps_the_output():
    keras.utils.set_random_seed(0)
    config = kt.TransformerConfig.preset("tiny", vocab_size=20, max_length=5, positional="learned")
    model = kt.build_transformer(config)
    ids, scores = greedy_search(model, RANDOM_SOURCE[:, :5])
    assert ids.shape[1] == 5
    _assert_well_formed(ids, scores, len(ids))


@pytest.mark.exact
def test_limit_of_zero_extra_tokens_cuts_the_decode_short(reversal_model):
    """A reversal takes length + 1 tokens; with no extra tokens allowed the first length - 1
    are the unlimited decode's and EOS replaces the last symbol. Compared with the model's own
    decode, not with the true reversal, which a model not 100% exact need not produce."""
    unlimited, _ = decoded(greedy_search, reversal_model, SOURCE)
    ids, _ = greedy_search(reversal_model, SOURCE, max_extra_length=0)
    lengths = _source_lengths(SOURCE)
    assert ids.shape == SOURCE.shape
    alike = 0
    for sentence, row, length, full in zip(
        SOURCE, np.asarray(ids), lengths, np.asarray(unlimited), strict=True
    ):
        assert (full[:length] != EOS).all()  # unlimited, it runs past the limit
        assert row[length - 1] == EOS and (row[length:] == 0).all()
        if (row[: length - 1] == full[: length - 1]).all():
            alike += 1
            continue
        # Two buffer lengths are two computations: they may part only at a tie (greedy's).
        next_logits = ties.teacher_forced(reversal_model, sentence)
        assert ties.ours_part_at_a_tie(next_logits, row[: length - 1], full[: length - 1])
    assert alike > len(SOURCE) // 2, alike  # 8 of 8 when written


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.exact
def test_a_sentence_decodes_the_same_whatever_its_batch(model_and_source, search):
    """The longest, a middle and the shortest sentence in one batch, each as decoded alone
    (cut to its own width): alike but at a tie (`_alike_but_at_ties`), two of three at
    least (three when written)."""
    model, source = model_and_source
    order = np.argsort(_source_lengths(source))
    batch = source[[order[-1], order[len(order) // 2], order[0]]]
    together, scores = SEARCHES[search](model, batch, max_extra_length=4)
    alone, alone_scores = [], []
    for sentence in batch:
        width = _source_lengths([sentence])[0]
        ids, score = SEARCHES[search](model, sentence[None, :width], max_extra_length=4)
        ids = np.asarray(ids)[0]
        assert len(ids) <= together.shape[1]
        alone.append(np.pad(ids, (0, together.shape[1] - len(ids))))
        alone_scores.append(np.asarray(score)[0])
    alike = _alike_but_at_ties(
        model, batch, search, together, alone, scores, alone_scores, max_extra_length=4
    )
    assert alike >= 2, alike


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.exact
def test_graph_mode_and_xla_match_eager(reversal_model, search):
    def decode(source):
        return SEARCHES[search](reversal_model, source, max_extra_length=5)

    expected_ids, expected_scores = decoded(
        SEARCHES[search], reversal_model, SOURCE, max_extra_length=5
    )
    graph = tf.function(decode, input_signature=[tf.TensorSpec([None, None], tf.int32)])
    xla = tf.function(decode, jit_compile=True)
    for compiled in (graph, xla):
        ids, scores = compiled(tf.constant(SOURCE, tf.int32))
        assert ids.shape == expected_ids.shape
        alike = _alike_but_at_ties(
            reversal_model,
            SOURCE,
            search,
            ids,
            expected_ids,
            scores,
            expected_scores,
            max_extra_length=5,
        )
        assert alike > len(SOURCE) // 2, alike  # 8 of 8 when written
    graph(tf.constant(RANDOM_SOURCE[:2], tf.int32))  # another batch size and length
    assert graph.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("name", ["greedy_search", "sample", "beam_search", "translate_ids"])
def test_autograph_leaves_the_searches_as_written(random_model, name, as_written):
    """`tf.function` converts the Python it reaches with AutoGraph unless told otherwise; the
    searches need no conversion (their loops are explicit), so they are marked to be left as
    they are, and a user's `tf.function` around one traces it as written (and so does every
    function it calls). Shown with `tf.autograph.to_graph`, the conversion `tf.function`
    applies, run eagerly (a trace would add seconds, not a check); a `tf.function` itself:
    test_generate.py."""
    from keras_transformer.decoding import beam, greedy

    module = beam if name in ("beam_search", "translate_ids") else greedy  # translate_ids: 4
    calls = as_written(module, "_decoder")
    search = getattr(kt.decoding, name)
    converted = tf.autograph.to_graph(lambda s: search(random_model, s, max_extra_length=2))
    ids, _ = converted(tf.constant(RANDOM_SOURCE, tf.int32))
    assert ids.shape == (3, 8) and calls == [True]


@pytest.mark.parametrize("model", ["random", "large_vocab"])
@pytest.mark.exact
def test_greedy_under_xla_decodes_as_eagerly(request, model):
    """The random models' near-uniform scores run to the length limits (the cache grown
    through every phase) and leave close choices to the argmax: a sentence may part at two
    tokens within `ties.SCORE_TOLERANCE` (`_alike_but_at_ties`), all but one alike (all when
    written)."""
    model, source = {
        "random": (request.getfixturevalue("random_model"), RANDOM_SOURCE),
        "large_vocab": (request.getfixturevalue("large_vocab_model"), LARGE_VOCAB_SOURCE),
    }[model]
    ids, scores = greedy_search(model, source, max_extra_length=9)
    xla = tf.function(lambda s: greedy_search(model, s, max_extra_length=9), jit_compile=True)
    xla_ids, xla_scores = xla(tf.constant(source, tf.int32))
    assert xla_ids.shape == ids.shape
    alike = _alike_but_at_ties(
        model, source, "greedy", xla_ids, ids, xla_scores, scores, max_extra_length=9
    )
    assert alike >= len(source) - 1, alike


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "xla"])
@pytest.mark.parametrize("name", ["greedy", "beam"])
@pytest.mark.exact
def test_searches_decode_the_same_with_the_fast_path(large_vocab_model, compiled, name):
    """Over 4,000 pieces, where `kt.fast` changes the computation: the output projection (its
    matrix transposed once a decode, for 2 and 8 rows here) and beam 4's top 2k among beam *
    vocab = 16,000 scores a step. The switch is read when the search is traced. A sentence may
    part at a choice within `ties.SCORE_TOLERANCE` (`_alike_but_at_ties`); one of the two at
    most (neither when written)."""
    model, source = large_vocab_model, tf.constant(LARGE_VOCAB_SOURCE[:2], tf.int32)

    def search(source):
        return SEARCHES[name](model, source, max_extra_length=4)

    with fast_path(False):  # the reference: eager (XLA without the fast path: tests above)
        ids, scores = search(source)
    with fast_path(True):
        fast_ids, fast_scores = (tf.function(search, jit_compile=True) if compiled else search)(
            source
        )
    assert fast_ids.shape == ids.shape
    alike = _alike_but_at_ties(
        model,
        LARGE_VOCAB_SOURCE[:2],
        name,
        fast_ids,
        ids,
        fast_scores,
        scores,
        atol=1e-6 if not compiled else 1e-4,
        max_extra_length=4,
    )
    assert alike >= 1, alike


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.exact
def test_parallel_search_decodes_as_the_whole_batch(reversal_model, search):
    # Unfamiliar input: its hypotheses change ranks, so beams are reordered.
    model, source = reversal_model, UNFAMILIAR_SOURCE
    settings = {"max_extra_length": 5}
    expected_ids, expected_scores = decoded(SEARCHES[search], model, source, **settings)
    parallel = parallel_search(lambda s: SEARCHES[search](model, s, **settings), shards=3)
    # XLA compiles each slice shape once: 4 sentences as 2 + 1 + 1, then 2 as 1 + 1 + 0 (an
    # empty slice): three programs.
    for rows in (4, 2):
        ids, scores = parallel(source[:rows])
        assert ids.shape == (rows, expected_ids.shape[1])
        expected = np.asarray(expected_ids)[:rows], np.asarray(expected_scores)[:rows]
        alike = _alike_but_at_ties(
            model, source[:rows], search, ids, expected[0], scores, expected[1], **settings
        )
        assert alike > rows // 2, alike  # all when written


@pytest.mark.parametrize("search", SEARCHES)
def test_an_empty_batch_decodes_to_nothing(random_model, search):
    def decode(source):
        return SEARCHES[search](random_model, source, **SHORT)

    empty = tf.zeros([0, 4], tf.int32)
    # (Under XLA, parallel_search's empty slices above decode an empty batch too.)
    for run in (decode, tf.function(decode)):
        ids, scores = run(empty)  # a static batch of 0
        assert ids.shape == (0, 4 + SHORT["max_extra_length"]) and scores.shape == (0,)


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.exact
def test_long_outputs_decode_as_without_a_cache(random_model, search):
    """Outputs of up to 32 tokens: the cache is grown several times on the way (the random
    model rarely ends before its limit), and every step still sees what the uncached model
    computes from the whole prefix."""
    settings = {"max_extra_length": 26}  # out_len = 6 + 26 = 32
    ids, scores = decoded(SEARCHES[search], random_model, RANDOM_SOURCE, **settings)
    assert _lengths(ids).max() > 24  # past three quarters of the buffers' final length
    ids_full, scores_full = SEARCHES[search](
        random_model, RANDOM_SOURCE, use_cache=False, **settings
    )
    assert ids.shape == ids_full.shape
    alike = _alike_but_at_ties(
        random_model, RANDOM_SOURCE, search, ids, ids_full, scores, scores_full, **settings
    )
    assert alike >= 2, alike  # 3 of 3 when written


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.exact
def test_one_loop_decodes_as_the_phases(random_model, search):
    """`phases=1` (the LiteRT export's plan: the step once in a traced graph) decodes as the
    phased loops, with a buffer of the whole output from the first step; the traced graph
    holds one loop instead of `PHASES`. The deprecated `loop_phases` block still sets it."""
    settings = {"max_extra_length": 26}  # the phased decode: the test above's
    ids, scores = decoded(SEARCHES[search], random_model, RANDOM_SOURCE, **settings)

    def loops(**phases):
        function = tf.function(lambda s: SEARCHES[search](random_model, s, **settings, **phases))
        graph = function.get_concrete_function(tf.TensorSpec([None, None], tf.int32)).graph
        return sum(op.type in ("While", "StatelessWhile") for op in graph.get_operations())

    ids_one, scores_one = SEARCHES[search](random_model, RANDOM_SOURCE, **settings, phases=1)
    assert loops(phases=1) == 1
    assert ids_one.shape == ids.shape
    alike = _alike_but_at_ties(
        random_model, RANDOM_SOURCE, search, ids_one, ids, scores_one, scores, **settings
    )
    assert alike >= 2, alike  # 3 of 3 when written
    assert loops() == kt.decoding.search.PHASES
    replacement = "phases= of the search (keras_transformer.decoding.DecodingPlan(settings, "
    with warns(replacement + "phases=...))"):
        with kt.decoding.search.loop_phases(1):
            assert loops() == 1
    assert loops() == kt.decoding.search.PHASES
    with pytest.raises(ValueError, match="phases=0 must be an int >= 1"):
        kt.decoding.DecodingPlan(phases=0)


@pytest.mark.parametrize("shards", [0, 1.5, True])
def test_parallel_search_needs_a_whole_number_of_shards(random_model, shards):
    with pytest.raises(ValueError, match="shards"):
        parallel_search(lambda s: greedy_search(random_model, s), shards=shards)


def test_sampling_with_top_k_one_is_greedy(model_and_source):
    model, source = model_and_source
    greedy_ids, greedy_scores = decoded(greedy_search, model, source, max_extra_length=5)
    ids, scores = sample(model, source, top_k=1, temperature=2.0, seed=3, max_extra_length=5)
    np.testing.assert_array_equal(ids, greedy_ids)
    np.testing.assert_allclose(scores, greedy_scores, atol=1e-5)


def _draws_alike_but_at_boundaries(model, source, ids, other_ids, *, seed, temperature):
    """Two computations of `sample(model, source, seed=seed, temperature=temperature)`: each
    sentence's draws equal, but where at the first step they part the step's uniform lies
    within `ties.SCORE_TOLERANCE` of a boundary of the cumulative probabilities between the
    two tokens (`ties.rows_drawn_alike_but_at_boundaries`, the distribution teacher forced):
    there the two computations' last bits may draw either side. Returns how many are
    alike."""

    def draw_at(step):
        """The search's sampler at `step`: its seed is `(seed, step)`."""

        def draw(logits):
            return tf.random.stateless_categorical(logits, 1, [seed, step], tf.int32)[:, 0]

        return draw

    alike = ties.rows_drawn_alike_but_at_boundaries(
        lambda row: ties.teacher_forced(model, source[row]),
        draw_at,
        ids,
        other_ids,
        temperature=temperature,
    )
    return int(alike.sum())


@pytest.mark.exact
def test_sampling_is_repeatable_with_a_seed_and_varies_across_seeds(random_model):
    """A seed draws the same eagerly twice (one computation), and in a `tf.function` (another
    graph of the same model: its draws part only where `_draws_alike_but_at_boundaries`
    allows, all but one sentence alike, all when written)."""

    def draw(seed):
        return sample(random_model, RANDOM_SOURCE, temperature=1.5, seed=seed, **SHORT)[0]

    first = draw(1)
    np.testing.assert_array_equal(draw(1), first)
    assert not np.array_equal(draw(2), first)
    graph = tf.function(
        lambda: sample(random_model, RANDOM_SOURCE, temperature=1.5, seed=1, **SHORT)
    )()[0]
    alike = _draws_alike_but_at_boundaries(
        random_model, RANDOM_SOURCE, graph, first, seed=1, temperature=1.5
    )
    assert alike >= len(RANDOM_SOURCE) - 1, alike
    unseeded = sample(random_model, RANDOM_SOURCE, **SHORT)
    _assert_well_formed(*unseeded, len(RANDOM_SOURCE))


@pytest.mark.exact
def test_top_k_sampling_draws_among_the_k_most_likely(random_model):
    source = np.tile(RANDOM_SOURCE, [4, 1])
    ids, scores = sample(random_model, source, top_k=3, temperature=3.0, seed=0, **SHORT)
    np.testing.assert_allclose(scores, _log_prob(random_model, source, ids), atol=1e-4)
    ids = np.asarray(ids)
    target = np.concatenate([np.full((len(ids), 1), BOS), ids[:, :-1]], axis=1)
    inputs = {"source_ids": source, "target_ids": target}
    logits = np.array(random_model(inputs, training=False))
    logits[:, :, [0, BOS]] = -np.inf  # padding and the start token are never drawn
    chosen = np.take_along_axis(logits, ids[:, :, None], axis=2)
    rank = (logits > chosen).sum(axis=2)  # (batch, len): 0 for the most likely token
    limits = _source_lengths(source) + SHORT["max_extra_length"]
    free = (ids != 0) & ~(np.arange(ids.shape[1])[None, :] + 1 == limits[:, None])
    assert (rank[free] < 3).all()
    assert (rank[free] > 0).any()  # not always the most likely: it does sample


def test_mixed_bfloat16_model_decodes():
    keras.utils.set_random_seed(0)
    config = kt.TransformerConfig.preset(  # one layer each side: the dtypes are the subject
        "tiny", vocab_size=20, dtype="mixed_bfloat16", num_encoder_layers=1, num_decoder_layers=1
    )
    model = kt.build_transformer(config)
    memory, _ = model.encode(RANDOM_SOURCE)
    cache = model.decoder.init_cache(memory, 4)
    assert cache.layers[0].self_attention.key.dtype == tf.bfloat16
    decode_xla = tf.function(lambda s: beam_search(model, s, max_extra_length=4), jit_compile=True)
    for ids, scores in (
        greedy_search(model, RANDOM_SOURCE, max_extra_length=4),
        decode_xla(tf.constant(RANDOM_SOURCE, tf.int32)),
        sample(model, RANDOM_SOURCE, seed=0, max_extra_length=4),
    ):
        assert ids.shape == (3, RANDOM_SOURCE.shape[1] + 4)
        _assert_well_formed(ids, scores, 3)


@pytest.mark.exact
def test_beam_search_reverses_held_out_sequences(held_out_decodings):
    source, _, (ids, _) = held_out_decodings
    target = HELD_OUT_TARGET[: len(source), 1:]  # reversed source + EOS, then padding
    exact = (np.asarray(ids)[:, : target.shape[1]] == target).all(axis=1).mean()
    assert exact >= 0.9, f"{exact:.2f} of held-out sequences reversed exactly"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_extra_length": -1},
        {"max_length": 0},
        {"beam_size": 0},
        {"length_penalty": -0.5},
    ],
)
def test_bad_arguments_raise(random_model, kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        beam_search(random_model, RANDOM_SOURCE, **kwargs)


def test_an_unknown_finish_rule_raises(random_model):
    with pytest.raises(ValueError, match="finish_rule='marian' must be one of"):
        beam_search(random_model, RANDOM_SOURCE, finish_rule="marian")


def test_an_unknown_stopping_rule_raises(random_model):
    with pytest.raises(ValueError, match="stopping='never' must be one of"):
        beam_search(random_model, RANDOM_SOURCE, stopping="never")


def test_an_unknown_ranking_raises(random_model):
    with pytest.raises(ValueError, match="ranking='wu' must be one of \\('gnmt', 'length'\\)"):
        beam_search(random_model, RANDOM_SOURCE, ranking="wu")


@pytest.mark.parametrize("kwargs", [{"temperature": 0.0}, {"top_k": -1}])
def test_bad_sampling_arguments_raise(random_model, kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        sample(random_model, RANDOM_SOURCE, **kwargs)


def _copy(model):
    """A new model with `model`'s config and weights (quantize and LoRA change a model in
    place; the session's fixture must stay as it is)."""
    twin = kt.build_transformer(model.config)
    twin.set_weights(model.get_weights())
    return twin


def _bleu(ids, references):
    """Corpus BLEU of id sequences (up to EOS), each id a word."""

    def words(row):
        row = list(row)
        row = row[: row.index(EOS)] if EOS in row else row
        return " ".join(str(i) for i in row if i)

    return sacrebleu.corpus_bleu([words(r) for r in ids], [[words(r) for r in references]]).score


@pytest.mark.exact
def test_int8_model_translates_within_half_a_bleu_point(reversal_model):
    source, target = held_out_data(200)
    references = target[:, 1:]
    float_ids, _ = kt.decoding.greedy_search(reversal_model, source)
    quantized = _copy(reversal_model)
    quantize(quantized)
    int8_ids, _ = kt.decoding.greedy_search(quantized, source)
    float_bleu, int8_bleu = (
        _bleu(float_ids.numpy(), references),
        _bleu(int8_ids.numpy(), references),
    )
    assert float_bleu > 80  # the fixture has learned the task
    assert abs(float_bleu - int8_bleu) <= 0.5, (float_bleu, int8_bleu)


PREFIX = np.array([[11, 12], [13, 0], [0, 0]])  # two tokens, one, none


@pytest.mark.parametrize("search", ["greedy", "beam", "sample", "uncached"])
@pytest.mark.exact
def test_a_target_prefix_is_forced_first_and_not_scored(random_model, search):
    """Each row's prefix (0: none) comes first, then the search goes on from it as a decoder
    fed the prefix would: every search equals its teacher-forced continuation, and a forced
    token's log-probability is not in the score (transformers' forced_bos_token_id)."""
    run = {
        "greedy": lambda **k: greedy_search(random_model, RANDOM_SOURCE, **k),
        "beam": lambda **k: beam_search(
            random_model, RANDOM_SOURCE, beam_size=1, length_penalty=0.0, finish_rule="fairseq", **k
        ),
        "sample": lambda **k: sample(random_model, RANDOM_SOURCE, top_k=1, seed=3, **k),
        "uncached": lambda **k: greedy_search(random_model, RANDOM_SOURCE, use_cache=False, **k),
    }[search]
    ids, scores = run(max_extra_length=5, target_prefix=PREFIX)
    ids, scores = ids.numpy(), scores.numpy()
    assert ids[0, :2].tolist() == [11, 12] and ids[1, 0] == 13
    # The row without a prefix as in a batch without any (another computation: it may part
    # at a choice within `ties.SCORE_TOLERANCE`, top-k 1 as greedy).
    unprefixed = run(max_extra_length=5)[0].numpy()[2]
    settings = (
        _replay_settings(
            random_model,
            RANDOM_SOURCE[2],
            "beam",
            beam_size=1,
            length_penalty=0.0,
            finish_rule="fairseq",
            max_extra_length=5,
        )
        if search == "beam"
        else None
    )
    next_logits = ties.teacher_forced(random_model, RANDOM_SOURCE[2])
    assert ties.output_ids(ids[2]) == ties.output_ids(unprefixed) or ties.ours_part_at_a_tie(
        next_logits, ids[2], unprefixed, settings
    ), (ids[2], unprefixed)
    for row, prefix in enumerate(PREFIX):
        forced = [int(t) for t in prefix if t]
        output = [int(t) for t in ids[row] if t]
        target = np.array([[BOS, *output[:-1]]])
        logits = random_model(
            {"source_ids": RANDOM_SOURCE[row : row + 1], "target_ids": target}, training=False
        )
        log_probs = tf.nn.log_softmax(logits)[0].numpy()
        steps = range(len(forced), len(output))
        expected = sum(log_probs[t, output[t]] for t in steps)
        np.testing.assert_allclose(scores[row], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.exact
def test_a_target_prefix_for_every_row_under_xla(random_model):
    """One prefix `[prefix_len]` for all rows, traced once for any batch and prefix width, and
    compiled by XLA: as eagerly; an empty prefix changes nothing. Each a computation of its
    own: a sentence may part at a choice within `ties.SCORE_TOLERANCE` (`_alike_but_at_ties`,
    the prefix forced in the replay), all but one alike (all when written)."""
    search = tf.function(
        lambda source, prefix: beam_search(
            random_model, source, beam_size=2, target_prefix=prefix, **SHORT
        ),
        jit_compile=True,
    )
    ids, scores = search(tf.constant(RANDOM_SOURCE, tf.int32), tf.constant([9], tf.int32))
    eager, eager_scores = beam_search(
        random_model, RANDOM_SOURCE, beam_size=2, target_prefix=[9], **SHORT
    )
    assert ids.shape == eager.shape
    alike = _alike_but_at_ties(
        random_model,
        RANDOM_SOURCE,
        "beam",
        ids,
        eager,
        scores,
        eager_scores,
        atol=1e-5,
        beam_size=2,
        target_prefix=[9],
        **SHORT,
    )
    assert alike >= len(RANDOM_SOURCE) - 1, alike
    assert (ids.numpy()[:, 0] == 9).all()
    empty, empty_scores = greedy_search(
        random_model, RANDOM_SOURCE, target_prefix=np.zeros((3, 0), "int32"), **SHORT
    )
    none, none_scores = decoded(greedy_search, random_model, RANDOM_SOURCE, **SHORT)
    assert empty.shape == none.shape
    alike = _alike_but_at_ties(
        random_model, RANDOM_SOURCE, "greedy", empty, none, empty_scores, none_scores, **SHORT
    )
    assert alike >= len(RANDOM_SOURCE) - 1, alike
    with pytest.raises(ValueError, match="target_prefix must be"):
        greedy_search(random_model, RANDOM_SOURCE, target_prefix=np.zeros((3, 1, 1), "int32"))

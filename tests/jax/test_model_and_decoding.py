"""The model and the searches on JAX: `fit` on numpy lowers the loss, `.keras` round trips,
the TensorFlow model's logits and decodings on the same weights, and the searches' own
properties (cache, scores, n-best, finish and stopping rules, sampling, `jax.jit`).

The searches' exhaustive checks run on TensorFlow (tests/test_decoding.py); these show the
same code holds on JAX.
"""

import json
import warnings

import jax
import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.decoding import EOS_ID, beam_search, greedy_search, sample
from tests import programs, ties
from tests.reversal import BOS, held_out_data, reversal_task

SOURCE = held_out_data()[0][:8]  # (8, 10): lengths 4..10, 0-padded
SHORT = {"max_extra_length": 5}


@pytest.fixture(scope="module")
def model():
    """The reversal task's small model (tests/reversal.py), 4 epochs on JAX: peaked
    distributions, as a trained model's."""
    from tests.reversal import train_reversal_model

    return train_reversal_model(epochs=4)


def _replay_settings(model, row, **settings):
    """`ties.replay_beam`'s settings for `beam_search(model, SOURCE, **SHORT, **settings)`'s
    sentence `row` (our default rules where `settings` names none)."""
    defaults = kt.decoding.DecodingSettings()
    rules = ("beam_size", "length_penalty", "finish_rule", "stopping", "ranking")
    replay = {name: settings.get(name, getattr(defaults, name)) for name in rules}
    limit = ties.length_limit(SOURCE[row], SHORT["max_extra_length"], model.config.max_length)
    return {**replay, "limit": limit, "n_best": settings.get("num_hypotheses") or 1}


def _alike_but_at_ties(model, search, ids, other_ids, scores, other_scores, *, atol):
    """Two computations of `search(model, SOURCE, **SHORT)` (greedy or beam search): each
    sentence's ids equal and its scores within `atol`, but a sentence where the two part at
    a choice within `ties.SCORE_TOLERANCE` (`ties.rows_alike_but_at_ties`: greedy's two
    tokens, beam search's replay; the model is trained in the run, so which choices are that
    close is each CPU's own). Returns how many sentences are alike."""
    alike = ties.rows_alike_but_at_ties(
        lambda row: ties.teacher_forced(model, SOURCE[row]),
        ids,
        other_ids,
        None if search is greedy_search else lambda row: _replay_settings(model, row),
    )
    np.testing.assert_allclose(
        np.asarray(scores)[alike], np.asarray(other_scores)[alike], atol=atol
    )
    return int(alike.sum())


def _log_prob(model, source, ids):
    """log P(ids | source) by teacher forcing through the full model, `[batch]`."""
    ids = np.asarray(ids)
    target = np.concatenate([np.full((len(ids), 1), BOS), ids[:, :-1]], axis=1)
    logits = model({"source_ids": np.asarray(source), "target_ids": target}, training=False)
    log_probs = np.asarray(jax.nn.log_softmax(logits))
    picked = np.take_along_axis(log_probs, ids[..., None], axis=-1)[..., 0]
    return np.where(ids != 0, picked, 0.0).sum(axis=1)


@pytest.mark.exact
def test_the_model_learns_on_numpy_and_round_trips_as_keras_file(model, tmp_path):
    source, target = reversal_task(200, seed=3)
    inputs = {"source_ids": source, "target_ids": target[:, :-1]}
    predicted = np.asarray(greedy_search(model, source)[0])[:, : target.shape[1] - 1]
    real = target[:, 1:] != 0
    assert (predicted == target[:, 1:])[real].mean() > 0.9
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    np.testing.assert_array_equal(loaded(inputs), model(inputs))


def test_the_warmup_schedule_trains_without_a_dtype_warning():
    """The paper's schedule (kt.WarmupSchedule) in `fit` on JAX, with and without gradient
    accumulation: no "Explicitly requested dtype int64 ... truncated to int32" (JAX runs
    without 64-bit integers), and the rate of paper 5.3 at the optimizer's count."""
    for accumulation in (1, 2):
        schedule = kt.WarmupSchedule(8, warmup_steps=4, accumulation_steps=accumulation)
        optimizer = keras.optimizers.Adam(
            schedule, gradient_accumulation_steps=accumulation if accumulation > 1 else None
        )
        net = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        net.compile(optimizer, "mse")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            net.fit(np.ones((8, 3)), np.ones((8, 1)), batch_size=2, epochs=1, verbose=0)
            rate = float(optimizer.learning_rate)
        assert [str(w.message) for w in caught if "int64" in str(w.message)] == []
        update = 4 // accumulation + 1  # 4 batches done
        np.testing.assert_allclose(rate, 8**-0.5 * min(update**-0.5, update * 4**-1.5), rtol=1e-6)


@pytest.mark.parametrize("search", [greedy_search, beam_search])
@pytest.mark.exact
def test_cached_and_uncached_decoding_agree(model, search):
    """Apart only at a choice within `ties.SCORE_TOLERANCE` (`_alike_but_at_ties`), all but
    one sentence alike (all 8 when written)."""
    ids, scores = search(model, SOURCE, **SHORT)
    full_ids, full_scores = search(model, SOURCE, use_cache=False, **SHORT)
    assert ids.shape == full_ids.shape
    alike = _alike_but_at_ties(model, search, ids, full_ids, scores, full_scores, atol=1e-4)
    assert alike >= len(SOURCE) - 1, alike


@pytest.mark.exact
def test_greedy_scores_are_the_log_probabilities_of_its_ids(model):
    ids, scores = greedy_search(model, SOURCE, **SHORT)
    np.testing.assert_allclose(scores, _log_prob(model, SOURCE, ids), atol=1e-4)
    for row in np.asarray(ids):
        end = int(np.argmax(row == EOS_ID))
        assert row[end] == EOS_ID and (row[:end] != 0).all() and (row[end + 1 :] == 0).all()


# Each stopping rule once, each finish rule at least once (the finish rules cycled).
@pytest.mark.parametrize(
    "stopping, finish_rule",
    [
        (stopping, kt.decoding.FINISH_RULES[i % len(kt.decoding.FINISH_RULES)])
        for i, stopping in enumerate(kt.decoding.STOPPING)
    ],
)
@pytest.mark.exact
def test_beam_search_rules_and_n_best(model, finish_rule, stopping):
    """Each finish rule and each stopping rule once (each is a program of its own to
    compile; the four combinations: tests/test_decoding.py). The 3-best's first is the best
    (another program: apart only where the replay, of the 3-best's search or the best's,
    meets a choice within `ties.SCORE_TOLERANCE`; all but one sentence alike, all 8 when
    written)."""
    rules = {"finish_rule": finish_rule, "stopping": stopping, **SHORT}
    best_ids, best_scores = beam_search(model, SOURCE, **rules)
    ids, scores = beam_search(model, SOURCE, num_hypotheses=3, **rules)
    assert ids.shape[:2] == scores.shape == (len(SOURCE), 3)
    assert np.all(np.diff(np.asarray(scores), axis=1) <= 0)
    firsts, first_scores = np.asarray(ids)[:, 0], np.asarray(scores)[:, 0]
    same = np.array(
        [ties.output_ids(a) == ties.output_ids(b) for a, b in zip(firsts, best_ids, strict=True)]
    )
    np.testing.assert_allclose(first_scores[same], np.asarray(best_scores)[same], rtol=1e-5)
    for row in np.flatnonzero(~same):
        next_logits = ties.teacher_forced(model, SOURCE[row])
        assert any(
            ties.ours_part_at_a_tie(
                next_logits,
                firsts[row],
                best_ids[row],
                _replay_settings(
                    model, row, finish_rule=finish_rule, stopping=stopping, num_hypotheses=n
                ),
            )
            for n in (1, 3)
        ), (row, firsts[row], best_ids[row])
    assert same.sum() >= len(SOURCE) - 1, same
    lengths = (np.asarray(best_ids) != 0).sum(axis=1)
    lp = ((5 + lengths) / 6) ** 0.6
    np.testing.assert_allclose(best_scores, _log_prob(model, SOURCE, best_ids) / lp, atol=1e-4)
    greedy_ids, greedy_scores = greedy_search(model, SOURCE, **SHORT)
    greedy_lengths = (np.asarray(greedy_ids) != 0).sum(axis=1)
    greedy_normalised = np.asarray(greedy_scores) / ((5 + greedy_lengths) / 6) ** 0.6
    if stopping == "exact" and finish_rule == "tensor2tensor":
        assert (np.asarray(best_scores) >= greedy_normalised - 1e-5).all()


@pytest.mark.exact
def test_sampling_is_seeded_and_top_k_one_is_greedy(model):
    first = sample(model, SOURCE, top_k=4, seed=1, **SHORT)
    np.testing.assert_array_equal(sample(model, SOURCE, top_k=4, seed=1, **SHORT)[0], first[0])
    flat = [sample(model, SOURCE, temperature=5.0, seed=s, **SHORT)[0] for s in (1, 2)]
    assert not np.array_equal(*flat)
    np.testing.assert_allclose(first[1], _log_prob(model, SOURCE, first[0]), atol=1e-4)
    greedy_ids, greedy_scores = greedy_search(model, SOURCE, **SHORT)
    ids, scores = sample(model, SOURCE, top_k=1, seed=3, **SHORT)
    # Another program than greedy's: apart only at two tokens within ties.SCORE_TOLERANCE.
    alike = _alike_but_at_ties(
        model, greedy_search, ids, greedy_ids, scores, greedy_scores, atol=1e-5
    )
    assert alike >= len(SOURCE) - 1, alike


@pytest.mark.parametrize("search", [greedy_search, beam_search])
@pytest.mark.exact
def test_jax_jit_decodes_as_eagerly(model, search):
    """A search inside the user's `jax.jit` (another program): apart only at a choice within
    `ties.SCORE_TOLERANCE` (`_alike_but_at_ties`), all but one sentence alike (all 8 when
    written)."""
    ids, scores = search(model, SOURCE, **SHORT)
    jitted_ids, jitted_scores = jax.jit(lambda source: search(model, source, **SHORT))(SOURCE)
    assert jitted_ids.shape == ids.shape
    alike = _alike_but_at_ties(model, search, jitted_ids, ids, jitted_scores, scores, atol=1e-5)
    assert alike >= len(SOURCE) - 1, alike


TENSORFLOW_SIDE = """
import json, sys
import numpy as np
import keras
import keras_transformer as kt

model = keras.saving.load_model(sys.argv[1])
source = np.load(sys.argv[2])
target = np.concatenate([np.full((len(source), 1), 2), source[:, :-1]], 1).astype("int32")
logits = model({"source_ids": source, "target_ids": target}, training=False)
greedy = kt.decoding.greedy_search(model, source, max_extra_length=5)[0]
beam = kt.decoding.beam_search(model, source, max_extra_length=5)[0]
np.savez(sys.argv[3], logits=logits, greedy=greedy, beam=beam)
print(json.dumps(keras.config.backend()))
"""


@pytest.mark.exact
def test_the_tensorflow_model_on_the_same_weights_gives_the_same_logits_and_ids(model, tmp_path):
    """The JAX-trained model saved, loaded by TensorFlow in a process of its own: logits
    within 1e-4 (float32 sums in another order), greedy and beam ids equal (on the batch and
    settings of the tests above, whose programs JAX has compiled), but where the search parts
    at a tie (tests/ties.py, two engines): greedy's first differing tokens within TIE, beam
    search's replay (our default rules) meeting a choice within LAST_BITS; all but one
    sentence alike (all 8 of both searches when written)."""
    from tests import ties

    source = SOURCE
    model.save(tmp_path / "model.keras")
    np.save(tmp_path / "source.npy", source)
    result = programs.snippet(
        TENSORFLOW_SIDE, tmp_path / "model.keras", tmp_path / "source.npy",
        tmp_path / "tensorflow.npz", env={"KERAS_BACKEND": "tensorflow"},
    )  # fmt: skip
    assert json.loads(result.stdout.splitlines()[-1]) == "tensorflow"
    tensorflow = np.load(tmp_path / "tensorflow.npz")
    target = np.concatenate([np.full((len(source), 1), BOS), source[:, :-1]], 1)
    logits = model({"source_ids": source, "target_ids": target}, training=False)
    np.testing.assert_allclose(logits, tensorflow["logits"], atol=1e-4)
    defaults = kt.decoding.DecodingSettings()
    for search, beam_size in ((greedy_search, 1), (beam_search, defaults.beam_size)):
        ours = np.asarray(search(model, source, **SHORT)[0])
        theirs = tensorflow[search.__name__.split("_")[0]]
        alike = 0
        for sentence, mine, other in zip(source, ours, theirs, strict=True):
            alike += ties.ends_with_eos(mine) == ties.ends_with_eos(other)
            assert ties.search_parts_at_a_tie(
                ties.teacher_forced(model, sentence),
                mine,
                other,
                tolerance=ties.TIE if beam_size == 1 else ties.LAST_BITS,
                beam_size=beam_size,
                length_penalty=defaults.length_penalty,
                limit=ties.length_limit(
                    sentence, SHORT["max_extra_length"], model.config.max_length
                ),
                finish_rule=defaults.finish_rule,
                stopping=defaults.stopping,
                ranking=defaults.ranking,
            ), (search.__name__, sentence, mine, other)
        assert alike >= len(source) - 1, (search.__name__, alike)


def test_the_tie_rule_needs_no_tensorflow():
    """tests/ties.py, which this pass's exact tests import, imports NumPy alone."""
    code = "import sys, tests.ties; print('tensorflow' in sys.modules)"
    result = programs.snippet(code, timeout=120)
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize("search", [greedy_search, beam_search, sample])
def test_a_target_prefix_is_an_argument_of_the_compiled_search(model, search):
    """The prefix is forced first on JAX too, passed to the compiled program as ids (a list
    or an array, not a setting it is compiled for): two prefixes of one shape, one program."""
    from keras_transformer import _backends as backends

    settings = {**SHORT, **({"seed": 1} if search is sample else {})}
    first = search(model, SOURCE, target_prefix=[5, 6], **settings)[0]
    programs = len(backends._COMPILED[model])
    second = search(model, SOURCE, target_prefix=np.array([7, 8]), **settings)[0]
    assert (np.asarray(first)[:, :2] == [5, 6]).all()
    assert (np.asarray(second)[:, :2] == [7, 8]).all()
    assert len(backends._COMPILED[model]) == programs

"""`kt.decoding.generate` on a decoder-only language model: each row of a batch of prompts
of different lengths generates what it generates alone (greedy and beam, eager and under
XLA), the cached steps give the uncached model's log-probabilities, sampling's settings,
stop and never ids, length limits and errors. The same on JAX: tests/jax/test_generate.py.

The `exact` tests compare two computations on the seeded random model (the same weights on
every CPU, but two computations' last bits are each CPU's own): ids equal, but a row where
the two part at a choice within `ties.SCORE_TOLERANCE` (`alike_but_at_ties`, in
tests/language_models.py) or a draw whose uniform lies within it of a boundary
(`_drawn_alike_but_at_boundaries`), all but one row alike (all when written); scores to
1e-5, and to 1e-4 against the full model's forward pass.
"""

from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.decoding import generate
from keras_transformer.decoding.language_model import prompt_tensor
from tests import ties
from tests.language_models import PROMPTS, alike_but_at_ties, language_model, log_prob_of

SHORT = {"max_new_tokens": 6}


@pytest.fixture(scope="module")
def model():
    return language_model()


def _alone(model, **settings):
    """Each prompt generated alone: `(ids, scores)` stacked."""
    results = [generate(model, [prompt], **settings) for prompt in PROMPTS]
    return tuple(np.concatenate([np.asarray(r[i]) for r in results]) for i in range(2))


XLA_SETTINGS = [
    ("greedy", {}),
    ("beam", {"beam_size": 3}),
    ("beam", {"beam_size": 3, "num_hypotheses": 2, "stopping": "early"}),
]


@pytest.mark.parametrize("method, extra", XLA_SETTINGS, ids=["greedy", "beam", "beam-n-best"])
@pytest.mark.exact
def test_each_row_of_a_mixed_batch_generates_what_it_generates_alone(model, method, extra):
    settings = {**SHORT, "method": method, **extra}
    ids, scores = generate(model, PROMPTS, **settings)
    alone_ids, alone_scores = _alone(model, **settings)
    assert ids.shape == alone_ids.shape
    alike = alike_but_at_ties(model, ids, alone_ids, scores, alone_scores, **settings)
    assert alike >= len(PROMPTS) - 1, alike


@pytest.mark.parametrize("method, extra", XLA_SETTINGS[::2], ids=["greedy", "beam-n-best"])
@pytest.mark.exact
def test_under_xla_with_unknown_shapes_each_row_is_as_alone(model, method, extra):
    settings = {**SHORT, "method": method, **extra}
    compiled = tf.function(
        lambda prompts: generate(model, prompts, **settings),
        jit_compile=True,
        autograph=False,
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
    )
    batch = prompt_tensor(PROMPTS)  # (3, 6)
    ids, scores = compiled(tf.constant(batch))
    # Alone, each in a batch of one of the same width (one program for the three; alone and
    # unpadded: the eager test above).
    alone = [compiled(tf.constant(batch[row : row + 1])) for row in range(len(PROMPTS))]
    alone_ids, alone_scores = (np.concatenate([a[i] for a in alone]) for i in range(2))
    assert ids.shape == alone_ids.shape
    alike = alike_but_at_ties(model, ids, alone_ids, scores, alone_scores, **settings)
    assert alike >= len(PROMPTS) - 1, alike
    eager_ids, eager_scores = generate(model, PROMPTS, **settings)
    assert ids.shape == eager_ids.shape
    alike = alike_but_at_ties(model, ids, eager_ids, scores, eager_scores, **settings)
    assert alike >= len(PROMPTS) - 1, alike


def test_a_plain_tf_function_traces_generate_without_autograph(model, as_written):
    """As the translation searches (tests/test_decoding.py): `generate` is left as it is by
    AutoGraph, and so is every function it calls, in a user's `tf.function`."""
    from keras_transformer.decoding import language_model as module

    calls = as_written(module, "_language_model_decoder")
    traced = tf.function(lambda p: generate(model, p, method="beam", **SHORT))
    ids, _ = traced(tf.constant(prompt_tensor(PROMPTS)))
    assert ids.shape[0] == len(PROMPTS) and calls == [True]


@pytest.mark.parametrize("method", ["greedy", "beam"])
@pytest.mark.exact
def test_cached_steps_give_the_uncached_models_log_probabilities(model, method):
    settings = {**SHORT, "method": method, "beam_size": 3, "length_penalty": 0.0}
    ids, scores = generate(model, PROMPTS, **settings)
    full_ids, full_scores = generate(model, PROMPTS, use_cache=False, **settings)
    assert ids.shape == full_ids.shape
    alike = alike_but_at_ties(model, ids, full_ids, scores, full_scores, **settings)
    assert alike >= len(PROMPTS) - 1, alike
    # And the user's own model, called on each prompt + continuation alone, without padding.
    np.testing.assert_allclose(scores, log_prob_of(model, PROMPTS, ids), atol=1e-4)


@pytest.mark.exact
def test_beam_scores_are_log_probabilities_over_the_length_penalty_as_the_guide_says(model):
    """generate's greedy scores are log-probabilities; beam search's are divided by the
    length penalty it ranks by (the searches' own rule): the decoding guide's generate
    paragraph (once README.md's) says both."""
    ids, scores = generate(model, PROMPTS, method="beam", beam_size=3, length_penalty=0.6, **SHORT)
    lengths = (np.asarray(ids) != 0).sum(axis=1)  # the continuation, stop token included
    penalty = ((5.0 + lengths) / 6.0) ** 0.6
    np.testing.assert_allclose(scores * penalty, log_prob_of(model, PROMPTS, ids), atol=1e-4)
    guide = Path(__file__).resolve().parents[1] / "docs" / "guides" / "decoding.md"
    text = guide.read_text(encoding="utf-8")
    paragraph = text[text.index("It returns the continuations") :].split("\n\n")[0]
    said = " ".join(paragraph.split())
    assert "log-probabilities" in said
    assert 'beam search (`method="beam"`) divides by the length penalty' in said


@pytest.mark.exact
def test_a_ragged_tensor_a_padded_array_and_wider_padding_give_the_same(model):
    ids, scores = generate(model, PROMPTS, **SHORT)
    ragged = tf.ragged.constant(PROMPTS, dtype=tf.int32)
    wider = np.pad(prompt_tensor(PROMPTS), [[0, 0], [0, 3]])
    for prompts in (ragged, wider):
        other_ids, other_scores = generate(model, prompts, **SHORT)
        assert other_ids.shape == ids.shape
        alike = alike_but_at_ties(model, other_ids, ids, other_scores, scores, **SHORT)
        assert alike >= len(PROMPTS) - 1, alike


def _drawn_alike_but_at_boundaries(model, ids, other_ids, *, seed):
    """Two computations of `generate(model, PROMPTS, method="sample", seed=seed)`: each
    row's draws equal, but where at the first step they part the step's uniform lies within
    `ties.SCORE_TOLERANCE` of a boundary of the cumulative probabilities between the two
    tokens (`ties.rows_drawn_alike_but_at_boundaries`, the distribution of the model's
    forward pass): there the two computations' last bits may draw either side. Returns how
    many rows are alike."""

    def draw_at(step):
        """The search's sampler at `step`: its seed is `(seed, step)`."""

        def draw(logits):
            return tf.random.stateless_categorical(logits, 1, [seed, step], tf.int32)[:, 0]

        return draw

    alike = ties.rows_drawn_alike_but_at_boundaries(
        lambda row: ties.prompted(model, PROMPTS[row]),
        draw_at,
        ids,
        other_ids,
        temperature=1.0,
        never=(ties.PAD_ID,),
    )
    return int(alike.sum())


@pytest.mark.exact
def test_sampling_is_seeded_ignores_padding_and_narrows_to_greedy(model):
    """A seed draws the same twice (one computation) and under wider padding (another: it
    may draw apart only at a boundary, `_drawn_alike_but_at_boundaries`); the narrowest
    settings draw greedy's tokens (another computation: apart only at two tokens within
    `ties.SCORE_TOLERANCE`); all but one row alike (all when written)."""
    settings = {**SHORT, "method": "sample", "seed": 7}
    first, scores = generate(model, PROMPTS, **settings)
    np.testing.assert_array_equal(generate(model, PROMPTS, **settings)[0], first)
    wider = np.pad(prompt_tensor(PROMPTS), [[0, 0], [0, 2]])
    alike = _drawn_alike_but_at_boundaries(
        model, generate(model, wider, **settings)[0], first, seed=7
    )
    assert alike >= len(PROMPTS) - 1, alike
    np.testing.assert_allclose(scores, log_prob_of(model, PROMPTS, first), atol=1e-4)
    greedy, _ = generate(model, PROMPTS, **SHORT)
    for narrow in ({"top_k": 1}, {"top_p": 1e-6}, {"temperature": 1e-4}):
        alike = alike_but_at_ties(model, generate(model, PROMPTS, **settings, **narrow)[0], greedy)
        assert alike >= len(PROMPTS) - 1, (narrow, alike)
    draws = {tuple(np.asarray(generate(model, PROMPTS, **SHORT, method="sample", seed=s)[0])[0])
             for s in range(6)}  # fmt: skip
    assert len(draws) > 1


@pytest.mark.exact
def test_top_p_samples_only_from_the_nucleus(model):
    # At the first step of prompt 0: the fewest likeliest tokens holding 60% of the mass.
    log_probs = np.asarray(keras.ops.log_softmax(model(np.array([PROMPTS[0]]))[0, -1]))
    order = np.argsort(-log_probs)
    mass = np.cumsum(np.exp(log_probs[order]))
    nucleus = set(order[: int(np.searchsorted(mass, 0.6)) + 1].tolist())
    firsts = {
        int(np.asarray(generate(model, [PROMPTS[0]], max_new_tokens=1, method="sample",
                                top_p=0.6, seed=s)[0])[0, 0])
        for s in range(24)
    }  # fmt: skip
    assert firsts <= nucleus and len(nucleus) > 1


def test_stop_ids_end_a_row_and_never_ids_are_never_generated(model):
    ids = np.asarray(generate(model, PROMPTS, **SHORT, stop_ids=())[0])
    assert (ids != 0).all()  # no stop token: every row runs to its limit
    stop = int(ids[0, 2])
    stopped = np.asarray(generate(model, PROMPTS, **SHORT, stop_ids=(stop, 99))[0])
    for row, full in zip(stopped, ids, strict=True):
        hits = np.flatnonzero(full == stop)
        end = hits[0] + 1 if hits.size else len(full)
        np.testing.assert_array_equal(row[:end], full[:end])
        assert (row[end:] == 0).all()
    banned = tuple(int(i) for i in np.unique(ids))
    avoided = np.asarray(generate(model, PROMPTS, **SHORT, never_ids=banned, stop_ids=())[0])
    assert not np.isin(avoided, banned).any() and (avoided != 0).all()


def test_a_row_ends_where_the_positions_end(model):
    # max_length 16: the 9-token prompt has room for 7 tokens, the others for all 10.
    long_prompt = [2, *range(10, 18)]
    ids, _ = generate(model, [long_prompt, PROMPTS[1]], max_new_tokens=10, stop_ids=())
    assert (np.asarray(ids) != 0).sum(axis=1).tolist() == [7, 10]
    with pytest.raises(ValueError, match="leave no room under the embedding's max_length=16"):
        generate(model, [list(range(2, 18))], max_new_tokens=1)


@pytest.mark.exact
def test_padding_up_to_the_positional_limit_and_the_uncached_reference_there(model):
    """Prompts padded to the embedding's whole max_length still leave room (the limit is
    on each prompt's tokens, not the buffer's width); the uncached reference, whose buffer
    holds padding slots past the table's length, gives the cached ids up to each row's end
    (`alike_but_at_ties`: apart only at a choice within `ties.SCORE_TOLERANCE`, all but
    one row alike, all when written)."""
    ids, _ = generate(model, PROMPTS, max_new_tokens=12, stop_ids=())
    padded = np.pad(prompt_tensor(PROMPTS), [[0, 0], [0, 16 - 6]])  # width 16 = max_length
    padded_ids = generate(model, padded, max_new_tokens=12, stop_ids=())[0]
    uncached, _ = generate(model, PROMPTS, max_new_tokens=12, stop_ids=(), use_cache=False)
    for other in (padded_ids, uncached):  # each another computation: apart only at a tie
        assert other.shape == ids.shape
        assert alike_but_at_ties(model, other, ids, stop_ids=()) >= len(PROMPTS) - 1
    assert (np.asarray(ids) != 0).sum(axis=1).tolist() == [10, 12, 12]  # 16 - 6 for the first


def test_no_temperature_draws_an_excluded_token(model):
    """Excluded tokens (padding, never_ids) stay excluded however flat the temperature makes
    the rest; the smallest temperatures are greedy; none outside float32's normal range."""
    hot = {"max_new_tokens": 6, "method": "sample", "never_ids": (1, 2), "stop_ids": (), "seed": 1}
    ids = np.asarray(generate(model, [[2, 11]] * 32, temperature=1e9, **hot)[0])
    assert not np.isin(ids, [0, 1, 2]).any() and len(np.unique(ids)) > 10  # near uniform
    greedy, _ = generate(model, PROMPTS, max_new_tokens=6, never_ids=(1, 2), stop_ids=())
    cold = generate(model, PROMPTS, **{**hot, "temperature": 1.2e-38})[0]
    np.testing.assert_array_equal(cold, greedy)
    for temperature, message in ((float("inf"), "must be a finite number"), (1e-39, "below")):
        with pytest.raises(ValueError, match=message):
            generate(model, PROMPTS, **{**hot, "temperature": temperature})


def test_prompts_as_tensors_are_checked_as_lists_are(model):
    with pytest.raises(ValueError, match="prompt 0 has a token after padding"):
        generate(model, tf.constant([[0, 0, 2, 11]]))
    with pytest.raises(ValueError, match="prompt 1 has no token"):
        generate(model, tf.constant([[2, 11], [0, 0]]))
    with pytest.raises(ValueError, match="prompt 1 has no token"):
        generate(model, tf.ragged.constant([[2, 11], []]))
    with pytest.raises(ValueError, match="prompt 0 holds the padding id 0"):
        generate(model, tf.ragged.constant([[2, 0, 11]]))
    ids, scores = generate(model, [], max_new_tokens=4)  # no prompts: nothing to generate
    assert ids.shape == (0, 4) and scores.shape == (0,)


def test_bad_models_prompts_and_settings_are_refused(model):
    translator = kt.build_transformer(kt.TransformerConfig.preset("tiny", vocab_size=20))
    with pytest.raises(ValueError, match="has encoder-decoder attention.*greedy_search"):
        generate(translator, PROMPTS)
    with pytest.raises(ValueError, match="prompt 1 has a token after padding"):
        generate(model, [[2, 5, 0], [2, 0, 6]])
    with pytest.raises(ValueError, match="prompt 0 has no token"):
        generate(model, [[], [2, 5]])
    with pytest.raises(ValueError, match="method='nucleus' must be one of"):
        generate(model, PROMPTS, method="nucleus")
    with pytest.raises(ValueError, match="top_p=0 must be in"):
        generate(model, PROMPTS, method="sample", top_p=0)
    with pytest.raises(ValueError, match="max_new_tokens=0 must be >= 1"):
        generate(model, PROMPTS, max_new_tokens=0)
    with pytest.raises(ValueError, match="beam_size=0"):
        generate(model, PROMPTS, method="beam", beam_size=0)

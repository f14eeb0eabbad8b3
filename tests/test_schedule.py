"""WarmupSchedule: the formula of paper 5.3 at each update, as the optimizer applies it (with
and without gradient accumulation), and serialization."""

import keras
import numpy as np
import pytest

import keras_transformer as kt


def paper_rate(step, d_model, warmup):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@pytest.mark.parametrize("d_model, warmup", [(512, 4000), (128, 100)])
@pytest.mark.parametrize("step", [1, 10, 999, 4000, 4001, 10_000, 100_000])
def test_equals_the_formula(step, d_model, warmup):
    """Keras passes the count of updates already applied: `schedule(step - 1)` is update step's."""
    schedule = kt.WarmupSchedule(d_model, warmup_steps=warmup)
    expected = paper_rate(step, d_model, warmup)
    np.testing.assert_allclose(float(schedule(step - 1)), expected, rtol=1e-6)


def test_peaks_at_the_end_of_warmup_and_scales():
    schedule = kt.WarmupSchedule(512, warmup_steps=4000, scale=2.0)
    rates = [float(schedule(update - 1)) for update in (3999, 4000, 4001)]
    assert rates[1] == max(rates)
    np.testing.assert_allclose(rates[1], 2 * 512**-0.5 * 4000**-0.5, rtol=1e-6)


def test_step_zero_is_not_a_zero_rate():
    schedule = kt.WarmupSchedule(512)
    assert float(schedule(0)) == pytest.approx(paper_rate(1, 512, 4000))


def test_serializes_with_the_optimizer():
    schedule = kt.WarmupSchedule(256, warmup_steps=123, scale=0.5)
    optimizer = keras.optimizers.Adam(schedule, beta_2=0.98, epsilon=1e-9)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    saved_rate = restored.get_config()["learning_rate"]
    assert saved_rate["registered_name"] == "keras_transformer>WarmupSchedule"
    assert saved_rate["config"] == schedule.get_config()
    assert float(restored.learning_rate) == float(schedule(0))  # iterations = 0
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert float(revived(50)) == float(schedule(50))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(d_model=0), "d_model=0"),
        (dict(d_model=8, warmup_steps=0), "warmup_steps=0"),
        (dict(d_model=8, scale=-1.0), "scale=-1.0"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        kt.WarmupSchedule(**kwargs)


@pytest.mark.parametrize("accumulation", [1, 2, 8])
def test_accumulation_keeps_the_paper_rate_per_update(accumulation):
    schedule = kt.WarmupSchedule(512, warmup_steps=4000, accumulation_steps=accumulation)
    for update in (1, 100, 4000, 20_000):
        # Keras takes update u at its batch count N * u - 1.
        batches = update * accumulation - 1
        np.testing.assert_allclose(
            float(schedule(batches)), paper_rate(update, 512, 4000), rtol=1e-6
        )


@pytest.mark.parametrize("accumulation", [1, 3])
def test_the_rate_the_optimizer_applies_at_update_u_is_the_schedule_at_u(accumulation):
    """Through Keras's optimizer: plain SGD on a weight whose gradient is always 1 moves it by
    exactly the rate it applied, once per update (every `accumulation` batches)."""
    d_model, warmup, updates = 64, 5, 12
    schedule = kt.WarmupSchedule(d_model, warmup_steps=warmup, accumulation_steps=accumulation)
    optimizer = keras.optimizers.SGD(
        schedule, gradient_accumulation_steps=accumulation if accumulation > 1 else None
    )
    weight = keras.Variable(np.zeros((), "float64"), dtype="float64")
    applied, last = [], 0.0
    for batch in range(updates * accumulation):
        optimizer.apply([keras.ops.ones((), "float64")], [weight])
        if (batch + 1) % accumulation == 0:
            applied.append(last - float(weight.numpy()))
            last = float(weight.numpy())
        else:
            assert float(weight.numpy()) == last  # no update between accumulation batches
    expected = [paper_rate(u, d_model, warmup) for u in range(1, updates + 1)]
    np.testing.assert_allclose(applied, expected, rtol=1e-5)
    assert int(optimizer.iterations.numpy()) == updates


def test_the_trainer_gives_the_schedule_its_accumulation():
    from trainers.experiment import load_experiment
    from trainers.train import _compiled_model

    overrides = ["training.gradient_accumulation_steps=4", "training.warmup_steps=7"]
    experiment = load_experiment("trainers/configs/demo.yaml", overrides).with_vocab_sizes(50, 50)
    optimizer = _compiled_model(experiment, jit_compile=False).optimizer
    assert optimizer.gradient_accumulation_steps == 4
    schedule = optimizer.get_config()["learning_rate"]
    assert schedule["registered_name"] == "keras_transformer>WarmupSchedule"
    assert (schedule["config"]["accumulation_steps"], schedule["config"]["warmup_steps"]) == (4, 7)

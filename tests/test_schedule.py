"""WarmupSchedule: the formula of paper 5.3, and serialization."""

import keras
import numpy as np
import pytest

import keras_transformer as kt


def paper_rate(step, d_model, warmup):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@pytest.mark.parametrize("d_model, warmup", [(512, 4000), (128, 100)])
@pytest.mark.parametrize("step", [1, 10, 999, 4000, 4001, 10_000, 100_000])
def test_equals_the_formula(step, d_model, warmup):
    schedule = kt.WarmupSchedule(d_model, warmup_steps=warmup)
    np.testing.assert_allclose(float(schedule(step)), paper_rate(step, d_model, warmup), rtol=1e-6)


def test_peaks_at_the_end_of_warmup_and_scales():
    schedule = kt.WarmupSchedule(512, warmup_steps=4000, scale=2.0)
    rates = [float(schedule(s)) for s in (3999, 4000, 4001)]
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
    schedule = kt.schedule.warmup_schedule_for_accumulation(
        512, warmup_steps=4000, scale=1.0, accumulation_steps=accumulation
    )
    for update in (1, 100, 4000, 20_000):
        np.testing.assert_allclose(
            float(schedule(update * accumulation)), paper_rate(update, 512, 4000), rtol=1e-6
        )

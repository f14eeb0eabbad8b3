"""The learning-rate schedule of the paper (section 5.3)."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)  (paper 5.3, eq. 3).

    The rate rises linearly for `warmup_steps` steps, then decays with the inverse square root
    of the step. `step` is the optimizer's iteration count; step 0 (before the first update)
    uses step 1, so the first update is not taken with a zero rate.

    Args:
        d_model: int. Model width; the paper's schedule is scaled by d_model^-0.5.
        warmup_steps: int. Length of the linear warmup. Defaults to 4000 (the paper's).
        scale: float. Multiplier on the whole schedule (1.0 in the paper). Defaults to 1.0.

    Example:
    >>> schedule = WarmupSchedule(d_model=512, warmup_steps=4000)
    >>> round(float(schedule(4000)), 6)  # the peak: 512^-0.5 * 4000^-0.5
    0.000699
    >>> optimizer = keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0):
        if d_model < 1:
            raise ValueError(f"d_model={d_model} must be >= 1")
        if warmup_steps < 1:
            raise ValueError(f"warmup_steps={warmup_steps} must be >= 1")
        if scale <= 0:
            raise ValueError(f"scale={scale} must be > 0")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        step = ops.maximum(ops.cast(step, "float32"), 1.0)
        decay = ops.rsqrt(step)
        warmup = step * float(self.warmup_steps) ** -1.5
        return self.scale * float(self.d_model) ** -0.5 * ops.minimum(decay, warmup)

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


def warmup_schedule_for_accumulation(
    d_model: int, warmup_steps: int = 4000, scale: float = 1.0, accumulation_steps: int = 1
) -> WarmupSchedule:
    """The paper's schedule counted in optimizer updates, for gradient accumulation.

    With `gradient_accumulation_steps=N`, Keras's optimizer evaluates its learning-rate
    schedule at every batch, N per update. Stretching the warmup N times and scaling the rate
    by sqrt(N) gives, at batch N * u, exactly the paper's rate for update u:
    sqrt(N) d^-0.5 min((N u)^-0.5, N u (N w)^-1.5) = d^-0.5 min(u^-0.5, u w^-1.5).
    """
    if accumulation_steps < 1:
        raise ValueError(f"accumulation_steps={accumulation_steps} must be >= 1")
    return WarmupSchedule(
        d_model,
        warmup_steps=warmup_steps * accumulation_steps,
        scale=scale * accumulation_steps**0.5,
    )

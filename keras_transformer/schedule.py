"""The learning-rate schedule of the paper (section 5.3)."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale * d_model^-0.5 * min(u^-0.5, u * warmup_steps^-1.5)  (paper 5.3, eq. 3).

    The rate rises linearly for `warmup_steps` updates, then decays with the inverse square
    root of the update number u (1 for the first update, as the paper's step_num).

    Keras calls a schedule with the optimizer's count of what it has already done (0 for the
    first update, as its own schedules assume), so `schedule(step)` is the rate of update
    u = step + 1. With gradient accumulation over N batches, Keras counts batches and takes an
    update at batches N - 1, 2N - 1, ...: set `accumulation_steps=N` and u = step // N + 1, so
    update u still gets the paper's rate for u.

    Args:
        d_model: int. Model width; the paper's schedule is scaled by d_model^-0.5.
        warmup_steps: int. Length of the linear warmup, in updates. Defaults to 4000 (the
            paper's).
        scale: float. Multiplier on the whole schedule (1.0 in the paper). Defaults to 1.0.
        accumulation_steps: int. Batches per update, as the optimizer's
            `gradient_accumulation_steps` (1 without accumulation). Defaults to 1.

    Examples:
        >>> import keras
        >>> from keras_transformer import WarmupSchedule
        >>> schedule = WarmupSchedule(d_model=512, warmup_steps=4000)
        >>> round(float(schedule(3999)), 6)  # update 4000, the peak: 512^-0.5 * 4000^-0.5
        0.000699
        >>> optimizer = keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    """

    def __init__(
        self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0, accumulation_steps=1
    ):
        if d_model < 1:
            raise ValueError(f"d_model={d_model} must be >= 1")
        if warmup_steps < 1:
            raise ValueError(f"warmup_steps={warmup_steps} must be >= 1")
        if scale <= 0:
            raise ValueError(f"scale={scale} must be > 0")
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps={accumulation_steps} must be >= 1")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale
        self.accumulation_steps = accumulation_steps

    def __call__(self, step):
        # In the step's own integer type (the optimizer's int64 count on TensorFlow, int32 on
        # JAX, where asking for int64 warns and truncates).
        step = ops.convert_to_tensor(step)
        update = ops.floor_divide(step, self.accumulation_steps) + 1
        update = ops.cast(update, "float32")
        decay = ops.rsqrt(update)
        warmup = update * float(self.warmup_steps) ** -1.5
        return self.scale * float(self.d_model) ** -0.5 * ops.minimum(decay, warmup)

    def get_config(self):
        return {
            "d_model": self.d_model,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
            "accumulation_steps": self.accumulation_steps,
        }


__all__ = ["WarmupSchedule"]

"""The Trainer's optimizer: Adam, loss scaling under float16, gradient accumulation.

Loss scaling (only under mixed_float16; bfloat16 has float32's range and needs none):

- dynamic (default): Keras' `LossScaleOptimizer` starts at `initial` (2^15), halves the
  scale and skips the step when a gradient is inf/NaN, and doubles it after
  `growth_steps` (2000) consecutive finite steps;
- fixed: the loss is always multiplied by `initial` and the gradients divided by it; no
  step is skipped.

Gradient accumulation (`grad_accum_steps` = N >= 2) applies the mean gradient of N
consecutive batches once every N batches: the update of an N times larger batch with the
memory of one (Keras' `gradient_accumulation_steps`).

Example:

    optimizer = build_optimizer(1e-3, "mixed_float16", LossScaleSection(), grad_accum_steps=4)
    model.compile(optimizer=optimizer, auto_scale_loss=False, ...)
"""

from __future__ import annotations

import keras

from components.trainer.config import LossScaleSection


def build_optimizer(
    learning_rate: float,
    policy_name: str,
    loss_scale: LossScaleSection | None = None,
    grad_accum_steps: int = 1,
) -> keras.optimizers.Optimizer:
    """Returns Adam, wrapped for loss scaling when `policy_name` is mixed_float16.

    Compile the model with `auto_scale_loss=False` so Keras does not wrap it a second time.

    Args:
        learning_rate: Adam's learning rate (already scaled for the replica count).
        policy_name: the dtype policy the model was built under.
        loss_scale: loss scaling under mixed_float16; ignored for other policies.
        grad_accum_steps: 1 = no accumulation; N >= 2 = update every N batches.

    Raises:
        ValueError: naming `grad_accum_steps` when it is below 1.
    """
    if int(grad_accum_steps) < 1:
        raise ValueError(
            f"trainer.grad_accum_steps must be >= 1. Received: grad_accum_steps={grad_accum_steps}"
        )
    loss_scale = loss_scale or LossScaleSection()
    accumulate = int(grad_accum_steps) if int(grad_accum_steps) > 1 else None
    if policy_name == "mixed_float16" and not loss_scale.dynamic:
        return keras.optimizers.Adam(
            learning_rate,
            loss_scale_factor=float(loss_scale.initial),
            gradient_accumulation_steps=accumulate,
        )
    optimizer = keras.optimizers.Adam(learning_rate, gradient_accumulation_steps=accumulate)
    if policy_name != "mixed_float16":
        return optimizer
    return keras.optimizers.LossScaleOptimizer(
        optimizer,
        initial_scale=float(loss_scale.initial),
        dynamic_growth_steps=int(loss_scale.growth_steps),
    )


def current_loss_scale(optimizer: keras.optimizers.Optimizer) -> float | None:
    """The loss scale in use now: the dynamic scale, the fixed factor, or None (unscaled)."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        if not optimizer.built:
            return float(optimizer.initial_scale)
        return float(keras.ops.convert_to_numpy(optimizer.dynamic_scale))
    factor = getattr(optimizer, "loss_scale_factor", None)
    return None if factor is None else float(factor)


def skips_nonfinite_steps(optimizer: keras.optimizers.Optimizer) -> bool:
    """True when the optimizer skips steps with inf/NaN gradients (dynamic loss scaling)."""
    return isinstance(optimizer, keras.optimizers.LossScaleOptimizer)

"""The model that trains: built from the registry under the dtype policy, linted, wrapped in
the instrumented train step, and compiled with the Trainer's optimizer, loss and metric.

Both the Trainer and the autotune probe build their models here, so every timed cell is the
model that would train.

    keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    with strategy.scope():
        model = build_training_model("seed_cnn", {}, (16, 16, 1), 10, "mixed_bfloat16")
        compile_training_model(model, "classification", 1e-3, "mixed_bfloat16",
                               LossScaleSection(), grad_accum_steps=1, xla=False)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
from absl import logging

from components.trainer.config import LossScaleSection
from components.trainer.lint import check_mixed_precision
from components.trainer.optimizer import build_optimizer
from components.trainer.precision import (
    apply_recurrent_precision,
    find_recurrent_layers,
    recurrent_precision_warning,
)
from components.trainer.recipe import SparseCrossentropyWithSmoothing
from components.trainer.training_model import TrainingModel
from models import CLASSIFICATION, build_model
from models.segmentation import DiceBCELoss, DiceCoefficient


def build_training_model(
    model_name: str,
    model_params: Mapping[str, Any],
    input_shape: tuple[int, ...],
    num_classes: int,
    policy: str,
    recurrent_precision: str = "policy",
) -> TrainingModel:
    """Builds the registry model under the current dtype policy, lints it, wraps it.

    Call inside the strategy's scope with `policy` set as the global dtype policy. Under
    mixed_float16, recurrent layers are named in a warning, or kept in float32 with
    `recurrent_precision="float32"` (see precision.apply_recurrent_precision).

    Raises:
        MixedPrecisionLintError: naming the layer, if the model is unsafe under `policy`.
    """
    model = build_model(model_name, input_shape, num_classes, **dict(model_params))
    check_mixed_precision(model, policy)
    warning = recurrent_precision_warning(find_recurrent_layers(model), policy,
                                          recurrent_precision)
    if warning:
        (logging.warning if warning.startswith("WARNING") else logging.info)("Trainer: %s",
                                                                           warning)
    apply_recurrent_precision(model, policy, recurrent_precision)
    return TrainingModel.wrap(model)


def compile_training_model(
    model: keras.Model,
    task: str,
    learning_rate: float | keras.optimizers.schedules.LearningRateSchedule,
    policy: str,
    loss_scale: LossScaleSection,
    grad_accum_steps: int,
    xla: bool,
    label_smoothing: float = 0.0,
) -> None:
    """Compiles with Adam (loss-scaled under float16, accumulating when asked) at
    `learning_rate` (a float or a schedule, recipe.py), the task's loss (with
    `label_smoothing` for classifiers) and metric, and XLA on or off. Call inside the
    strategy's scope."""
    if task == CLASSIFICATION:
        loss = (SparseCrossentropyWithSmoothing(label_smoothing) if label_smoothing
                else keras.losses.SparseCategoricalCrossentropy())
        metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    else:
        loss, metrics = DiceBCELoss(), [DiceCoefficient()]
    model.compile(
        optimizer=build_optimizer(learning_rate, policy, loss_scale, grad_accum_steps),
        loss=loss,
        metrics=metrics,
        jit_compile=xla,
        auto_scale_loss=False,  # build_optimizer already wrapped it when needed
    )


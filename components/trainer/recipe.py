"""The training recipe: the learning rate over the run, label smoothing, early stopping, and
the fine-tune plan with `auto` resolved.

- `trainer.lr_schedule`: `cosine` (default) decays the learning rate per step to 0 at the
  last step (Loshchilov & Hutter's SGDR without restarts, NVIDIA's ResNet-50 recipe);
  `constant` keeps it. Either starts with a linear warm-up of `trainer.warmup_epochs`,
  which `auto` makes 10 % of the epochs (at most 5; a short run warms up for a fraction
  of an epoch rather than a third of its steps) under cosine or when the learning rate was
  scaled up for a larger batch (`batch_size: auto`, `scale_learning_rate`; Goyal et al.
  2017), else 0.
- `trainer.label_smoothing`: cross-entropy against smoothed one-hot labels.
- `trainer.early_stopping`: Keras' EarlyStopping on `val_loss`, restoring the weights of
  the epoch with the lowest eval loss at the end (whether it stopped early or not).
- `trainer.fine_tune: auto`: with pretrained weights, a third of the epochs train the head
  on the frozen backbone, then the top quarter of the backbone's blocks unfreezes at
  `learning_rate_factor` times the schedule's rate; without, no freezing.

The schedule is a function of the optimizer's step (Keras evaluates it in the train step),
so it works under every strategy and precision; after the fine-tune recompile the new
optimizer continues from the same step (`start_step`), scaled by the factor.

    plan = LearningRatePlan.of(trainer, runtime.learning_rate, lr_scaled_up, steps_per_epoch)
    optimizer = build_optimizer(plan.schedule(), policy, ...)
"""

from __future__ import annotations

import dataclasses
import math

import keras

from components.trainer.config import AUTO, FineTuneSection, TrainerSection

_WARMUP_SHARE = 0.1
_WARMUP_EPOCHS_MAX = 5


@keras.saving.register_keras_serializable(package="mptfx")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from 0 to `peak` over `warmup_steps`, then cosine decay to 0 at
    `total_steps` (or constant); evaluated at `step + start_step`."""

    def __init__(self, peak: float, warmup_steps: int, total_steps: int, decay: str,
                 start_step: int = 0) -> None:
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = max(int(total_steps), 1)
        self.decay = decay
        self.start_step = int(start_step)

    def __call__(self, step: object) -> object:
        ops = keras.ops
        step = ops.cast(step, "float32") + float(self.start_step)
        warmup = float(max(self.warmup_steps, 1))
        warming = self.peak * (step + 1.0) / warmup
        if self.decay == "cosine":
            span = float(max(self.total_steps - self.warmup_steps, 1))
            progress = ops.clip((step - float(self.warmup_steps)) / span, 0.0, 1.0)
            after = 0.5 * self.peak * (1.0 + ops.cos(math.pi * progress))
        else:
            after = ops.full_like(step, self.peak)
        return ops.where(step < float(self.warmup_steps), warming, after)

    def get_config(self) -> dict:
        return {"peak": self.peak, "warmup_steps": self.warmup_steps,
                "total_steps": self.total_steps, "decay": self.decay,
                "start_step": self.start_step}


@dataclasses.dataclass(frozen=True)
class LearningRatePlan:
    """The learning rate over the whole run.

    Attributes:
        peak: the learning rate after warm-up (already scaled for the batch and replicas).
        schedule: "constant" or "cosine".
        warmup_epochs: the linear warm-up, in epochs.
        warmup_reason: why that warm-up (the key, or what `auto` saw).
        steps_per_epoch: optimizer steps (batches) per epoch.
        epochs: epochs in the run.
    """

    peak: float
    schedule: str
    warmup_epochs: float
    warmup_reason: str
    steps_per_epoch: int
    epochs: int

    @classmethod
    def of(cls, trainer: TrainerSection, peak: float, scaled_up: bool,
           steps_per_epoch: int) -> LearningRatePlan:
        """The plan of `trainer` at learning rate `peak`; `scaled_up`: the rate was raised
        for a larger batch, which wants a warm-up."""
        warmup, reason = resolve_warmup(trainer.warmup_epochs, trainer.lr_schedule,
                                        trainer.epochs, scaled_up)
        return cls(float(peak), trainer.lr_schedule, warmup, reason, max(1, steps_per_epoch),
                   trainer.epochs)

    @property
    def warmup_steps(self) -> int:
        """Steps of the linear warm-up."""
        return int(round(self.warmup_epochs * self.steps_per_epoch))

    def learning_rate(self, factor: float = 1.0,
                      start_epoch: int = 0) -> float | WarmupSchedule:
        """What the optimizer takes: a float when nothing changes over the run, else the
        schedule, `factor` times the plan's, continuing from `start_epoch`."""
        if self.schedule == "constant" and not self.warmup_steps:
            return self.peak * factor
        return WarmupSchedule(self.peak * factor, self.warmup_steps,
                              self.steps_per_epoch * self.epochs, self.schedule,
                              start_step=start_epoch * self.steps_per_epoch)

    def to_dict(self) -> dict[str, object]:
        """The record in training_summary.json (`lr_schedule`)."""
        return {"schedule": self.schedule, "peak": self.peak,
                "warmup_epochs": self.warmup_epochs, "warmup_reason": self.warmup_reason,
                "steps_per_epoch": self.steps_per_epoch}


def resolve_warmup(setting: float | str, schedule: str, epochs: int,
                   scaled_up: bool) -> tuple[float, str]:
    """(warm-up epochs, why) for `trainer.warmup_epochs` = `setting`."""
    if setting != AUTO:
        return float(setting), "trainer.warmup_epochs"
    if not (schedule == "cosine" or scaled_up):
        return 0.0, "auto: constant learning rate, not scaled up"
    epochs_of_warmup = float(min(_WARMUP_EPOCHS_MAX, round(_WARMUP_SHARE * epochs, 1)))
    why = "the learning rate was scaled up for the batch" if scaled_up else "cosine schedule"
    return epochs_of_warmup, f"auto: {why}: 10 % of {epochs} epochs (at most 5)"


def resolve_fine_tune(fine_tune: FineTuneSection, epochs: int, pretrained: bool,
                      blocks: int) -> tuple[FineTuneSection, str]:
    """`trainer.fine_tune` with `auto` resolved, and why: `blocks` is the backbone's block
    count (fine_tune.backbone_blocks)."""
    frozen, unfreeze = fine_tune.frozen_epochs, fine_tune.unfreeze
    reasons = []
    if frozen == AUTO:
        frozen = max(1, epochs // 3) if pretrained else 0
        reasons.append(f"frozen_epochs auto: {frozen} (" + (
            "pretrained weights: a third of the epochs" if pretrained
            else "no pretrained weights: no freezing") + ")")
    if unfreeze == AUTO:
        unfreeze = max(1, math.ceil(blocks / 4))
        if frozen:
            reasons.append(f"unfreeze auto: the top {unfreeze} of {blocks} blocks")
    resolved = fine_tune.model_copy(update={"frozen_epochs": int(frozen), "unfreeze": unfreeze})
    return resolved, "; ".join(reasons) or "trainer.fine_tune"


@keras.saving.register_keras_serializable(package="mptfx")
class SparseCrossentropyWithSmoothing(keras.losses.Loss):
    """Categorical cross-entropy of probabilities against integer labels made one-hot and
    smoothed: (1 - s) x one_hot + s / classes. Computed in float32."""

    def __init__(self, label_smoothing: float = 0.0, name: str = "smoothed_crossentropy",
                 **kwargs: object) -> None:
        super().__init__(name=name, **kwargs)
        self.label_smoothing = float(label_smoothing)

    def call(self, y_true: object, y_pred: object) -> object:
        ops = keras.ops
        y_pred = ops.cast(y_pred, "float32")
        labels = ops.cast(ops.reshape(y_true, (-1,)), "int32")
        one_hot = ops.one_hot(labels, ops.shape(y_pred)[-1], dtype="float32")
        return keras.losses.categorical_crossentropy(
            one_hot, y_pred, label_smoothing=self.label_smoothing)

    def get_config(self) -> dict:
        return {**super().get_config(), "label_smoothing": self.label_smoothing}

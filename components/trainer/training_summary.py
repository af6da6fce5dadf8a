"""training_summary.json, typed: what one training did, as MLflow tracking, `mptfx bench` and
the tests read it (the keys are the contract in docs/INTERFACES.md).

    summary = TrainingSummary.of(config, choice, task, fitted, checksum, tf_config)
    summary.write(fn_args.model_run_dir)
    summary.to_dict()["val_accuracy"]
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

import keras
import tensorflow as tf

from components import pod_env
from components.trainer.config import LossScaleSection, TrainerConfig
from components.trainer.fit import FitResult
from components.trainer.optimizer import current_loss_scale
from components.trainer.precision import find_recurrent_layers
from components.trainer.runtime import Task
from components.trainer.tuning import TrainingChoice

SUMMARY_FILE = "training_summary.json"
# Not keys of their own: they become `val_<metric>` (and `dice` for segmentation).
_HEADLINE_FIELDS = ("metric", "final_metric")


@dataclasses.dataclass(frozen=True)
class TrainingSummary:
    """One training's record; `to_dict()` is the content of training_summary.json.

    The first fields up to `history` are the contract keys; the rest are for tracking and
    benchmarks. `metric` and `final_metric` are written as `val_<metric>` (and, for a
    segmentation model, `dice`).
    """

    precision: str
    precision_reason: str
    strategy: str
    replicas: int
    xla: bool
    epochs: int
    batch_size: int
    global_batch_size: int
    learning_rate: float
    images_per_sec: float
    input_size: list[int]
    channels: int
    label_names: list[str]
    history: dict[str, list]
    model: str
    task: str
    input_shape: list[int]
    xla_reason: str
    grad_accum_steps: int
    effective_batch_size: int
    loss_scale: dict[str, Any] | None
    skipped_steps: int
    lint: str
    recurrent_precision: str
    recurrent_layers: dict[str, str]
    model_file: str | None
    model_file_staged: str | None
    model_file_sha256: str | None
    warm_started_from: str | None
    initial_weights_checksum: str
    final_weights_checksum: str
    resumed_at_epoch: int | None
    train_examples: int
    eval_examples: int
    train_seconds: float
    images_per_sec_per_epoch: list
    workers: int
    task_name: str
    autotune: dict[str, Any]
    batch_size_reason: str
    autotune_probe_seconds: float
    model_reason: str
    input_size_reason: str
    start_weights: dict[str, Any] | None
    lr_schedule: dict[str, Any] | None
    label_smoothing: float
    fine_tune: dict[str, Any] | None
    early_stopping: dict[str, Any] | None
    distill: dict[str, Any] | None  # trainer.distill: teacher, settings, teacher vs student
    # input_bound.assess: the share of step time waiting for input, the model alone's speed
    input_bound: dict[str, Any]
    metric: str  # "accuracy" or "dice"
    final_metric: float | None

    @classmethod
    def of(
        cls,
        config: TrainerConfig,
        choice: TrainingChoice,
        task: Task,
        fitted: FitResult,
        final_weights_checksum: str,
        tf_config: Mapping[str, Any],
        distill: Mapping[str, Any] | None = None,
        input_bound: Mapping[str, Any] | None = None,
    ) -> TrainingSummary:
        """The summary of a finished training (`distill`: distill_run's record, or None)."""
        trainer, model, runtime = config.trainer, config.model, choice.runtime
        history = fitted.history
        return cls(
            precision=runtime.policy,
            precision_reason=runtime.policy_reason,
            strategy=runtime.strategy_name,
            replicas=runtime.replicas,
            xla=runtime.xla,
            epochs=trainer.epochs,
            batch_size=runtime.global_batch_size // runtime.replicas,
            global_batch_size=runtime.global_batch_size,
            learning_rate=runtime.learning_rate,
            images_per_sec=fitted.images_per_sec,
            input_size=task.input_size,
            channels=task.channels,
            label_names=task.label_names,
            history=history,
            model=task.model_name,
            task=task.name,
            input_shape=list(task.input_shape),
            xla_reason=runtime.xla_reason,
            grad_accum_steps=trainer.grad_accum_steps,
            effective_batch_size=runtime.global_batch_size * trainer.grad_accum_steps,
            loss_scale=_loss_scale_summary(fitted.model, runtime.policy, trainer.loss_scale),
            skipped_steps=int(sum(v or 0 for v in history.get("skipped_steps", []))),
            lint="passed",
            # Read from the trained layers: what each recurrent layer really computed in.
            recurrent_precision=trainer.recurrent_precision,
            recurrent_layers={layer.name: layer.dtype_policy.name
                              for layer in find_recurrent_layers(fitted.model)},
            model_file=model.module_source or None,
            model_file_staged=model.module_file or None,
            model_file_sha256=model.module_sha256 or None,
            warm_started_from=fitted.warm_started_from,
            initial_weights_checksum=fitted.initial_weights_checksum,
            final_weights_checksum=final_weights_checksum,
            resumed_at_epoch=fitted.resumed_at_epoch,
            train_examples=fitted.train_examples,
            eval_examples=fitted.eval_examples,
            train_seconds=fitted.train_seconds,
            images_per_sec_per_epoch=history.get("images_per_sec", []),
            workers=_cluster_workers(tf_config),
            task_name=pod_env.task_name(tf_config),
            autotune=choice.to_dict(),
            batch_size_reason=choice.batch_size_reason or "requested",
            autotune_probe_seconds=choice.autotune.probe_seconds,
            model_reason=task.choice.name_reason,
            input_size_reason=task.choice.input_size_reason,
            start_weights=fitted.start_weights.to_dict() if fitted.start_weights else None,
            lr_schedule=fitted.lr_plan.to_dict() if fitted.lr_plan else None,
            label_smoothing=trainer.label_smoothing if task.is_classification else 0.0,
            fine_tune=fitted.fine_tune,
            early_stopping=fitted.early_stopping,
            distill=dict(distill) if distill else None,
            input_bound=dict(input_bound or {}),
            metric=task.metric,
            final_metric=_final_metric(history, task.metric, fitted.early_stopping),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able content of training_summary.json, keys in the contract's order."""
        content = dataclasses.asdict(self)
        for name in _HEADLINE_FIELDS:
            del content[name]
        content[f"val_{self.metric}"] = self.final_metric
        if self.metric == "dice":
            content["dice"] = self.final_metric
        return content

    def write(self, model_run_dir: str) -> str:
        """Writes `<model_run_dir>/training_summary.json`; returns its path."""
        tf.io.gfile.makedirs(model_run_dir)
        path = os.path.join(model_run_dir, SUMMARY_FILE)
        with tf.io.gfile.GFile(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2)
        return path


def _final_metric(history: Mapping[str, list], metric: str,
                  early_stopping: Mapping[str, Any] | None) -> float | None:
    """The eval metric of the weights exported: the last epoch's, or the best epoch's when
    early stopping restored it."""
    values = history.get(f"val_{metric}") or [None]
    if early_stopping and early_stopping.get("best_epoch"):
        return values[min(int(early_stopping["best_epoch"]), len(values)) - 1]
    return values[-1]


def _loss_scale_summary(
    model: keras.Model, policy: str, settings: LossScaleSection
) -> dict[str, Any] | None:
    if policy != "mixed_float16":
        return None
    return {
        "dynamic": settings.dynamic,
        "initial": settings.initial,
        "growth_steps": settings.growth_steps if settings.dynamic else None,
        "final": current_loss_scale(model.optimizer),
    }


def _cluster_workers(tf_config: Mapping[str, Any]) -> int:
    cluster = tf_config.get("cluster") or {}
    return max(1, sum(len(cluster.get(role) or []) for role in ("chief", "worker")))

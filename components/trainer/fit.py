"""The fit step: input pipelines, the model under the resolved policy (starting weights,
warm start, a frozen backbone), the recipe (recipe.py), callbacks, `model.fit`.

Training resumes from its BackupAndRestore checkpoint after a kill (`backup_dir_for` says
which folder is "the same training"); under MultiWorkerMirroredStrategy every worker runs
the same number of steps.

    fitted = fit_model(fn_args, config.trainer, runtime, task, model_run_dir, tf_config)
    fitted.model, fitted.history["val_accuracy"]
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf

from components import pod_env
from components.trainer import data as data_lib
from components.trainer.build import build_training_model, compile_training_model
from components.trainer.callbacks import (
    LOSS_SCALE,
    CheckpointFault,
    DivergenceGuard,
    EpochHistory,
    EpochTensorBoard,
    ThroughputCallback,
    TrainingStatsCallback,
)
from components.trainer.config import TrainerSection
from components.trainer.distill import Distillation
from components.trainer.fine_tune import (
    FineTuneCallback,
    backbone_blocks,
    freeze_backbone,
    head_and_backbone,
)
from components.trainer.input_bound import InputWaitMeter
from components.trainer.pretrained import StartWeights, load_start_weights
from components.trainer.recipe import LearningRatePlan, resolve_fine_tune
from components.trainer.runtime import Runtime, Task
from components.trainer.warm_start import warm_start_weights, weights_checksum
from models.registry import WEIGHTS_PARAM, model_head

if TYPE_CHECKING:  # importing TFX costs ~25 CPU seconds; only attributes are read
    from tfx import v1 as tfx

LOG_DIR = "logs"
BACKUP_DIR = "backup"


@dataclasses.dataclass(frozen=True)
class FitResult:
    """What `fit_model` trained and measured.

    Attributes:
        model: the trained model, under the training dtype policy.
        history: per-epoch values by metric (`loss_scale` is None per epoch when unscaled).
        images_per_sec: training throughput over the whole fit.
        warm_started_from: the base model's weights file it started from, or None.
        initial_weights_checksum: of the weights before the first step.
        resumed_at_epoch: the epoch a BackupAndRestore checkpoint resumed at, or None.
        train_examples, eval_examples: examples in each split.
        train_seconds: wall time of `model.fit`.
        start_weights: `model.params.weights` as loaded (None: random weights).
        lr_plan: the learning rate over the run.
        fine_tune: `trainer.fine_tune` as resolved (`auto` decided), and why.
        early_stopping: best epoch, stopped epoch and restored flag, or None when off.
    """

    model: keras.Model
    history: dict[str, list]
    images_per_sec: float
    warm_started_from: str | None
    initial_weights_checksum: str
    resumed_at_epoch: int | None
    train_examples: int
    eval_examples: int
    train_seconds: float
    start_weights: StartWeights | None = None
    lr_plan: LearningRatePlan | None = None
    fine_tune: dict[str, Any] | None = None
    early_stopping: dict[str, Any] | None = None


@dataclasses.dataclass
class _Prepared:
    """The model ready for fit, and what was decided on the way."""

    model: keras.Model
    start_weights: StartWeights | None
    warm_started_from: str | None
    initial_weights_checksum: str
    fine_tune: FineTuneCallback | None
    fine_tune_record: dict[str, Any]


def fit_model(
    fn_args: tfx.components.FnArgs,
    trainer: TrainerSection,
    runtime: Runtime,
    task: Task,
    model_run_dir: str,
    tf_config: Mapping[str, Any],
    probed_model: keras.Model | None = None,
    extra_callbacks: Sequence[keras.callbacks.Callback] = (),
    distillation: Distillation | None = None,
) -> FitResult:
    """Builds (or reuses the autotune probe's `probed_model`), loads `model.params.weights`,
    warm-starts, freezes the backbone (`trainer.fine_tune`), compiles with the recipe and
    trains the model, from `distillation`'s teacher too when given; TensorBoard logs go to
    `<model_run_dir>/logs`.

    Raises:
        MixedPrecisionLintError: the model is unsafe under the resolved precision.
        TrainingDivergedError: the loss stayed NaN/inf (see callbacks.DivergenceGuard).
        WeightsUnavailableError: `model.params.weights: imagenet` cannot be had.
    """
    train_dataset, eval_dataset, train_examples, eval_examples = _datasets(
        fn_args, task, runtime, trainer.seed, repeat=runtime.multi_worker,
        cache_max_mb=float(trainer.cache_max_mb),
        augment=data_lib.resolve_augment(trainer.augment, task.model_name, task.channels),
        workers=pod_env.worker_position(tf_config) if runtime.multi_worker else None,
    )
    input_wait = InputWaitMeter()  # the seconds each step waits for its batch
    train_dataset = input_wait.watch(train_dataset)
    fit_steps = _fit_steps(runtime, train_examples, eval_examples)
    plan = _learning_rate_plan(trainer, runtime, fit_steps.get("steps_per_epoch") or math.ceil(
        train_examples / runtime.global_batch_size))
    backup_dir = backup_dir_for(fn_args, trainer, tf_config)
    throughput = ThroughputCallback(train_examples)
    epoch_history = EpochHistory(backup_dir)
    early_stopping = _early_stopping(trainer)
    previous_policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_dtype_policy(runtime.policy)
    try:
        with runtime.strategy.scope():
            prepared = _prepare_model(fn_args, trainer, runtime, task, probed_model, plan,
                                      train_dataset.element_spec, distillation)
        model = prepared.model
        callbacks = [
            *([prepared.fine_tune] if prepared.fine_tune else []),
            throughput,
            input_wait.callback,
            TrainingStatsCallback(),
            DivergenceGuard(trainer.divergence_patience, runtime.learning_rate, runtime.policy),
            *([early_stopping] if early_stopping else []),
            epoch_history,  # after the callbacks that add to the epoch logs
            *_checkpoint_callbacks(backup_dir, model_run_dir),
            *extra_callbacks,
        ]
        train_started = time.perf_counter()
        model.fit(train_dataset, validation_data=eval_dataset, epochs=trainer.epochs,
                  callbacks=callbacks, verbose=2, **fit_steps)
        train_seconds = time.perf_counter() - train_started
    finally:
        keras.mixed_precision.set_dtype_policy(previous_policy)

    history = _finished_history(epoch_history)
    epochs_trained = len(next(iter(history.values()), []))
    return FitResult(
        model=model,
        history=history,
        images_per_sec=throughput.images_per_sec,
        warm_started_from=prepared.warm_started_from,
        initial_weights_checksum=prepared.initial_weights_checksum,
        resumed_at_epoch=epoch_history.resumed_at_epoch,
        train_examples=train_examples,
        eval_examples=eval_examples,
        train_seconds=train_seconds,
        start_weights=prepared.start_weights,
        lr_plan=plan,
        fine_tune=prepared.fine_tune_record,
        early_stopping=_early_stopping_record(early_stopping, epochs_trained),
    )


def _fit_steps(runtime: Runtime, train_examples: int, eval_examples: int) -> dict[str, int]:
    """`model.fit`'s step counts: none (one pass over each split), except under
    multi-worker training, where every worker must run the same number of steps: the
    datasets repeat and the steps are counted."""
    if not runtime.multi_worker:
        return {}
    return {
        "steps_per_epoch": max(1, train_examples // runtime.global_batch_size),
        "validation_steps": max(1, eval_examples // runtime.global_batch_size),
    }


def _learning_rate_plan(trainer: TrainerSection, runtime: Runtime, steps_per_epoch: int
                        ) -> LearningRatePlan:
    """The learning rate over the run, from the runtime's (maybe scaled) peak."""
    # Scaled up (batch_size auto, scale_learning_rate): a larger batch, which wants a warm-up.
    return LearningRatePlan.of(trainer, runtime.learning_rate,
                               runtime.learning_rate > float(trainer.learning_rate),
                               steps_per_epoch)


def _checkpoint_callbacks(backup_dir: str, model_run_dir: str) -> list[keras.callbacks.Callback]:
    """The backup that lets a killed fit resume, and TensorBoard's epoch logs."""
    callbacks: list[keras.callbacks.Callback] = [
        # double_checkpoint: a kill while the checkpoint is written leaves the previous
        # one (.bkp), which Keras restores instead of failing every retry.
        keras.callbacks.BackupAndRestore(backup_dir, double_checkpoint=True),
    ]
    if CheckpointFault.wanted():  # crash tests only (components/faults.py)
        callbacks.append(CheckpointFault(backup_dir))  # after the backup
    callbacks.append(EpochTensorBoard(os.path.join(model_run_dir, LOG_DIR)))
    return callbacks


def _finished_history(epoch_history: EpochHistory) -> dict[str, list]:
    """The per-epoch history of a finished fit (`loss_scale` None per epoch when the
    step was unscaled); the history's own files are removed."""
    history = epoch_history.history()
    epoch_history.remove()  # BackupAndRestore removed its folder when fit finished
    if LOSS_SCALE not in history:
        history[LOSS_SCALE] = [None] * len(next(iter(history.values()), []))
    return history


def _prepare_model(
    fn_args: tfx.components.FnArgs, trainer: TrainerSection, runtime: Runtime, task: Task,
    probed_model: keras.Model | None, plan: LearningRatePlan, data_spec: object,
    distillation: Distillation | None = None,
) -> _Prepared:
    """In the strategy's scope, under the training policy: the model, its starting weights,
    the frozen backbone, the teacher and the compile with the recipe."""

    def recompile(factor: float, start_epoch: int, loss_scale: float | None) -> None:
        # Under the training policy and in the strategy's scope (here, or the fine-tune
        # callback's); a dynamic loss scale carries over from before the recompile.
        scaling = trainer.loss_scale
        if loss_scale is not None and scaling.dynamic:
            scaling = scaling.model_copy(update={"initial": float(loss_scale)})
        compile_training_model(model, task.name, plan.learning_rate(factor, start_epoch),
                               runtime.policy, scaling, trainer.grad_accum_steps, runtime.xla,
                               trainer.label_smoothing if task.is_classification else 0.0)

    model = probed_model or build_training_model(
        task.model_name, task.model_params, task.input_shape, task.num_classes,
        runtime.policy, trainer.recurrent_precision,
    )
    start = load_start_weights(model, str(task.model_params.get(WEIGHTS_PARAM) or ""),
                               task.model_name, task.model_params, task.input_shape,
                               task.num_classes)
    warm_started_from = None
    if trainer.warm_start:  # replaces the starting weights
        warm_started_from = warm_start_weights(
            model, task.model_name, task.model_params, task.input_shape,
            task.num_classes, getattr(fn_args, "base_model", None),
        )
    initial_weights_checksum = weights_checksum(model)
    head_names = model_head(task.model_name)
    _, backbone = head_and_backbone(model, head_names)
    fine_tune_plan, reason = resolve_fine_tune(trainer.fine_tune, trainer.epochs,
                                               start is not None,
                                               len(backbone_blocks(backbone)))
    fine_tune = None
    if fine_tune_plan.frozen_epochs:
        head = freeze_backbone(model, head_names)
        fine_tune = FineTuneCallback(fine_tune_plan, head, recompile, plan.peak, data_spec)
    if distillation is not None:
        model.distill_from(distillation)  # before the compile that traces the train step
    recompile(1.0, 0, None)
    # The compile's variables (the optimizer's slots, the metrics') are made here, as the
    # fine-tune callback does after its recompile. Without a distribution strategy Keras
    # makes them inside the first trace of the train step, and a tf.function that creates
    # variables is traced twice: a one-epoch ResNet-50 Trainer took 81-90 s that way, 74-78 s
    # now.
    model.build_compiled_state(data_spec)
    record = {"frozen_epochs": fine_tune_plan.frozen_epochs,
              "unfreeze": fine_tune_plan.unfreeze,
              "learning_rate_factor": fine_tune_plan.learning_rate_factor, "reason": reason}
    return _Prepared(model, start, warm_started_from, initial_weights_checksum, fine_tune,
                     record)


def _early_stopping(trainer: TrainerSection) -> keras.callbacks.EarlyStopping | None:
    """Keras' EarlyStopping on the eval loss, restoring the best weights (None when off)."""
    settings = trainer.early_stopping
    if not settings.patience:
        return None
    return keras.callbacks.EarlyStopping(monitor="val_loss", patience=settings.patience,
                                         min_delta=settings.min_delta,
                                         restore_best_weights=True)


def _early_stopping_record(callback: keras.callbacks.EarlyStopping | None,
                           epochs_trained: int) -> dict[str, Any] | None:
    """training_summary.json's `early_stopping`: 1-based epochs."""
    if callback is None:
        return None
    return {"best_epoch": callback.best_epoch + 1,
            "stopped_epoch": callback.stopped_epoch + 1 if callback.stopped_epoch else None,
            "epochs_trained": epochs_trained, "restored_best_weights": True}


def _datasets(
    fn_args: tfx.components.FnArgs, task: Task, runtime: Runtime, seed: int, repeat: bool,
    cache_max_mb: float, augment: str = "none", workers: tuple[int, int] | None = None,
) -> tuple[tf.data.Dataset, tf.data.Dataset, int, int]:
    train_examples = data_lib.count_examples(fn_args.train_files)
    eval_examples = data_lib.count_examples(fn_args.eval_files)
    if task.is_classification:
        def make(files, shuffle, count):
            return data_lib.make_dataset(
                files, task.input_shape[:2], task.channels, runtime.global_batch_size,
                shuffle=shuffle, seed=seed, num_examples=count, repeat=repeat,
                cache_max_mb=cache_max_mb, augment=augment, workers=workers,
            )
    else:
        def make(files, shuffle, count):
            return data_lib.make_volume_dataset(
                files, task.input_shape[:3], task.channels, runtime.global_batch_size,
                shuffle=shuffle, seed=seed, num_examples=count, repeat=repeat,
                cache_max_mb=cache_max_mb, workers=workers,
            )
    return (
        make(fn_args.train_files, True, train_examples),
        make(fn_args.eval_files, False, eval_examples),
        train_examples,
        eval_examples,
    )


def backup_dir_for(fn_args: tfx.components.FnArgs, trainer: TrainerSection,
                   tf_config: Mapping[str, Any]) -> str:
    """The BackupAndRestore folder of this training: stable across restarts of the same
    training (same config and input files), distinct for any other, one per task.

    `trainer.backup_dir`, else `<pipeline_root>/Trainer/backup` (two levels above
    `fn_args.model_run_dir`, which TFX numbers per execution). The execution's
    `model_run_dir` is part of the key: a retried pod of one execution resumes, while two
    runs with the same config never share (and delete) one folder.
    """
    base = trainer.backup_dir or os.path.join(
        os.path.dirname(os.path.dirname(fn_args.model_run_dir.rstrip("/"))), BACKUP_DIR
    )
    identity = json.dumps(
        {
            "config": fn_args.custom_config,
            "train": list(fn_args.train_files),
            "eval": list(fn_args.eval_files),
            "execution": fn_args.model_run_dir,
        },
        sort_keys=True,
        default=str,
    )
    fingerprint = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return os.path.join(base, fingerprint, pod_env.task_name(tf_config))

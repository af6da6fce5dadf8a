"""TFX Trainer module: trains a registry model on the ingest Examples and exports it.

The Trainer calls `run_fn(fn_args)`. Precision, XLA and the distribution strategy are
resolved from the devices present ("auto") or taken from the config; the model is checked
by the mixed-precision lint before the first step; training resumes from its
BackupAndRestore checkpoint after a kill; the serving model is exported in float32, or in
the training policy with a float32 rebuild beside it (`export.serving_precision: mixed`,
see export.py), with its Keras weights beside it (see warm_start.py).

`custom_config` is validated with the Trainer's own schema (config.py, the classes the
pipeline's config is made of): a missing key takes its default, a refused one is a
ValueError naming it. The steps, top to bottom: resolve (runtime.py, tuning.py), fit
(fit.py), export (export.py, serving_warmup.py), summary (training_summary.py).

Under MultiWorkerMirroredStrategy every worker runs `run_fn` with the same `fn_args`; only
the chief writes the serving model (with the monitoring reference of a classifier, see
components/monitor/reference.py), the Keras weights, TensorBoard logs and
training_summary.json; the other workers write theirs to a scratch folder they delete.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from typing import TYPE_CHECKING

import keras
from absl import logging

from components import pod_env
from components.tracking import system_metrics
from components.trainer import export as export_lib
from components.trainer.build import build_training_model, compile_training_model
from components.trainer.config import TrainerConfig
from components.trainer.distill_run import PreparedTeacher, prepare_distillation
from components.trainer.fit import LOG_DIR, FitResult, backup_dir_for, fit_model
from components.trainer.input_bound import assess_training
from components.trainer.runtime import Task, resolve_runtime, resolve_task
from components.trainer.teacher import describe_model, write_model_description
from components.trainer.training_summary import SUMMARY_FILE, TrainingSummary
from components.trainer.tuning import TrainingChoice, choose_training
from components.trainer.warm_start import save_keras_weights, weights_checksum

if TYPE_CHECKING:  # importing TFX costs ~25 CPU seconds; run_fn only reads attributes
    from tfx import v1 as tfx

# Part of this module's surface for tests, benchmarks and the pipeline's callers.
__all__ = [
    "LOG_DIR", "SUMMARY_FILE", "TrainingResult", "backup_dir_for", "build_training_model",
    "compile_training_model", "run_fn", "train_and_export",
]


@dataclasses.dataclass
class TrainingResult:
    """What `train_and_export` did, for run_fn and for tests that inspect the model.

    Attributes:
        model: the trained model (under the training dtype policy).
        summary: what training_summary.json holds (`summary.to_dict()`).
        chief: whether this process wrote the shared outputs.
        serving_model_dir: where this process exported (a deleted scratch folder on
            non-chief workers).
        config: the custom_config as run_fn resolved it (defaults filled in).
    """

    model: keras.Model
    summary: TrainingSummary
    chief: bool
    serving_model_dir: str
    config: TrainerConfig


@dataclasses.dataclass(frozen=True)
class _Outputs:
    """Where this process writes: the TFX folders on the chief, a scratch folder elsewhere."""

    serving_model_dir: str
    model_run_dir: str
    scratch: str | None

    @classmethod
    def for_task(cls, fn_args: tfx.components.FnArgs, chief: bool, task_name: str) -> _Outputs:
        if chief:
            return cls(fn_args.serving_model_dir, fn_args.model_run_dir, None)
        scratch = tempfile.mkdtemp(prefix=f"mptfx-{task_name}-")
        return cls(os.path.join(scratch, "serving"), os.path.join(scratch, "model_run"), scratch)

    def remove_scratch(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            logging.info("Trainer: not the chief; scratch outputs in %s deleted", self.scratch)


def train_and_export(fn_args: tfx.components.FnArgs) -> TrainingResult:
    """Trains the configured model and exports it; the body of `run_fn`. MLflow's system
    metrics are logged meanwhile when a run was handed over (components/tracking/
    system_metrics.py), with the task as node id under multi-worker training.

    Raises:
        ValueError: a bad config value (naming the key) or bad input data.
        MixedPrecisionLintError: the model is unsafe under the resolved precision.
        TrainingDivergedError: the loss stayed NaN/inf (see callbacks.DivergenceGuard).
    """
    tf_config = pod_env.read_tf_config()
    node_id = pod_env.task_name(tf_config) if pod_env.cluster_size(tf_config) > 1 else None
    with system_metrics.monitoring(node_id):
        return _train_and_export(fn_args, tf_config)


def _train_and_export(fn_args: tfx.components.FnArgs, tf_config: dict) -> TrainingResult:
    started = time.perf_counter()
    config = TrainerConfig.from_custom_config(fn_args.custom_config)
    choice, task, teacher = _resolve(config, fn_args, tf_config)
    runtime = choice.runtime
    chief = pod_env.is_chief(tf_config)
    outputs = _Outputs.for_task(fn_args, chief, pod_env.task_name(tf_config))
    fitted = fit_model(fn_args, config.trainer, runtime, task, outputs.model_run_dir, tf_config,
                       choice.probed_model, distillation=teacher.distillation if teacher else None)
    distill_record = teacher.record(fitted.model, task, fn_args.eval_files) if teacher else None
    fitted.model.distillation = None  # the teacher is not part of what is exported
    input_bound = assess_training(fitted.history, fitted.model, runtime, task, config.trainer,
                                  choice.autotune, fn_args.train_files,
                                  fitted.train_examples)
    final_weights_checksum = _export(fitted, task, outputs.serving_model_dir,
                                     config.export.serving_precision, config, runtime.policy)
    if chief and task.is_classification:
        _write_monitoring_reference(fn_args, task, outputs.serving_model_dir)
    summary = TrainingSummary.of(config, choice, task, fitted, final_weights_checksum,
                                 tf_config, distill_record, input_bound)
    summary.write(outputs.model_run_dir)
    outputs.remove_scratch()
    logging.info(
        "Trainer: done in %.1f s (fit %.1f s); %.0f train images/sec; val_%s %s; model at %s "
        "(serving precision %s)",
        time.perf_counter() - started,
        fitted.train_seconds,
        fitted.images_per_sec,
        task.metric,
        summary.final_metric,
        outputs.serving_model_dir,
        config.export.serving_precision,
    )
    if input_bound["advice"]:
        logging.warning("Trainer: %s", input_bound["advice"])
    return TrainingResult(fitted.model, summary, chief, outputs.serving_model_dir, config)


def _resolve(
    config: TrainerConfig, fn_args: tfx.components.FnArgs, tf_config: dict
) -> tuple[TrainingChoice, Task, PreparedTeacher | None]:
    """The resolve step: strategy, precision and XLA, the task from the train split, then
    the measured choices (autotune, batch_size auto), then the teacher (trainer.distill)."""
    runtime = resolve_runtime(config.trainer, tf_config)  # the strategy before any TF op
    keras.utils.set_random_seed(config.trainer.seed)
    task = resolve_task(config.model, config.data, fn_args.train_files)
    choice = choose_training(runtime, config.trainer, task, fn_args.train_files)
    teacher = (prepare_distillation(config.trainer, choice.runtime, task, fn_args.train_files)
               if config.trainer.distill.enabled else None)
    # The probe's and the teacher's models drew from them too: the student starts from the
    # same weights with and without a teacher.
    keras.utils.set_random_seed(config.trainer.seed)
    return choice, task, teacher


def _export(fitted: FitResult, task: Task, serving_model_dir: str,
            serving_precision: str, config: TrainerConfig, policy: str) -> str:
    """The export step: the Keras weights (float32) and the serving SavedModel (and, for
    `mixed`, its float32 rebuild beside it), each with the model's description (a later run
    can distill from it, teacher.py); returns the exported weights' checksum."""
    float_model = export_lib.rebuild_in_float32(
        fitted.model, task.model_name, task.model_params, task.input_shape, task.num_classes
    )
    weights = save_keras_weights(float_model, serving_model_dir)
    export_lib.export_serving_model(
        fitted.model,
        task.model_name,
        task.model_params,
        task.input_size,
        task.channels,
        task.label_names,
        serving_model_dir,
        serving_precision,
    )
    if task.is_classification:
        write_model_description(serving_model_dir, describe_model(
            task.model_name, task.model_params, task.input_shape, task.label_names, policy,
            weights, config.model.model_dump()))
    return weights_checksum(float_model)


def _write_monitoring_reference(fn_args: tfx.components.FnArgs, task: Task,
                                serving_model_dir: str) -> None:
    """The statistics `mptfx monitor` compares served traffic with, inside the SavedModel's
    assets.extra so that every pushed version carries its own (components/monitor/)."""
    from components.monitor.reference import write_reference

    started = time.perf_counter()
    info = write_reference(serving_model_dir, fn_args.train_files, fn_args.eval_files,
                           task.label_names)
    logging.info("Trainer: monitoring reference of %s eval and %s train images in %s (%.1f s)",
                 info["images"]["eval"], info["images"]["train"], info["path"],
                 time.perf_counter() - started)


def run_fn(fn_args: tfx.components.FnArgs) -> None:
    """Trains the configured model and exports the serving model.

    Args:
        fn_args: uses only `train_files`, `eval_files` (Examples file patterns),
            `serving_model_dir` (the SavedModel; the Keras weights go to the sibling
            `Format-Keras/model.weights.h5`, a `mixed` serving model's float32 rebuild to
            `Format-Float32`), `model_run_dir` (TensorBoard logs and
            training_summary.json), `base_model` (with `trainer.warm_start`) and
            `custom_config` ({"data", "model", "trainer", "export"} dicts, validated by
            `components.trainer.config.TrainerConfig`); TF_CONFIG selects the cluster for
            multi-worker training.

    Raises:
        ValueError: naming the refused custom_config key, or bad input data.
    """
    train_and_export(fn_args)

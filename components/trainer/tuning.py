"""The training choice, made in one place: the static rules' precision, XLA and batch
(runtime.py), replaced by measured ones where `trainer.autotune` (autotune.py) and
`trainer.batch_size: auto` (batch_size.py) ask for it, with the reason for each; a
distillation teacher's precision (`trainer.distill.precision`) is decided the same way.

    choice = choose_training(runtime, config.trainer, task, train_files)
    choice.runtime, choice.batch_size_reason, choice.probed_model, choice.to_dict()
    record = tune_teacher_precision("auto", config.trainer, runtime, build, images, identity)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf
from absl import logging

from components.trainer import autotune as autotune_lib
from components.trainer import batch_size as batch_lib
from components.trainer import data as data_lib
from components.trainer.build import build_training_model, compile_training_model
from components.trainer.config import TrainerSection
from components.trainer.precision import (
    DeviceDescription,
    describe_devices,
    resolve_precision_policy,
)
from components.trainer.runtime import Runtime, Task
from components.trainer.tuning_record import TuningRecord
from models import build_model


@dataclasses.dataclass(frozen=True)
class TrainingChoice:
    """How this run trains and why: the runtime with the chosen precision, XLA, batch and
    learning rate, the autotune decision behind them, and the probe's winning model.

    Attributes:
        batch_size_reason: why the batch (`batch_size: auto` only; None when requested).
        probed_model: the measured winner reset to the state it was built in (weights and
            optimizer slots), or None: training it skips building and tracing the train
            step a second time, so the probe costs only the other cells.
    """

    runtime: Runtime
    autotune: TuningRecord
    batch_size_reason: str | None = None
    probed_model: keras.Model | None = dataclasses.field(default=None, compare=False,
                                                         repr=False)

    def to_dict(self) -> dict[str, Any]:
        """training_summary.json's `autotune`: the decision, the batch's reason and
        whether the probe's model trained on."""
        content = self.autotune.to_dict()
        if self.batch_size_reason is not None:
            content["batch_size_reason"] = self.batch_size_reason
        content["trained_probe_model"] = self.probed_model is not None
        return content


def choose_training(
    runtime: Runtime, trainer: TrainerSection, task: Task, train_files: list[str]
) -> TrainingChoice:
    """The measured cell and batch replace the static rules' choice (a cached decision, or
    the static one when nothing is to measure). Leaves the dtype policy as it found it."""
    devices = describe_devices()
    probe = _Probe(runtime, trainer, task, train_files,
                   on_gpu=any(d.kind == "GPU" for d in devices))
    previous_policy = keras.mixed_precision.global_policy()
    try:
        record = autotune_lib.tune(_tuning_request(runtime, trainer, task, devices, probe))
    finally:
        keras.mixed_precision.set_dtype_policy(previous_policy)
    batch = record.choice.batch_size
    learning_rate, batch_reason = runtime.learning_rate, None
    if trainer.batch_size == "auto":
        learning_rate = batch_lib.scale_learning_rate(
            learning_rate, trainer.base_batch_size, batch, trainer.batch_lr_scaling)
        batch_reason = (
            f"{probe.batch_reason(record.choice.precision, batch)}; learning rate "
            f"{runtime.learning_rate:g} -> {learning_rate:g} ({trainer.batch_lr_scaling} "
            f"scaling from base batch {trainer.base_batch_size})")
    tuned = dataclasses.replace(
        runtime, policy=record.choice.precision, policy_reason=record.reason,
        xla=bool(record.choice.xla), xla_reason=record.xla_reason,
        global_batch_size=batch * runtime.replicas, learning_rate=learning_rate,
    )
    reusable = (probe.reset_winner(record)
                if record.status == "measured" and learning_rate == runtime.learning_rate
                else None)
    probe.built.clear()
    choice = TrainingChoice(tuned, record, batch_reason, reusable)
    _log_choice(choice)
    return choice


def _tuning_request(runtime: Runtime, trainer: TrainerSection, task: Task,
                    devices: Sequence[DeviceDescription], probe: _Probe
                    ) -> autotune_lib.TuningRequest:
    """What autotune decides from: the settings, the static rules' answer, the cache key's
    identity, and the probe's models and batches."""
    return autotune_lib.TuningRequest(
        autotune=trainer.autotune, precision=trainer.precision, xla=trainer.xla,
        devices=devices,
        static=(runtime.policy, runtime.policy_reason, runtime.xla, runtime.xla_reason),
        identity={
            "tensorflow": tf.__version__, "model": task.model_name,
            "params": task.model_params, "input_shape": task.input_shape,
            "strategy": runtime.strategy_name, "replicas": runtime.replicas,
            "precision": trainer.precision, "xla": trainer.xla,
            "grad_accum_steps": trainer.grad_accum_steps, "batch_size": trainer.batch_size,
            "batch_memory_mb": (trainer.batch_memory_mb if trainer.batch_size == "auto"
                                else None),
        },
        cache_dir=trainer.autotune_cache_dir,
        build=probe.build, batches=probe.batches, batch_for=probe.batch_for,
        replicas=runtime.replicas, measure=not runtime.multi_worker,
    )


def _log_choice(choice: TrainingChoice) -> None:
    record, tuned = choice.autotune, choice.runtime
    if record.table:
        logging.info("Trainer: autotune %s in %.1f s (key %s):\n%s", record.status,
                     record.probe_seconds, record.key,
                     autotune_lib.format_table(record.table))
    logging.info("Trainer: training with precision=%s (%s); xla=%s; batch %d per replica%s",
                 tuned.policy, tuned.policy_reason, tuned.xla, record.choice.batch_size,
                 f" ({choice.batch_size_reason})" if choice.batch_size_reason else "")


class _Probe:
    """The models and batches autotune times: each cell's compiled model (kept with its
    starting state, so the winner can train on), and `batch_size: auto`'s batch per
    precision (measured on a GPU, estimated elsewhere)."""

    def __init__(self, runtime: Runtime, trainer: TrainerSection, task: Task,
                 train_files: list[str], on_gpu: bool) -> None:
        self.runtime, self.trainer, self.task = runtime, trainer, task
        self.train_files, self.on_gpu = train_files, on_gpu
        self.built: dict[autotune_lib.Cell, tuple[keras.Model, list, list]] = {}
        self.batch_choices: dict[str, batch_lib.BatchChoice] = {}

    def build(self, cell: autotune_lib.Cell, batch: int) -> keras.Model:
        """The compiled training model of `cell`, its train step traced."""
        runtime, task, trainer = self.runtime, self.task, self.trainer
        keras.mixed_precision.set_dtype_policy(cell.precision)
        with runtime.strategy.scope():
            model = build_training_model(task.model_name, task.model_params,
                                         task.input_shape, task.num_classes, cell.precision)
            compile_training_model(model, task.name, runtime.learning_rate, cell.precision,
                                   trainer.loss_scale, trainer.grad_accum_steps, cell.xla)
            model.optimizer.build(model.trainable_variables)
        model.make_train_function()
        self.built[cell] = (model, [v.numpy() for v in model.weights],
                            [v.numpy() for v in model.optimizer.variables])
        return model

    def batches(self, cell: autotune_lib.Cell, batch: int):
        """One real batch of `batch` per replica, repeated and distributed."""
        return cached_batches(self.train_files, self.task, self.runtime,
                              batch * self.runtime.replicas)

    def batch_for(self, precision: str) -> int:
        """The per-replica batch under `precision`: the requested one, or auto's."""
        if self.trainer.batch_size != "auto":
            return int(self.trainer.batch_size)
        if precision not in self.batch_choices:
            self.batch_choices[precision] = self._choose_batch(precision)
        return self.batch_choices[precision].batch_size

    def batch_reason(self, precision: str, batch: int) -> str:
        """Why `batch_size: auto` chose `batch` under `precision`."""
        chosen = self.batch_choices.get(precision)
        return chosen.reason if chosen else (
            f"batch_size auto under {precision}: {batch} (cached decision)")

    def _choose_batch(self, precision: str) -> batch_lib.BatchChoice:
        runtime, trainer, task = self.runtime, self.trainer, self.task
        cap = float(trainer.batch_memory_mb)
        max_batch = max(1, data_lib.count_examples(self.train_files) // runtime.replicas)
        if self.on_gpu and not runtime.multi_worker:
            cell = autotune_lib.Cell(precision, False)
            model = self.build(cell, 1)
            fits = batch_lib.measured_fits(
                lambda b: float(model.train_function(self.batches(cell, b))["loss"]),
                lambda: tf.config.experimental.get_memory_info("GPU:0"),
                lambda: tf.config.experimental.reset_memory_stats("GPU:0"),
                cap, tf.errors.ResourceExhaustedError,
            )
            how = "one training step per probe on GPU:0" + (
                f", allocator peak <= trainer.batch_memory_mb {cap:.0f} MB" if cap else "")
        else:
            keras.mixed_precision.set_dtype_policy(precision)
            plain = build_model(task.model_name, task.input_shape, task.num_classes,
                                **dict(task.model_params))
            fits = batch_lib.estimated_fits(
                lambda b: batch_lib.estimate_training_memory_mb(plain, b), cap)
            how = (f"estimated training memory <= trainer.batch_memory_mb {cap:.0f} MB; "
                   f"{batch_lib.estimate_training_memory_mb(plain, 1):.2f} MB at batch 1")
        return batch_lib.choose_batch_size(
            precision, fits, how, trainer.base_batch_size, max_batch,
            f"the train split's {max_batch} examples per replica",
        )

    def reset_winner(self, record: TuningRecord) -> keras.Model | None:
        """The measured winner's model back in its built state, or None if not built."""
        winner = self.built.get(autotune_lib.Cell(record.choice.precision,
                                                  bool(record.choice.xla)))
        if not winner:
            return None
        model, weights, slots = winner
        model.set_weights(weights)  # undo the probe's steps (BatchNorm statistics too)
        for variable, value in zip(model.optimizer.variables, slots, strict=True):
            variable.assign(value)
        return model


def cached_batches(train_files: list[str], task: Task, runtime: Runtime, global_batch: int):
    """An endless iterator of one real batch (`real_batch`), distributed by the runtime's
    strategy: what `model.train_function` takes when the model alone is timed."""
    images, labels = real_batch(train_files, task, global_batch)
    # unbatch/batch: the element spec of the training dataset (batch dimension None), so
    # fit reuses the winner's traced train step instead of tracing it again.
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat().unbatch().batch(
        global_batch)
    return iter(runtime.strategy.experimental_distribute_dataset(dataset))


def real_batch(train_files: list[str], task: Task, size: int) -> tuple[tf.Tensor, tf.Tensor]:
    """The first `size` train examples (repeated when the split is smaller), decoded like
    training decodes them: the same data for every cell the probe times."""
    make = data_lib.make_dataset if task.is_classification else data_lib.make_volume_dataset
    shape = task.input_shape[:2] if task.is_classification else task.input_shape[:3]
    dataset = make(train_files, shape, task.channels, size, shuffle=False, seed=0,
                   repeat=True, cache_max_mb=0)
    return next(iter(dataset))


def tune_teacher_precision(
    setting: str, trainer: TrainerSection, runtime: Runtime,
    build: Callable[[str], keras.Model], images: tf.Tensor, identity: Mapping[str, Any],
) -> TuningRecord:
    """`trainer.distill.precision`: the teacher's compute precision, decided like the
    student's. `auto` with `trainer.autotune: on` times the frozen teacher's prediction
    step on a real batch (`images`, the student's batch adapted to the teacher) under each
    plausible precision, with the student's XLA setting and batch (the teacher runs inside
    the student's train step), cached under `identity`; otherwise the static rules.

    Args:
        build: the frozen teacher under a dtype policy, in the strategy's scope.

    Returns the autotune record (`choice.precision`, `reason`, `status`, `table`).
    """
    devices = describe_devices()
    policy, reason = resolve_precision_policy(setting, devices, trainer.prefer_bfloat16)
    batch = runtime.global_batch_size // runtime.replicas

    def build_cell(cell: autotune_lib.Cell, _batch: int) -> keras.Model:
        model = build(cell.precision)
        model.jit_compile = cell.xla
        model.make_predict_function()
        return model

    def batches(_cell: autotune_lib.Cell, _batch: int):
        dataset = tf.data.Dataset.from_tensors(images).repeat().unbatch().batch(
            runtime.global_batch_size)
        return iter(runtime.strategy.experimental_distribute_dataset(dataset))

    previous_policy = keras.mixed_precision.global_policy()
    try:
        return autotune_lib.tune(autotune_lib.TuningRequest(
            autotune=trainer.autotune, precision=setting, xla=runtime.xla, devices=devices,
            static=(policy, f"teacher: {reason}", runtime.xla, runtime.xla_reason),
            identity={"tensorflow": tf.__version__, "teacher": dict(identity),
                      "strategy": runtime.strategy_name, "replicas": runtime.replicas,
                      "precision": setting, "xla": runtime.xla, "batch_size": batch},
            cache_dir=trainer.autotune_cache_dir, build=build_cell, batches=batches,
            batch_for=lambda _precision: batch, replicas=runtime.replicas,
            measure=not runtime.multi_worker, inference=True,
        ))
    finally:
        keras.mixed_precision.set_dtype_policy(previous_policy)

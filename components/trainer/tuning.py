"""Measured choices before training: `trainer.autotune` (autotune.py) and `trainer.batch_size:
auto` (batch_size.py) replace the static rules' precision, XLA and batch with measured ones;
a distillation teacher's precision (`trainer.distill.precision`) is decided the same way.

    runtime, record, reusable_model = tune_runtime(runtime, config.trainer, task, train_files)
    record = tune_teacher_precision("auto", config.trainer, runtime, build, images, identity)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import keras
import tensorflow as tf
from absl import logging

from components.trainer import autotune as autotune_lib
from components.trainer import batch_size as batch_lib
from components.trainer import data as data_lib
from components.trainer.build import build_training_model, compile_training_model
from components.trainer.config import TrainerSection
from components.trainer.precision import describe_devices, resolve_precision_policy
from components.trainer.runtime import Runtime, Task
from models import build_model


def tune_runtime(
    runtime: Runtime, trainer: TrainerSection, task: Task, train_files: list[str]
) -> tuple[Runtime, dict[str, Any], keras.Model | None]:
    """The measured cell and batch replace the static rules' choice (a cached decision, or
    the static one when nothing is to measure). Leaves the dtype policy as it found it.

    Returns the runtime, the record, and the measured winner's model reset to the state it
    was built in (weights and optimizer slots), or None: training it skips building and
    tracing the train step a second time, so the probe costs only the other cells."""
    devices = describe_devices()
    on_gpu = any(d.kind == "GPU" for d in devices)
    multi_worker = runtime.multi_worker
    batch_auto = trainer.batch_size == "auto"
    loss_scale = trainer.loss_scale
    name, params = task.model_name, task.model_params
    batches_by_precision: dict[str, dict[str, Any]] = {}
    built: dict[autotune_lib.Cell, tuple[keras.Model, list, list]] = {}

    def build(cell: autotune_lib.Cell, batch: int) -> keras.Model:
        keras.mixed_precision.set_dtype_policy(cell.precision)
        with runtime.strategy.scope():
            model = build_training_model(name, params, task.input_shape, task.num_classes,
                                         cell.precision)
            compile_training_model(model, task.name, runtime.learning_rate, cell.precision,
                                   loss_scale, trainer.grad_accum_steps, cell.xla)
            model.optimizer.build(model.trainable_variables)
        model.make_train_function()
        built[cell] = (model, [v.numpy() for v in model.weights],
                       [v.numpy() for v in model.optimizer.variables])
        return model

    def batches(cell: autotune_lib.Cell, batch: int):
        return cached_batches(train_files, task, runtime, batch * runtime.replicas)

    def batch_for(precision: str) -> int:
        if not batch_auto:
            return int(trainer.batch_size)
        if precision not in batches_by_precision:
            cap = float(trainer.batch_memory_mb)
            max_batch = max(1, data_lib.count_examples(train_files) // runtime.replicas)
            if on_gpu and not multi_worker:
                cell = autotune_lib.Cell(precision, False)
                model = build(cell, 1)
                fits = batch_lib.measured_fits(
                    lambda b: float(model.train_function(batches(cell, b))["loss"]),
                    lambda: tf.config.experimental.get_memory_info("GPU:0"),
                    lambda: tf.config.experimental.reset_memory_stats("GPU:0"),
                    cap, tf.errors.ResourceExhaustedError,
                )
                how = "one training step per probe on GPU:0" + (
                    f", allocator peak <= trainer.batch_memory_mb {cap:.0f} MB" if cap else "")
            else:
                keras.mixed_precision.set_dtype_policy(precision)
                plain = build_model(name, task.input_shape, task.num_classes, **dict(params))
                fits = batch_lib.estimated_fits(
                    lambda b: batch_lib.estimate_training_memory_mb(plain, b), cap)
                how = (f"estimated training memory <= trainer.batch_memory_mb {cap:.0f} MB; "
                       f"{batch_lib.estimate_training_memory_mb(plain, 1):.2f} MB at batch 1")
            batches_by_precision[precision] = batch_lib.choose_batch_size(
                precision, fits, how, trainer.base_batch_size, max_batch,
                f"the train split's {max_batch} examples per replica",
            )
        return batches_by_precision[precision]["batch_size"]

    previous_policy = keras.mixed_precision.global_policy()
    try:
        tuning = autotune_lib.tune(autotune_lib.TuningRequest(
            autotune=trainer.autotune, precision=trainer.precision, xla=trainer.xla,
            devices=devices,
            static=(runtime.policy, runtime.policy_reason, runtime.xla, runtime.xla_reason),
            identity={
                "tensorflow": tf.__version__, "model": name, "params": params,
                "input_shape": task.input_shape, "strategy": runtime.strategy_name,
                "replicas": runtime.replicas, "precision": trainer.precision,
                "xla": trainer.xla, "grad_accum_steps": trainer.grad_accum_steps,
                "batch_size": trainer.batch_size,
                "batch_memory_mb": trainer.batch_memory_mb if batch_auto else None,
            },
            cache_dir=trainer.autotune_cache_dir,
            build=build, batches=batches, batch_for=batch_for, replicas=runtime.replicas,
            measure=not multi_worker,
        ))
    finally:
        keras.mixed_precision.set_dtype_policy(previous_policy)
    choice = tuning["choice"]
    batch = int(choice["batch_size"])
    learning_rate = runtime.learning_rate
    if batch_auto:
        chosen = batches_by_precision.get(choice["precision"])
        tuning["batch_size_reason"] = chosen["reason"] if chosen else (
            f"batch_size auto under {choice['precision']}: {batch} (cached decision)")
        learning_rate = batch_lib.scale_learning_rate(
            learning_rate, trainer.base_batch_size, batch, trainer.batch_lr_scaling)
        tuning["batch_size_reason"] += (
            f"; learning rate {runtime.learning_rate:g} -> {learning_rate:g} "
            f"({trainer.batch_lr_scaling} scaling from base batch {trainer.base_batch_size})")
    tuned = dataclasses.replace(
        runtime, policy=choice["precision"], policy_reason=tuning["reason"],
        xla=bool(choice["xla"]), xla_reason=tuning["xla_reason"],
        global_batch_size=batch * runtime.replicas, learning_rate=learning_rate,
    )
    reusable = None
    winner = built.get(autotune_lib.Cell(choice["precision"], bool(choice["xla"])))
    if tuning["status"] == "measured" and winner and learning_rate == runtime.learning_rate:
        reusable, weights, slots = winner
        reusable.set_weights(weights)  # undo the probe's steps (BatchNorm statistics too)
        for variable, value in zip(reusable.optimizer.variables, slots, strict=True):
            variable.assign(value)
    built.clear()
    tuning["trained_probe_model"] = reusable is not None
    if tuning["table"]:
        logging.info("Trainer: autotune %s in %.1f s (key %s):\n%s", tuning["status"],
                     tuning["probe_seconds"], tuning["key"],
                     autotune_lib.format_table(tuning["table"]))
    logging.info("Trainer: training with precision=%s (%s); xla=%s; batch %d per replica%s",
                 tuned.policy, tuned.policy_reason, tuned.xla, batch,
                 f" ({tuning['batch_size_reason']})" if batch_auto else "")
    return tuned, tuning, reusable


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
) -> dict[str, Any]:
    """`trainer.distill.precision`: the teacher's compute precision, decided like the
    student's. `auto` with `trainer.autotune: on` times the frozen teacher's prediction
    step on a real batch (`images`, the student's batch adapted to the teacher) under each
    plausible precision, with the student's XLA setting and batch (the teacher runs inside
    the student's train step), cached under `identity`; otherwise the static rules.

    Args:
        build: the frozen teacher under a dtype policy, in the strategy's scope.

    Returns the autotune record (`choice["precision"]`, `reason`, `status`, `table`).
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

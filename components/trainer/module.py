"""TFX Trainer module: trains a registry model on the ingest Examples and exports it.

The Trainer calls `run_fn(fn_args)`. Precision, XLA and the distribution strategy are
resolved from the devices present ("auto") or taken from the config; the model is checked
by the mixed-precision lint before the first step; training resumes from its
BackupAndRestore checkpoint after a kill; the serving model is always exported in float32
(see export.py), with its Keras weights beside it (see warm_start.py).

Under MultiWorkerMirroredStrategy every worker runs `run_fn` with the same `fn_args`; only
the chief writes the serving model, the Keras weights, TensorBoard logs and
training_summary.json; the other workers write theirs to a scratch folder they delete.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf
from absl import logging

from components import pod_env
from components.trainer import autotune as autotune_lib
from components.trainer import batch_size as batch_lib
from components.trainer import data as data_lib
from components.trainer import export as export_lib
from components.trainer import strategy as strategy_lib
from components.trainer.callbacks import (
    LOSS_SCALE,
    CheckpointFault,
    DivergenceGuard,
    EpochHistory,
    EpochTensorBoard,
    ThroughputCallback,
    TrainingStatsCallback,
)
from components.trainer.lint import check_mixed_precision
from components.trainer.optimizer import LossScaleSettings, build_optimizer, current_loss_scale
from components.trainer.precision import (
    apply_recurrent_precision,
    describe_devices,
    find_recurrent_layers,
    recurrent_precision_warning,
    resolve_precision_policy,
    resolve_xla,
)
from components.trainer.training_model import TrainingModel
from components.trainer.warm_start import (
    save_keras_weights,
    warm_start_weights,
    weights_checksum,
)
from models import CLASSIFICATION, build_model, model_task
from models.segmentation import DiceBCELoss, DiceCoefficient
from models.user_module import resolve_model_name

if TYPE_CHECKING:  # importing TFX costs ~25 CPU seconds; run_fn only reads attributes
    from tfx import v1 as tfx

SUMMARY_FILE = "training_summary.json"
LOG_DIR = "logs"
BACKUP_DIR = "backup"
_DEFAULT_CONFIG: dict[str, dict[str, Any]] = {
    "data": {"channels": "auto"},
    "model": {"name": "seed_cnn", "input_size": [16, 16], "params": {}, "module_file": "",
              "module_sha256": "", "module_source": "", "builder": "build_model",
              "task": "classification"},
    "trainer": {
        "epochs": 15,
        "batch_size": 32,
        "learning_rate": 0.001,
        "precision": "auto",
        "prefer_bfloat16": False,
        "strategy": "auto",
        "xla": "auto",
        "seed": 42,
        "scale_learning_rate": False,
        "loss_scale": {},
        "grad_accum_steps": 1,
        "divergence_patience": 5,
        "warm_start": False,
        "backup_dir": "",
        "cache_max_mb": data_lib.DEFAULT_CACHE_MAX_MB,
        "autotune": "on",
        "autotune_cache_dir": "",
        "batch_memory_mb": 1024,
        "base_batch_size": 32,
        "batch_lr_scaling": "linear",
        "recurrent_precision": "policy",
    },
    "export": {"serving_precision": "float32"},
}


def _read_config(custom_config: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Returns each config section with defaults filled in."""
    custom_config = custom_config or {}
    config = {}
    for section, defaults in _DEFAULT_CONFIG.items():
        given = custom_config.get(section) or {}
        if not isinstance(given, Mapping):
            raise ValueError(
                f"custom_config[{section!r}] must be a dict. Received: {section}={given!r}"
            )
        config[section] = {**defaults, **given}
    trainer = config["trainer"]
    trainer["autotune"] = {True: "on", False: "off"}.get(trainer["autotune"], trainer["autotune"])
    if trainer["autotune"] not in autotune_lib.AUTOTUNE_CHOICES:
        raise ValueError(f"trainer.autotune must be on or off. Received: "
                         f"autotune={trainer['autotune']!r}")
    sized = [] if trainer["batch_size"] == "auto" else ["batch_size"]
    for key in ("epochs", *sized, "grad_accum_steps", "divergence_patience", "base_batch_size"):
        if int(trainer[key]) < 1:
            raise ValueError(f"trainer.{key} must be positive. Received: {key}={trainer[key]}")
    input_size = config["model"]["input_size"]
    if len(input_size) != 2 or min(int(v) for v in input_size) < 1:
        raise ValueError(
            f"model.input_size must be [height, width]. Received: input_size={input_size}"
        )
    serving_precision = config["export"]["serving_precision"]
    if serving_precision != "float32":
        raise ValueError(
            "Only float32 serving models are exported. "
            f"Received: serving_precision={serving_precision!r}"
        )
    # A user's module file (staged in the pipeline root) is imported and registered here;
    # everything below builds it by its registry name like any other model.
    config["model"]["name"] = resolve_model_name(config["model"])
    if config["model"]["module_file"]:
        logging.info("Trainer: model %s imported from %s", config["model"]["name"],
                     config["model"]["module_file"])
    return config


def _resolve_channels(setting: str | int, train_files: list[str]) -> int:
    """Returns the channel count: the first train example's for "auto", else `setting`."""
    if setting == "auto":
        return data_lib.read_channels(train_files)
    if str(setting) not in ("1", "3", "4"):
        raise ValueError(f"data.channels must be auto, 1, 3 or 4. Received: channels={setting!r}")
    return int(setting)


@dataclasses.dataclass(frozen=True)
class _Runtime:
    """How this run trains, resolved from the config and the devices present."""

    strategy: tf.distribute.Strategy
    strategy_name: str
    policy: str
    policy_reason: str
    xla: bool
    xla_reason: str
    global_batch_size: int
    learning_rate: float

    @property
    def replicas(self) -> int:
        return self.strategy.num_replicas_in_sync


def _resolve_runtime(trainer: Mapping[str, Any], tf_config: Mapping[str, Any]) -> _Runtime:
    """Resolves strategy, precision and XLA; creates the strategy before any other TF op,
    as MultiWorkerMirroredStrategy requires."""
    devices = describe_devices()
    strategy, strategy_name = strategy_lib.resolve_strategy(trainer["strategy"], devices, tf_config)
    policy, policy_reason = resolve_precision_policy(
        trainer["precision"], devices, bool(trainer["prefer_bfloat16"])
    )
    xla, xla_reason = resolve_xla(trainer["xla"], devices)
    replicas = strategy.num_replicas_in_sync
    learning_rate = float(trainer["learning_rate"])
    if trainer["scale_learning_rate"]:
        learning_rate *= replicas  # linear scaling rule for the larger global batch
    runtime = _Runtime(
        strategy=strategy,
        strategy_name=strategy_name,
        policy=policy,
        policy_reason=policy_reason,
        xla=xla,
        xla_reason=xla_reason,
        # batch_size auto: the base batch until _tune_runtime measures the real one.
        global_batch_size=(int(trainer["base_batch_size"]) if trainer["batch_size"] == "auto"
                           else int(trainer["batch_size"])) * replicas,
        learning_rate=learning_rate,
    )
    logging.info(
        "Trainer: precision=%s (%s); xla=%s (%s); strategy=%s, %d replica(s), global batch %d",
        policy,
        policy_reason,
        xla,
        xla_reason,
        strategy_name,
        replicas,
        runtime.global_batch_size,
    )
    return runtime


@dataclasses.dataclass(frozen=True)
class _Task:
    """What the model learns and from which examples: shapes, loss and metrics."""

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    channels: int
    label_names: list[str]
    metric: str  # the headline metric in the history: "accuracy" or "dice"

    @property
    def is_classification(self) -> bool:
        return self.name == CLASSIFICATION


def _resolve_task(
    model_config: Mapping[str, Any], data_config: Mapping[str, Any], train_files: list[str]
) -> _Task:
    """Reads labels, channels and (for volumes) the volume shape from the train split."""
    task = model_task(model_config["name"])
    label_names = data_lib.read_label_names(train_files)
    channels = _resolve_channels(data_config["channels"], train_files)
    input_size = [int(v) for v in model_config["input_size"]]
    if task == CLASSIFICATION:
        return _Task(task, (*input_size, channels), len(label_names), channels, label_names,
                     "accuracy")
    depth, height, width = data_lib.read_volume_shape(train_files)
    if [height, width] != input_size:
        raise ValueError(
            f"model {model_config['name']!r} segments whole volumes of {depth}x{height}x{width} "
            f"voxels, so model.input_size must be their slice size [{height}, {width}]. "
            f"Received: input_size={input_size}; fix: --set model.input_size=[{height},{width}]"
        )
    return _Task(task, (depth, height, width, channels), 2, channels, label_names, "dice")


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
    learning_rate: float,
    policy: str,
    loss_scale: LossScaleSettings,
    grad_accum_steps: int,
    xla: bool,
) -> None:
    """Compiles with Adam (loss-scaled under float16, accumulating when asked), the task's
    loss and metric, and XLA on or off. Call inside the strategy's scope."""
    if task == CLASSIFICATION:
        loss, metrics = keras.losses.SparseCategoricalCrossentropy(), ["accuracy"]
    else:
        loss, metrics = DiceBCELoss(), [DiceCoefficient()]
    model.compile(
        optimizer=build_optimizer(learning_rate, policy, loss_scale, grad_accum_steps),
        loss=loss,
        metrics=metrics,
        jit_compile=xla,
        auto_scale_loss=False,  # build_optimizer already wrapped it when needed
    )


def _tune_runtime(
    runtime: _Runtime, trainer: Mapping[str, Any], model_config: Mapping[str, Any], task: _Task,
    fn_args: tfx.components.FnArgs, multi_worker: bool,
) -> tuple[_Runtime, dict[str, Any], keras.Model | None]:
    """`trainer.autotune` and `trainer.batch_size: auto` (autotune.py, batch_size.py): the
    measured cell and batch replace the static rules' choice. Leaves the dtype policy as
    it found it.

    Returns the runtime, the record, and the measured winner's model reset to the state it
    was built in (weights and optimizer slots), or None: training it skips building and
    tracing the train step a second time, so the probe costs only the other cells."""
    devices = describe_devices()
    on_gpu = any(d.kind == "GPU" for d in devices)
    batch_auto = trainer["batch_size"] == "auto"
    loss_scale = LossScaleSettings.from_config(trainer["loss_scale"])
    name, params = model_config["name"], model_config["params"]
    batches_by_precision: dict[str, dict[str, Any]] = {}
    built: dict[autotune_lib.Cell, tuple[keras.Model, list, list]] = {}

    def build(cell: autotune_lib.Cell, batch: int) -> keras.Model:
        keras.mixed_precision.set_dtype_policy(cell.precision)
        with runtime.strategy.scope():
            model = build_training_model(name, params, task.input_shape, task.num_classes,
                                         cell.precision)
            compile_training_model(model, task.name, runtime.learning_rate, cell.precision,
                                   loss_scale, int(trainer["grad_accum_steps"]), cell.xla)
            model.optimizer.build(model.trainable_variables)
        model.make_train_function()
        built[cell] = (model, [v.numpy() for v in model.weights],
                       [v.numpy() for v in model.optimizer.variables])
        return model

    def batches(cell: autotune_lib.Cell, batch: int):
        images, labels = _real_batch(fn_args, task, batch * runtime.replicas)
        # unbatch/batch: the element spec of the training dataset (batch dimension None),
        # so fit reuses the winner's traced train step instead of tracing it again.
        dataset = tf.data.Dataset.from_tensors((images, labels)).repeat().unbatch().batch(
            batch * runtime.replicas)
        return iter(runtime.strategy.experimental_distribute_dataset(dataset))

    def batch_for(precision: str) -> int:
        if not batch_auto:
            return int(trainer["batch_size"])
        if precision not in batches_by_precision:
            cap = float(trainer["batch_memory_mb"])
            max_batch = max(1, data_lib.count_examples(fn_args.train_files) // runtime.replicas)
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
                precision, fits, how, int(trainer["base_batch_size"]), max_batch,
                f"the train split's {max_batch} examples per replica",
            )
        return batches_by_precision[precision]["batch_size"]

    previous_policy = keras.mixed_precision.global_policy()
    try:
        tuning = autotune_lib.tune(autotune_lib.TuningRequest(
            autotune=trainer["autotune"], precision=trainer["precision"], xla=trainer["xla"],
            devices=devices,
            static=(runtime.policy, runtime.policy_reason, runtime.xla, runtime.xla_reason),
            identity={
                "tensorflow": tf.__version__, "model": name, "params": params,
                "input_shape": task.input_shape, "strategy": runtime.strategy_name,
                "replicas": runtime.replicas, "precision": trainer["precision"],
                "xla": trainer["xla"], "grad_accum_steps": trainer["grad_accum_steps"],
                "batch_size": trainer["batch_size"],
                "batch_memory_mb": trainer["batch_memory_mb"] if batch_auto else None,
            },
            cache_dir=str(trainer["autotune_cache_dir"] or ""),
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
            learning_rate, int(trainer["base_batch_size"]), batch, trainer["batch_lr_scaling"])
        tuning["batch_size_reason"] += (
            f"; learning rate {runtime.learning_rate:g} -> {learning_rate:g} "
            f"({trainer['batch_lr_scaling']} scaling from base batch {trainer['base_batch_size']})")
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


def _real_batch(fn_args: tfx.components.FnArgs, task: _Task, size: int
                ) -> tuple[tf.Tensor, tf.Tensor]:
    """The first `size` train examples (repeated when the split is smaller), decoded like
    training decodes them: the same data for every cell the probe times."""
    make = data_lib.make_dataset if task.is_classification else data_lib.make_volume_dataset
    shape = task.input_shape[:2] if task.is_classification else task.input_shape[:3]
    dataset = make(fn_args.train_files, shape, task.channels, size, shuffle=False, seed=0,
                   repeat=True, cache_max_mb=0)
    return next(iter(dataset))


def _datasets(
    fn_args: tfx.components.FnArgs, task: _Task, runtime: _Runtime, seed: int, repeat: bool,
    cache_max_mb: float,
) -> tuple[tf.data.Dataset, tf.data.Dataset, int, int]:
    train_examples = data_lib.count_examples(fn_args.train_files)
    eval_examples = data_lib.count_examples(fn_args.eval_files)
    if task.is_classification:
        def make(files, shuffle, count):
            return data_lib.make_dataset(
                files, task.input_shape[:2], task.channels, runtime.global_batch_size,
                shuffle=shuffle, seed=seed, num_examples=count, repeat=repeat,
                cache_max_mb=cache_max_mb,
            )
    else:
        def make(files, shuffle, count):
            return data_lib.make_volume_dataset(
                files, task.input_shape[:3], task.channels, runtime.global_batch_size,
                shuffle=shuffle, seed=seed, num_examples=count, repeat=repeat,
                cache_max_mb=cache_max_mb,
            )
    return (
        make(fn_args.train_files, True, train_examples),
        make(fn_args.eval_files, False, eval_examples),
        train_examples,
        eval_examples,
    )


def backup_dir_for(fn_args: tfx.components.FnArgs, trainer: Mapping[str, Any],
                   tf_config: Mapping[str, Any]) -> str:
    """The BackupAndRestore folder of this training: stable across restarts of the same
    training (same config and input files), distinct for any other, one per task.

    `trainer.backup_dir`, else `<pipeline_root>/Trainer/backup` (two levels above
    `fn_args.model_run_dir`, which TFX numbers per execution). The execution's
    `model_run_dir` is part of the key: a retried pod of one execution resumes, while two
    runs with the same config never share (and delete) one folder.
    """
    base = trainer.get("backup_dir") or os.path.join(
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


@dataclasses.dataclass
class TrainingResult:
    """What `train_and_export` did, for run_fn and for tests that inspect the model.

    Attributes:
        model: the trained model (under the training dtype policy).
        summary: the content of training_summary.json.
        chief: whether this process wrote the shared outputs.
        serving_model_dir: where this process exported (a deleted scratch folder on
            non-chief workers).
    """

    model: keras.Model
    summary: dict[str, Any]
    chief: bool
    serving_model_dir: str


def train_and_export(fn_args: tfx.components.FnArgs) -> TrainingResult:
    """Trains the configured model and exports it; the body of `run_fn`.

    Raises:
        ValueError: a bad config value or input data, named.
        MixedPrecisionLintError: the model is unsafe under the resolved precision.
        TrainingDivergedError: the loss stayed NaN/inf (see callbacks.DivergenceGuard).
    """
    started = time.perf_counter()
    config = _read_config(fn_args.custom_config)
    model_config, trainer = config["model"], config["trainer"]
    tf_config = pod_env.read_tf_config()
    runtime = _resolve_runtime(trainer, tf_config)
    chief = pod_env.is_chief(tf_config)
    multi_worker = runtime.strategy_name == "multi_worker"
    seed = int(trainer["seed"])
    keras.utils.set_random_seed(seed)

    task = _resolve_task(model_config, config["data"], fn_args.train_files)
    runtime, tuning, probed_model = _tune_runtime(runtime, trainer, model_config, task, fn_args,
                                                  multi_worker)
    keras.utils.set_random_seed(seed)  # the probe's models drew from the same generators
    train_dataset, eval_dataset, train_examples, eval_examples = _datasets(
        fn_args, task, runtime, seed, repeat=multi_worker,
        cache_max_mb=float(trainer["cache_max_mb"]),
    )
    fit_steps: dict[str, int] = {}
    if multi_worker:
        # Every worker must run the same number of steps: repeat and count them.
        fit_steps = {
            "steps_per_epoch": max(1, train_examples // runtime.global_batch_size),
            "validation_steps": max(1, eval_examples // runtime.global_batch_size),
        }

    task_name = pod_env.task_name(tf_config)
    scratch = None if chief else tempfile.mkdtemp(prefix=f"mptfx-{task_name}-")
    serving_model_dir = fn_args.serving_model_dir if chief else os.path.join(scratch, "serving")
    model_run_dir = fn_args.model_run_dir if chief else os.path.join(scratch, "model_run")
    loss_scale = LossScaleSettings.from_config(trainer["loss_scale"])
    grad_accum_steps = int(trainer["grad_accum_steps"])
    backup_dir = backup_dir_for(fn_args, trainer, tf_config)

    throughput = ThroughputCallback(train_examples)
    epoch_history = EpochHistory(backup_dir)
    previous_policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_dtype_policy(runtime.policy)
    try:
        with runtime.strategy.scope():
            model = probed_model or build_training_model(
                model_config["name"], model_config["params"], task.input_shape,
                task.num_classes, runtime.policy, str(trainer["recurrent_precision"]),
            )
            warm_started_from = None
            if trainer["warm_start"]:
                warm_started_from = warm_start_weights(
                    model, model_config["name"], model_config["params"], task.input_shape,
                    task.num_classes, getattr(fn_args, "base_model", None),
                )
            initial_weights_checksum = weights_checksum(model)
            if probed_model is None:
                compile_training_model(
                    model, task.name, runtime.learning_rate, runtime.policy, loss_scale,
                    grad_accum_steps, runtime.xla,
                )
        callbacks = [
            throughput,
            TrainingStatsCallback(),
            DivergenceGuard(
                int(trainer["divergence_patience"]), runtime.learning_rate, runtime.policy
            ),
            epoch_history,  # after the callbacks that add to the epoch logs
            # double_checkpoint: a kill while the checkpoint is written leaves the previous
            # one (.bkp), which Keras restores instead of failing every retry.
            keras.callbacks.BackupAndRestore(backup_dir, double_checkpoint=True),
            EpochTensorBoard(os.path.join(model_run_dir, LOG_DIR)),
        ]
        if CheckpointFault.wanted():  # crash tests only (components/faults.py)
            callbacks.insert(len(callbacks) - 1, CheckpointFault(backup_dir))  # after the backup
        train_started = time.perf_counter()
        model.fit(
            train_dataset,
            validation_data=eval_dataset,
            epochs=int(trainer["epochs"]),
            callbacks=callbacks,
            verbose=2,
            **fit_steps,
        )
        train_seconds = time.perf_counter() - train_started
    finally:
        keras.mixed_precision.set_dtype_policy(previous_policy)

    float_model = export_lib.rebuild_in_float32(
        model, model_config["name"], model_config["params"], task.input_shape, task.num_classes
    )
    save_keras_weights(float_model, serving_model_dir)
    final_weights_checksum = weights_checksum(float_model)
    export_lib.export_serving_model(
        model,
        model_config["name"],
        model_config["params"],
        list(task.input_shape[-3:-1]),
        task.channels,
        task.label_names,
        serving_model_dir,
    )
    history = epoch_history.history()
    epoch_history.remove()  # BackupAndRestore removed its folder when fit finished
    epochs_trained = len(next(iter(history.values()), []))
    if LOSS_SCALE not in history:
        history[LOSS_SCALE] = [None] * epochs_trained
    summary = {
        "precision": runtime.policy,
        "precision_reason": runtime.policy_reason,
        "strategy": runtime.strategy_name,
        "replicas": runtime.replicas,
        "xla": runtime.xla,
        "epochs": int(trainer["epochs"]),
        "batch_size": runtime.global_batch_size // runtime.replicas,
        "global_batch_size": runtime.global_batch_size,
        "learning_rate": runtime.learning_rate,
        "images_per_sec": throughput.images_per_sec,
        "input_size": list(task.input_shape[-3:-1]),
        "channels": task.channels,
        "label_names": task.label_names,
        "history": history,
        # Beyond the contract: useful for tracking and benchmarks.
        "model": model_config["name"],
        "task": task.name,
        "input_shape": list(task.input_shape),
        "xla_reason": runtime.xla_reason,
        "grad_accum_steps": grad_accum_steps,
        "effective_batch_size": runtime.global_batch_size * grad_accum_steps,
        "loss_scale": _loss_scale_summary(model, runtime.policy, loss_scale),
        "skipped_steps": int(sum(v or 0 for v in history.get("skipped_steps", []))),
        "lint": "passed",
        # Read from the trained layers: what each recurrent layer really computed in.
        "recurrent_precision": trainer["recurrent_precision"],
        "recurrent_layers": {layer.name: layer.dtype_policy.name
                             for layer in find_recurrent_layers(model)},
        "model_file": model_config["module_source"] or None,
        "model_file_staged": model_config["module_file"] or None,
        "model_file_sha256": model_config["module_sha256"] or None,
        "warm_started_from": warm_started_from,
        "initial_weights_checksum": initial_weights_checksum,
        "final_weights_checksum": final_weights_checksum,
        "resumed_at_epoch": epoch_history.resumed_at_epoch,
        "train_examples": train_examples,
        "eval_examples": eval_examples,
        "train_seconds": train_seconds,
        "images_per_sec_per_epoch": history.get("images_per_sec", []),
        "workers": _cluster_workers(tf_config),
        "task_name": task_name,
        "autotune": tuning,
        "batch_size_reason": tuning.get("batch_size_reason", "requested"),
        "autotune_probe_seconds": tuning["probe_seconds"],
    }
    final_metric = (history.get(f"val_{task.metric}") or [None])[-1]
    summary[f"val_{task.metric}"] = final_metric
    if not task.is_classification:
        summary["dice"] = final_metric
    _write_summary(model_run_dir, summary)
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
        logging.info("Trainer: not the chief; scratch outputs in %s deleted", scratch)
    logging.info(
        "Trainer: done in %.1f s (fit %.1f s); %.0f train images/sec; val_%s %s; model at %s",
        time.perf_counter() - started,
        train_seconds,
        throughput.images_per_sec,
        task.metric,
        final_metric,
        serving_model_dir,
    )
    return TrainingResult(model, summary, chief, serving_model_dir)


def _loss_scale_summary(
    model: keras.Model, policy: str, settings: LossScaleSettings
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


def _write_summary(model_run_dir: str, summary: Mapping[str, Any]) -> None:
    tf.io.gfile.makedirs(model_run_dir)
    with tf.io.gfile.GFile(os.path.join(model_run_dir, SUMMARY_FILE), "w") as f:
        json.dump(summary, f, indent=2)


def run_fn(fn_args: tfx.components.FnArgs) -> None:
    """Trains the configured model and exports the float32 serving model.

    Args:
        fn_args: uses only `train_files`, `eval_files` (Examples file patterns),
            `serving_model_dir` (the SavedModel; the Keras weights go to the sibling
            `Format-Keras/model.weights.h5`), `model_run_dir` (TensorBoard logs and
            training_summary.json), `base_model` (with `trainer.warm_start`) and
            `custom_config` ({"data", "model", "trainer", "export"} dicts); TF_CONFIG
            selects the cluster for multi-worker training.
    """
    train_and_export(fn_args)

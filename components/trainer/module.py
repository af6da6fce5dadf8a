"""TFX Trainer module: trains a registry model on the ingest Examples and exports it.

The Trainer calls `run_fn(fn_args)`. Precision, XLA and the distribution strategy are
resolved from the devices present ("auto") or taken from the config; the serving model
is always exported in float32 (see export.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Mapping
from typing import Any

import keras
import tensorflow as tf
from absl import logging
from tfx import v1 as tfx

from components.trainer import data as data_lib
from components.trainer import export as export_lib
from components.trainer import strategy as strategy_lib
from components.trainer.callbacks import ThroughputCallback
from components.trainer.precision import (
    describe_devices,
    resolve_precision_policy,
    resolve_xla,
)
from models import build_model

SUMMARY_FILE = "training_summary.json"
LOG_DIR = "logs"
_DEFAULT_CONFIG: dict[str, dict[str, Any]] = {
    "data": {"channels": "auto"},
    "model": {"name": "seed_cnn", "input_size": [16, 16], "params": {}},
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
    for key in ("epochs", "batch_size"):
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
        global_batch_size=int(trainer["batch_size"]) * replicas,
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


def _build_and_compile(
    model_config: Mapping[str, Any], runtime: _Runtime, input_shape: tuple, num_classes: int
) -> keras.Model:
    """Builds the registry model under the current dtype policy in the strategy's scope."""
    with runtime.strategy.scope():
        model = build_model(
            model_config["name"], input_shape, num_classes, **model_config["params"]
        )
        # Under mixed_float16, compile wraps Adam in a LossScaleOptimizer by itself.
        model.compile(
            optimizer=keras.optimizers.Adam(runtime.learning_rate),
            loss=keras.losses.SparseCategoricalCrossentropy(),
            metrics=["accuracy"],
            jit_compile=runtime.xla,
        )
    return model


def _write_summary(model_run_dir: str, summary: Mapping[str, Any]) -> None:
    tf.io.gfile.makedirs(model_run_dir)
    with tf.io.gfile.GFile(os.path.join(model_run_dir, SUMMARY_FILE), "w") as f:
        json.dump(summary, f, indent=2)


def run_fn(fn_args: tfx.components.FnArgs) -> None:
    """Trains the configured model and exports the float32 serving model.

    Args:
        fn_args: uses only `train_files`, `eval_files` (Examples file patterns),
            `serving_model_dir` (the SavedModel), `model_run_dir` (TensorBoard logs and
            training_summary.json) and `custom_config` ({"data", "model", "trainer",
            "export"} dicts); TF_CONFIG selects the cluster for multi-worker training.
    """
    started = time.perf_counter()
    config = _read_config(fn_args.custom_config)
    model_config, trainer = config["model"], config["trainer"]
    tf_config = strategy_lib.read_tf_config()
    runtime = _resolve_runtime(trainer, tf_config)
    keras.utils.set_random_seed(int(trainer["seed"]))

    label_names = data_lib.read_label_names(fn_args.train_files)
    channels = _resolve_channels(config["data"]["channels"], fn_args.train_files)
    input_size = [int(v) for v in model_config["input_size"]]
    train_examples = data_lib.count_examples(fn_args.train_files)
    eval_examples = data_lib.count_examples(fn_args.eval_files)
    train_dataset = data_lib.make_dataset(
        fn_args.train_files,
        input_size,
        channels,
        runtime.global_batch_size,
        shuffle=True,
        seed=int(trainer["seed"]),
        num_examples=train_examples,
    )
    eval_dataset = data_lib.make_dataset(
        fn_args.eval_files,
        input_size,
        channels,
        runtime.global_batch_size,
        shuffle=False,
        num_examples=eval_examples,
    )

    throughput = ThroughputCallback(train_examples)
    previous_policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_dtype_policy(runtime.policy)
    try:
        model = _build_and_compile(model_config, runtime, (*input_size, channels), len(label_names))
        train_started = time.perf_counter()
        history = model.fit(
            train_dataset,
            validation_data=eval_dataset,
            epochs=int(trainer["epochs"]),
            callbacks=[
                throughput,
                keras.callbacks.TensorBoard(os.path.join(fn_args.model_run_dir, LOG_DIR)),
            ],
            verbose=2,
        )
        train_seconds = time.perf_counter() - train_started
    finally:
        keras.mixed_precision.set_dtype_policy(previous_policy)

    if not strategy_lib.is_chief(tf_config):
        logging.info("Trainer: not the chief task; leaving export to the chief.")
        return
    export_lib.export_serving_model(
        model,
        model_config["name"],
        model_config["params"],
        input_size,
        channels,
        label_names,
        fn_args.serving_model_dir,
    )
    summary = {
        "precision": runtime.policy,
        "precision_reason": runtime.policy_reason,
        "strategy": runtime.strategy_name,
        "replicas": runtime.replicas,
        "xla": runtime.xla,
        "epochs": int(trainer["epochs"]),
        "batch_size": int(trainer["batch_size"]),
        "global_batch_size": runtime.global_batch_size,
        "learning_rate": runtime.learning_rate,
        "images_per_sec": throughput.images_per_sec,
        "input_size": input_size,
        "channels": channels,
        "label_names": label_names,
        "history": {k: [float(v) for v in values] for k, values in history.history.items()},
        # Beyond the contract: useful for tracking and benchmarks.
        "model": model_config["name"],
        "xla_reason": runtime.xla_reason,
        "train_examples": train_examples,
        "eval_examples": eval_examples,
        "train_seconds": train_seconds,
        "images_per_sec_per_epoch": throughput.epoch_images_per_sec,
    }
    _write_summary(fn_args.model_run_dir, summary)
    logging.info(
        "Trainer: done in %.1f s (fit %.1f s); %.0f train images/sec; val_accuracy %.4f; "
        "model at %s",
        time.perf_counter() - started,
        train_seconds,
        throughput.images_per_sec,
        summary["history"]["val_accuracy"][-1],
        fn_args.serving_model_dir,
    )

"""How and what this run trains, resolved before the first step.

`Runtime`: strategy, precision policy, XLA, global batch and learning rate, from the config
and the devices present. `Task`: the model to build and what it learns from the train split
(shapes, classes, channels, headline metric).

    runtime = resolve_runtime(config.trainer, pod_env.read_tf_config())
    task = resolve_task(config.model, config.data, fn_args.train_files)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import tensorflow as tf
from absl import logging

from components.examples_format import examples_uri_of, read_label_names
from components.trainer import data as data_lib
from components.trainer import strategy as strategy_lib
from components.trainer.config import DataSection, StagedModelSection, TrainerSection
from components.trainer.precision import describe_devices, resolve_precision_policy, resolve_xla
from models import CLASSIFICATION, model_task
from models.choice import ModelChoice, choose_model
from models.user_module import resolve_model_name


@dataclasses.dataclass(frozen=True)
class Runtime:
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
        """Replicas in sync: the global batch is `replicas` per-replica batches."""
        return self.strategy.num_replicas_in_sync

    @property
    def multi_worker(self) -> bool:
        """Whether every worker runs run_fn (MultiWorkerMirroredStrategy)."""
        return self.strategy_name == "multi_worker"


def resolve_runtime(trainer: TrainerSection, tf_config: Mapping[str, Any]) -> Runtime:
    """Resolves strategy, precision and XLA; creates the strategy before any other TF op,
    as MultiWorkerMirroredStrategy requires."""
    devices = describe_devices()
    strategy, strategy_name = strategy_lib.resolve_strategy(trainer.strategy, devices, tf_config)
    policy, policy_reason = resolve_precision_policy(
        trainer.precision, devices, trainer.prefer_bfloat16
    )
    xla, xla_reason = resolve_xla(trainer.xla, devices)
    replicas = strategy.num_replicas_in_sync
    learning_rate = float(trainer.learning_rate)
    if trainer.scale_learning_rate:
        learning_rate *= replicas  # linear scaling rule for the larger global batch
    # batch_size auto: the base batch until tuning.choose_training measures the real one.
    batch = trainer.base_batch_size if trainer.batch_size == "auto" else trainer.batch_size
    runtime = Runtime(
        strategy=strategy,
        strategy_name=strategy_name,
        policy=policy,
        policy_reason=policy_reason,
        xla=xla,
        xla_reason=xla_reason,
        global_batch_size=int(batch) * replicas,
        learning_rate=learning_rate,
    )
    logging.info(
        "Trainer: precision=%s (%s); xla=%s (%s); strategy=%s, %d replica(s), global batch %d",
        policy, policy_reason, xla, xla_reason, strategy_name, replicas,
        runtime.global_batch_size,
    )
    return runtime


@dataclasses.dataclass(frozen=True)
class Task:
    """What trains and what it learns from: the model, shapes, classes and metric.

    Attributes:
        model_name: the registry name to build (a user's module file registered).
        model_params: the builder's keyword arguments.
        name: "classification" or "segmentation".
        input_shape: one example, (H, W, C) or (D, H, W, C).
        num_classes: classes (2 for segmentation: background, foreground).
        channels: image channels.
        label_names: class names, index = class id.
        metric: the headline metric in the history, "accuracy" or "dice".
        choice: the model and input size, and why (`auto` resolved from the data).
    """

    model_name: str
    model_params: Mapping[str, Any]
    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    channels: int
    label_names: list[str]
    metric: str
    choice: ModelChoice

    @property
    def is_classification(self) -> bool:
        """Whether the model classifies whole images (else it segments volumes)."""
        return self.name == CLASSIFICATION

    @property
    def input_size(self) -> list[int]:
        """[H, W] of an image (of a volume's slices)."""
        return list(self.input_shape[-3:-1])


def resolve_task(
    model: StagedModelSection, data: DataSection, train_files: list[str]
) -> Task:
    """Registers a user's module file, reads labels and the stored images' sizes and
    channels from the train split, and resolves `model.name` / `model.input_size` "auto"
    from them (models/choice.py).

    Raises:
        ValueError: a segmentation model whose input_size is not the volumes' slice size.
    """
    # A user's module file (staged in the pipeline root) is imported and registered here;
    # everything after builds it by its registry name like any other model.
    registered = resolve_model_name(model.model_dump()) if model.module_file else model.name
    if model.module_file:
        logging.info("Trainer: model %s imported from %s", registered, model.module_file)
    label_names = read_label_names(examples_uri_of(train_files))
    channels = resolve_channels(data.channels, train_files)
    profile = data_lib.read_image_profile(train_files)
    choice = choose_model(registered, model.input_size, profile)
    logging.info("Trainer: model %s (%s); input size %s (%s)", choice.name, choice.name_reason,
                 "x".join(map(str, choice.input_size)), choice.input_size_reason)
    task = model_task(choice.name)
    input_size = choice.input_size
    if task == CLASSIFICATION:
        return Task(choice.name, dict(model.params), task, (*input_size, channels),
                    len(label_names), channels, label_names, "accuracy", choice)
    depth, height, width = data_lib.read_volume_shape(train_files)
    if [height, width] != input_size:
        raise ValueError(
            f"model {choice.name!r} segments whole volumes of {depth}x{height}x{width} "
            f"voxels, so model.input_size must be their slice size [{height}, {width}]. "
            f"Received: input_size={input_size}; fix: --set model.input_size=[{height},{width}]"
            " (or auto)"
        )
    return Task(choice.name, dict(model.params), task, (depth, height, width, channels), 2,
                channels, label_names, "dice", choice)


def resolve_channels(setting: str, train_files: list[str]) -> int:
    """The channel count: the first train example's for "auto", else `setting` ("1", "3";
    DataSection refuses anything else)."""
    if setting == "auto":
        return data_lib.read_channels(train_files)
    return int(setting)

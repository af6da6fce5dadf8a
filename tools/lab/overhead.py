"""Trainer overhead: the mptfx Trainer's `run_fn` against a plain `model.fit` script.

All variants train the same registry model at the same input size, batch, precision and
XLA setting for the same epochs on the same ingested digits, with validation on the eval
split after every epoch:

- plain fit: what a Keras user writes: decode the images once into memory,
  `model.fit(x, y, ...)`;
- plain fit on the Trainer's dataset: the same `fit`, fed by the Trainer's own tf.data
  pipeline (`make_dataset` with its defaults: read, decode PNG and resize in the first
  epoch, from the in-memory cache after), without the Trainer's callbacks; it separates
  the cost of the input pipeline from the rest;
- the Trainer: `run_fn` as TFX calls it (its pipeline, TensorBoard, verbose=2, export).

All are timed by the same instrument, `ThroughputCallback` (train images/sec per epoch,
validation excluded), and run in turn `rounds` times so a change in machine load hits all
of them; each variant's figure is the median of all its epochs after each run's first.
ratio = Trainer / plain fit (>= 1: the framework costs no speed).

Example:

    result = trainer_vs_fit(data, "seed_cnn", (16, 16), 32, "auto", "auto", 4, "/tmp/o", 2)
    result["ratio"]
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from tfx import v1 as tfx

from benchmarks.measures.training import build_compiled_model
from components.examples_format import read_label_names
from components.trainer import data as data_lib
from components.trainer import module
from components.trainer.callbacks import ThroughputCallback
from components.trainer.precision import describe_devices, resolve_precision_policy, resolve_xla
from tools.lab.rates import epoch_rates


def pooled_median(runs: list[dict[str, Any]]) -> float:
    """Median images/sec over every epoch but the first of every run: an epoch of the
    digits lasts a fraction of a second, so one run's few epochs are too noisy alone."""
    return statistics.median(epoch_rates(runs))


def load_arrays(
    file_patterns: list[str], input_size: Sequence[int], channels: int
) -> tuple[np.ndarray, np.ndarray]:
    """Decodes a split once into memory, with the Trainer's own preprocessing."""
    dataset = data_lib.make_dataset(file_patterns, input_size, channels, 256, shuffle=False)
    images, labels = zip(*dataset.as_numpy_iterator(), strict=True)
    return np.concatenate(images), np.concatenate(labels)


def run_trainer(
    data: dict[str, Any], trainer_config: dict[str, Any], model_config: dict[str, Any], out: str
) -> dict[str, Any]:
    """Runs the Trainer's `run_fn` as TFX would; returns its training summary."""
    fn_args = tfx.components.FnArgs(
        train_files=data["train_files"],
        eval_files=data["eval_files"],
        serving_model_dir=os.path.join(out, "Format-Serving"),
        model_run_dir=os.path.join(out, "model_run"),
        custom_config={
            "data": {"channels": "auto"},
            "model": model_config,
            "trainer": trainer_config,
            "export": {"serving_precision": "float32"},
        },
    )
    started = time.perf_counter()
    module.run_fn(fn_args)
    wall_seconds = time.perf_counter() - started
    with open(os.path.join(fn_args.model_run_dir, module.SUMMARY_FILE)) as f:
        summary = json.load(f)
    summary["run_fn_seconds"] = wall_seconds
    return summary


def run_plain_fit(
    train: tuple[np.ndarray, np.ndarray] | tf.data.Dataset,
    validation: tuple[np.ndarray, np.ndarray] | tf.data.Dataset,
    train_examples: int,
    model_name: str,
    input_size: Sequence[int],
    channels: int,
    num_classes: int,
    precision: str,
    xla: bool,
    batch_size: int,
    epochs: int,
    seed: int,
) -> dict[str, Any]:
    """`model.fit` on in-memory arrays `(x, y)` or on batched datasets; returns the same
    throughput figures as the Trainer's summary."""
    keras.utils.set_random_seed(seed)
    previous_policy = keras.mixed_precision.global_policy()
    try:
        model = build_compiled_model(
            model_name, (*input_size, channels), num_classes, precision, xla
        )
        throughput = ThroughputCallback(train_examples)
        x, y = train if isinstance(train, tuple) else (train, None)
        started = time.perf_counter()
        model.fit(
            x,
            y,
            batch_size=batch_size if y is not None else None,
            epochs=epochs,
            validation_data=validation,
            callbacks=[throughput],
            verbose=0,
        )
        fit_seconds = time.perf_counter() - started
    finally:
        keras.mixed_precision.set_dtype_policy(previous_policy)
    return {
        "images_per_sec": throughput.images_per_sec,
        "images_per_sec_per_epoch": throughput.epoch_images_per_sec,
        "fit_seconds": fit_seconds,
    }


def trainer_vs_fit(
    data: dict[str, Any],
    model_name: str,
    input_size: Sequence[int],
    batch_size: int,
    precision: str,
    xla: str,
    epochs: int,
    work_dir: str,
    rounds: int,
) -> dict[str, Any]:
    """Runs the three variants in turn `rounds` times; returns their medians and ratios."""
    devices = describe_devices()
    policy, _ = resolve_precision_policy(precision, devices)
    xla_on, _ = resolve_xla(xla, devices)
    label_names = read_label_names(data["examples_dir"])
    channels, num_classes = data["channels"], len(label_names)
    arrays = (
        load_arrays(data["train_files"], input_size, channels),
        load_arrays(data["eval_files"], input_size, channels),
    )
    datasets = (  # exactly as run_fn builds them
        data_lib.make_dataset(data["train_files"], input_size, channels, batch_size, shuffle=True,
                              seed=42, num_examples=data["train_examples"]),
        data_lib.make_dataset(data["eval_files"], input_size, channels, batch_size,
                              shuffle=False, num_examples=data["eval_examples"]),
    )
    fit_settings = (model_name, input_size, channels, num_classes, policy, xla_on, batch_size,
                    epochs, 42)
    trainer_config = {
        "epochs": epochs,
        "batch_size": batch_size,
        "precision": precision,
        "xla": xla,
        "strategy": "auto",
        "seed": 42,
    }
    model_config = {"name": model_name, "input_size": list(input_size), "params": {}}
    plain_runs, dataset_runs, trainer_runs = [], [], []
    for index in range(rounds):
        plain_runs.append(run_plain_fit(*arrays, data["train_examples"], *fit_settings))
        keras.backend.clear_session()
        dataset_runs.append(run_plain_fit(*datasets, data["train_examples"], *fit_settings))
        keras.backend.clear_session()
        trainer_runs.append(
            run_trainer(data, trainer_config, model_config, os.path.join(work_dir, str(index)))
        )
        keras.backend.clear_session()
    plain = pooled_median(plain_runs)
    on_dataset = pooled_median(dataset_runs)
    trainer = pooled_median(trainer_runs)
    return {
        "model": model_name,
        "input_size": list(input_size),
        "batch_size": batch_size,
        "precision": policy,
        "xla": xla_on,
        "epochs": epochs,
        "rounds": rounds,
        "train_examples": data["train_examples"],
        "plain_fit_images_per_sec": plain,
        "plain_fit_on_trainer_dataset_images_per_sec": on_dataset,
        "trainer_images_per_sec": trainer,
        "ratio": trainer / plain,
        "dataset_ratio": on_dataset / plain,
        "trainer_vs_same_dataset_ratio": trainer / on_dataset,
        "plain_runs": plain_runs,
        "dataset_runs": dataset_runs,
        "trainer_runs": [
            {key: run.get(key) for key in (
                "images_per_sec", "images_per_sec_per_epoch", "train_seconds", "run_fn_seconds"
            )}
            for run in trainer_runs
        ],
    }

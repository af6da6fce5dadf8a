"""Keras callbacks the Trainer adds to `fit`.

- `ThroughputCallback`: train images/sec per epoch (`images_per_sec` in the epoch logs).
- `TrainingStatsCallback`: the learning rate, the loss scale (`loss_scale`) and the
  overflow steps skipped (`skipped_steps`) per epoch into the epoch logs, so TensorBoard
  and the history get them next to loss, metrics and `gradient_norm`.
- `DivergenceGuard`: tells a skipped overflow step (normal under loss scaling) from real
  divergence (a non-finite loss for K consecutive steps) and stops the run with a
  diagnostic.
- `EpochHistory`: the per-epoch history across restarts: saved atomically next to (not in)
  the BackupAndRestore folder, which Keras says nothing else may write to, so a resumed
  run still reports every epoch.

Put them before Keras' TensorBoard callback: they add keys to the epoch logs it writes.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
import uuid

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from components.faults import ENV_FAULT, fault_point
from components.trainer.optimizer import current_loss_scale
from components.trainer.training_model import PER_STEP_KEYS, STEP_LOSS, STEP_SKIPPED

IMAGES_PER_SEC = "images_per_sec"
LOSS_SCALE = "loss_scale"
LEARNING_RATE = "learning_rate"
SKIPPED_STEPS = "skipped_steps"
HISTORY_FILE = "epoch_history.json"


class TrainingDivergedError(RuntimeError):
    """Training produced a non-finite loss for too many consecutive steps."""


def _scalar(value: object) -> float:
    return float(np.asarray(value))


class ThroughputCallback(keras.callbacks.Callback):
    """Measures training images/sec per epoch (validation time excluded).

    images/sec = train examples per epoch / seconds from epoch start to its last train
    batch. `images_per_sec` is the median over epochs, leaving out the first (which pays
    for tracing) whenever there are two or more. Each epoch's rate also goes into the
    epoch logs as `images_per_sec`.

    Example:

        throughput = ThroughputCallback(num_train_examples)
        model.fit(..., callbacks=[throughput])
        throughput.images_per_sec
    """

    def __init__(self, examples_per_epoch: int) -> None:
        super().__init__()
        if examples_per_epoch < 1:
            raise ValueError(f"examples_per_epoch must be positive. Received: {examples_per_epoch}")
        self.examples_per_epoch = examples_per_epoch
        self.epoch_images_per_sec: list[float] = []
        self._epoch_start = 0.0
        self._last_batch_end = 0.0
        self._epoch = 0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._epoch_start = self._last_batch_end = time.perf_counter()
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._last_batch_end = time.perf_counter()
        if batch == 0 and self._epoch == 1:
            fault_point("epoch")

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        seconds = max(self._last_batch_end - self._epoch_start, 1e-9)
        rate = self.examples_per_epoch / seconds
        self.epoch_images_per_sec.append(rate)
        if logs is not None:
            logs[IMAGES_PER_SEC] = rate
        logging.info("epoch %d: %.1f train images/sec", epoch + 1, rate)

    @property
    def images_per_sec(self) -> float:
        """Median images/sec over epochs after the first (0.0 before any epoch)."""
        rates = self.epoch_images_per_sec
        if not rates:
            return 0.0
        return statistics.median(rates[1:] if len(rates) > 1 else rates)


class TrainingStatsCallback(keras.callbacks.Callback):
    """Adds `learning_rate`, `loss_scale` (when the loss is scaled) and `skipped_steps` to
    the epoch logs and drops the per-step signals (`step_loss`, `step_skipped`) from them."""

    def __init__(self) -> None:
        super().__init__()
        self._skipped = 0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._skipped = 0

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if logs and STEP_SKIPPED in logs:
            self._skipped += int(_scalar(logs[STEP_SKIPPED]) > 0.5)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if logs is None:
            return
        for key in PER_STEP_KEYS:
            logs.pop(key, None)
        optimizer = self.model.optimizer
        logs[LEARNING_RATE] = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
        scale = current_loss_scale(optimizer)
        if scale is not None:
            logs[LOSS_SCALE] = scale
        logs[SKIPPED_STEPS] = float(self._skipped)
        if self._skipped:
            logging.info(
                "epoch %d: %d overflow step(s) skipped by loss scaling (normal); loss scale %s",
                epoch + 1,
                self._skipped,
                scale,
            )


class DivergenceGuard(keras.callbacks.Callback):
    """Stops training when the loss is NaN/inf for `patience` consecutive steps.

    A step skipped by dynamic loss scaling (finite loss, overflowing float16 gradients) is
    normal and only counted. Raises `TrainingDivergedError` naming the step, the last
    loss scale and what to try; Keras' BackupAndRestore keeps the last good epoch.

    Args:
        patience: consecutive non-finite steps that count as divergence (K).
        learning_rate: the configured learning rate, quoted in the advice.
        policy_name: the dtype policy, quoted in the advice.
    """

    def __init__(self, patience: int, learning_rate: float, policy_name: str) -> None:
        super().__init__()
        if int(patience) < 1:
            raise ValueError(
                f"trainer.divergence_patience must be >= 1. Received: patience={patience}"
            )
        self.patience = int(patience)
        self.learning_rate = learning_rate
        self.policy_name = policy_name
        self.skipped_steps = 0
        self._bad_run = 0
        self._first_bad: tuple[int, int, int] | None = None
        self._epoch = 0
        self._step = 0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._step += 1
        if not logs or STEP_LOSS not in logs:
            return
        loss = _scalar(logs[STEP_LOSS])
        if math.isfinite(loss):
            self._bad_run = 0
            self._first_bad = None
            self.skipped_steps += int(_scalar(logs.get(STEP_SKIPPED, 0.0)) > 0.5)
            return
        self._bad_run += 1
        if self._first_bad is None:
            self._first_bad = (self._step, self._epoch, batch)
        if self._bad_run >= self.patience:
            raise TrainingDivergedError(self._diagnostic(loss))

    def _diagnostic(self, loss: float) -> str:
        step, epoch, batch = self._first_bad or (self._step, self._epoch, 0)
        scale = current_loss_scale(self.model.optimizer)
        scaling = (
            f"last loss scale {scale:g}, {self.skipped_steps} overflow step(s) skipped before"
            if scale is not None
            else "no loss scaling"
        )
        return (
            f"Training diverged: the loss was {loss} for {self._bad_run} consecutive steps, "
            f"from step {step} (epoch {epoch + 1}, batch {batch + 1}); precision "
            f"{self.policy_name}, {scaling}. Try: a lower trainer.learning_rate (now "
            f"{self.learning_rate:g}); trainer.precision=float32 to rule out float16 range "
            "problems; a larger batch or trainer.grad_accum_steps for noisy gradients; and "
            "check the input data for NaN/inf values"
        )


def history_path_for(backup_dir: str) -> str:
    """`<backup_dir>.epoch_history.json`: beside the BackupAndRestore folder, never in it."""
    return f"{backup_dir.rstrip('/')}.{HISTORY_FILE}"


class EpochHistory(keras.callbacks.Callback):
    """Per-epoch logs that survive a restart: saved to `history_path_for(backup_dir)` after
    every epoch (a unique temporary file renamed over the old one, so a kill mid-write
    leaves the previous history), reloaded by the next attempt and cut to the epoch it
    resumes at. `remove()` deletes it once the training has finished.

    Args:
        backup_dir: the BackupAndRestore folder of this run.

    Attributes:
        resumed_at_epoch: the 1-based epoch this attempt started at, if it resumed.
    """

    def __init__(self, backup_dir: str) -> None:
        super().__init__()
        self._path = history_path_for(backup_dir)
        self.epochs: list[dict[str, float | None]] = []
        if tf.io.gfile.exists(self._path):
            with tf.io.gfile.GFile(self._path) as f:
                self.epochs = json.load(f)
        self.resumed_at_epoch: int | None = None
        self._started = False

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        if self._started:
            return
        self._started = True
        # BackupAndRestore has set the initial epoch by now; keep what precedes it.
        self.epochs = self.epochs[:epoch]
        if epoch > 0:
            self.resumed_at_epoch = epoch + 1
            logging.info("Trainer: resuming from the backup at epoch %d", epoch + 1)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.epochs.append({k: _maybe_float(v) for k, v in (logs or {}).items()})
        tf.io.gfile.makedirs(os.path.dirname(self._path))
        temporary = f"{self._path}.tmp-{uuid.uuid4().hex[:8]}"
        with tf.io.gfile.GFile(temporary, "w") as f:
            json.dump(self.epochs, f)
        tf.io.gfile.rename(temporary, self._path, overwrite=True)

    def remove(self) -> None:
        """Delete the saved history (the training it belongs to has finished)."""
        if tf.io.gfile.exists(self._path):
            tf.io.gfile.remove(self._path)

    def history(self) -> dict[str, list[float | None]]:
        """{metric: [value per epoch]} over every epoch, this attempt's and earlier ones'."""
        keys: list[str] = []
        for entry in self.epochs:
            keys.extend(k for k in entry if k not in keys)
        return {k: [entry.get(k) for entry in self.epochs] for k in keys}


def _maybe_float(value: object) -> float | None:
    try:
        number = _scalar(value)
    except (TypeError, ValueError):
        return None
    return number


class CheckpointFault(keras.callbacks.Callback):
    """The crash tests' `MPTFX_FAULT=checkpoint`: after BackupAndRestore has written the
    2nd epoch's checkpoint, cut its weights file in half and die, as a kill mid-write does.
    Added to the callbacks only when that fault is asked for."""

    def __init__(self, backup_dir: str) -> None:
        super().__init__()
        self._weights = os.path.join(backup_dir, "latest.weights.h5")

    @staticmethod
    def wanted() -> bool:
        """True when this run was started with MPTFX_FAULT=checkpoint."""
        return os.environ.get(ENV_FAULT) == "checkpoint"

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if epoch == 1 and os.path.exists(self._weights):
            with open(self._weights, "r+b") as handle:
                handle.truncate(os.path.getsize(self._weights) // 2)
            fault_point("checkpoint")


class EpochTensorBoard(keras.callbacks.TensorBoard):
    """Keras' TensorBoard callback, without its per-batch work when it writes per epoch.

    With `update_freq="epoch"` (the default) Keras 3.12 still calls `tf.summary.scalar` for
    every log key after every training batch; no writer is active then, so nothing is
    written, but the calls cost 0.2-0.7 ms per step: 5-10% of the 16x16 seed_cnn's step
    (measured by the lab's `python -m tools.lab --sections overhead`). This subclass hands
    Keras no batch logs then, so it writes no per-batch scalars; the epoch summaries, the
    graph (written at the first batch), `write_steps_per_second` and profiling are Keras'
    own.
    """

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        super().on_train_batch_end(batch, logs if self.update_freq != "epoch" else None)

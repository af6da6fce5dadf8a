"""Keras callbacks the Trainer adds to `fit`."""

from __future__ import annotations

import statistics
import time

import keras
from absl import logging


class ThroughputCallback(keras.callbacks.Callback):
    """Measures training images/sec per epoch (validation time excluded).

    images/sec = train examples per epoch / seconds from epoch start to its last train
    batch. `images_per_sec` is the median over epochs, leaving out the first (which pays
    for tracing) whenever there are two or more.

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

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._epoch_start = self._last_batch_end = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._last_batch_end = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        seconds = max(self._last_batch_end - self._epoch_start, 1e-9)
        rate = self.examples_per_epoch / seconds
        self.epoch_images_per_sec.append(rate)
        logging.info("epoch %d: %.1f train images/sec", epoch + 1, rate)

    @property
    def images_per_sec(self) -> float:
        """Median images/sec over epochs after the first (0.0 before any epoch)."""
        rates = self.epoch_images_per_sec
        if not rates:
            return 0.0
        return statistics.median(rates[1:] if len(rates) > 1 else rates)

"""Input-bound detection: how much of each training step waited for its batch, and how fast
the model alone steps.

Mixed precision buys speed only while the input pipeline keeps up (NVIDIA's EfficientNet-B0
gains 1.15x from AMP where B4 gains 2.7x: its augmentation is CPU-bound). So the Trainer
measures, per epoch:

- `input_wait_share`: the seconds the train step spent waiting for its next batch, over the
  epoch's stepping seconds (its first batch's start to its last batch's end). Measured at
  the iterator: `InputWaitMeter.watch` zips a clock in front of the input pipeline (`zip`
  asks the clock, then the pipeline, in that order), and a last map adds "now - asked" to
  a float64 CPU variable. It runs inside the step's own `GetNext` and adds no host sync
  (the variable is read once per epoch): two small tf.data function calls per batch
  (`mptfx bench --sections system_metrics` times the training with and without it).
- `steps_per_sec`: training steps over the same seconds.

and once per run the steps/s of the model alone on one cached batch: the autotune probe's
row for the chosen cell when it timed one (`trainer.autotune`), else a short measurement
after training (the probe's own timing loop on the trained model, whose weights and
optimizer state are put back). When the wait is at least `INPUT_BOUND_SHARE` of the step,
`assess` writes one sentence naming what to change and how much faster the step would be.

Under several replicas the clock sits before the strategy's per-device prefetch: the share
is then that of the prefetch thread, an upper bound of the step's.

    meter = InputWaitMeter()
    train_dataset = meter.watch(train_dataset)
    model.fit(train_dataset, callbacks=[meter.callback, ...])
    record = assess_training(history, model, runtime, task, trainer, choice.autotune, train_files,
                             train_examples)
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf

from components.trainer.config import TrainerSection
from components.trainer.runtime import Runtime, Task
from components.trainer.tuning_record import TuningRecord

INPUT_WAIT_SHARE = "input_wait_share"
STEPS_PER_SEC = "steps_per_sec"
# A step that waits this much of its time for input is input-bound: the advice is written.
INPUT_BOUND_SHARE = 0.25


class InputWaitMeter:
    """Adds up the seconds a dataset's consumer waits for each element; its `callback`
    turns them into `input_wait_share` and `steps_per_sec` in every epoch's logs."""

    def __init__(self) -> None:
        with tf.device("/CPU:0"):  # outside any strategy scope: one plain CPU variable
            self._waited = tf.Variable(0.0, dtype=tf.float64, trainable=False,
                                       name="input_wait_seconds")
        self.callback = _InputWaitCallback(self)

    @property
    def waited_seconds(self) -> float:
        """Seconds waited so far, over every batch handed out."""
        return float(self._waited.numpy())

    def watch(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        """`dataset`'s elements, unchanged, each after adding its wait to the meter."""
        waited = self._waited
        # Stateful maps stay sequential (tf.data parallelises only stateless ones): the clock
        # reads the time when the consumer asks, the record map when the batch arrived.
        clock = tf.data.Dataset.from_tensors(tf.constant(0, tf.int8)).repeat().map(
            lambda _: tf.timestamp())

        def record(asked: tf.Tensor, batch: Any) -> Any:
            waited.assign_add(tf.timestamp() - asked)
            return batch

        # tf.data appends a prefetch after a pipeline's last synchronous map by default
        # (`inject_prefetch`): its thread, not the step, would then ask the clock, and the
        # wait would be the pipeline's time per batch even where the step never waited
        # (a 30 ms producer beside a 50 ms step measured 0.58 where the step waited about 8 %).
        options = tf.data.Options()
        options.experimental_optimization.inject_prefetch = False
        return tf.data.Dataset.zip((clock, dataset)).map(record).with_options(options)


class _InputWaitCallback(keras.callbacks.Callback):
    """Per epoch: waited seconds / seconds from its first train batch's start to its last
    train batch's end.

    The window opens at the first batch, not at the epoch's start: in between, Keras drops
    the previous epoch's iterator, and tf.data's teardown of it took up to 2.5 s on 2 busy
    cores (2026-12-06), time in which no step ran and none waited. Counted, it halved the
    share of such epochs. The first batch's own wait (the pipeline filling) is in the window.
    """

    def __init__(self, meter: InputWaitMeter) -> None:
        super().__init__()
        self._meter = meter
        self._started: float | None = None
        self._last_batch_end = 0.0
        self._waited_at_start = 0.0
        self._steps = 0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._waited_at_start = self._meter.waited_seconds
        self._started = None
        self._steps = 0

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if self._started is None:
            self._started = self._last_batch_end = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._last_batch_end = time.perf_counter()
        self._steps += 1

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if logs is None:
            return
        if self._started is None:  # no train batch ran
            logs[INPUT_WAIT_SHARE] = logs[STEPS_PER_SEC] = 0.0
            return
        seconds = max(self._last_batch_end - self._started, 1e-9)
        waited = self._meter.waited_seconds - self._waited_at_start
        logs[INPUT_WAIT_SHARE] = min(1.0, max(0.0, waited / seconds))
        logs[STEPS_PER_SEC] = self._steps / seconds


def probe_steps_per_sec(tuning: TuningRecord) -> float | None:
    """Steps/s of the chosen cell in the autotune probe's table (measured now or cached),
    or None when the probe timed nothing."""
    row = tuning.chosen_row()
    return 1000.0 / float(row["step_ms"]) if row and row.get("step_ms") else None


def measure_model_alone(model: keras.Model, batches: Callable[[], Any], global_batch: int,
                        policy: str, xla: bool) -> float | None:
    """Steps/s of `model` on one repeated cached batch (`batches()` returns the iterator
    `model.train_function` takes), timed like the autotune probe times a cell; the weights
    and optimizer state are restored afterwards. None when the step failed."""
    from components.trainer import autotune

    weights = [v.numpy() for v in model.weights]
    slots = [v.numpy() for v in model.optimizer.variables]
    try:
        cell = autotune.Cell(policy, xla)
        (row,) = autotune.measure_cells([cell], lambda _: model, lambda _: batches(),
                                        autotune.MeasureSettings(), lambda _: global_batch)
    finally:
        model.set_weights(weights)
        for variable, value in zip(model.optimizer.variables, slots, strict=True):
            variable.assign(value)
    return 1000.0 / row["step_ms"] if row.get("step_ms") else None


def assess_training(history: Mapping[str, Sequence[Any]], model: keras.Model, runtime: Runtime,
                    task: Task, trainer: TrainerSection, tuning: TuningRecord,
                    train_files: list[str], train_examples: int) -> dict[str, Any]:
    """`assess` for a finished fit: the model-alone figure from the autotune probe, else
    measured now (not under multi-worker, where every worker would have to time the same
    number of steps), and the facts the advice names."""
    from components.trainer import data as data_lib
    from components.trainer.tuning import cached_batches

    rate = probe_steps_per_sec(tuning)
    source = f"autotune probe ({tuning.status})"
    if rate is None and runtime.multi_worker:
        source = "not measured under multi-worker training"
    elif rate is None:
        global_batch = runtime.global_batch_size
        rate = measure_model_alone(
            model, lambda: cached_batches(train_files, task, runtime, global_batch),
            global_batch, runtime.policy, runtime.xla)
        source = "measured after training on one cached batch"
    augment = data_lib.resolve_augment(trainer.augment, task.model_name, task.channels)
    # The float32 examples the cache would hold, as data.make_dataset sizes them.
    example_bytes = (4 * math.prod(task.input_shape) + 8 if task.is_classification
                     else 4 * math.prod(task.input_shape[:3]) * (task.channels + 1))
    needed_mb = train_examples * example_bytes / 2**20
    facts = {"augment": augment, "cache_max_mb": trainer.cache_max_mb,
             "cache_needed_mb": needed_mb, "input_size": task.input_size,
             "cached": augment != "crop_flip" and needed_mb <= trainer.cache_max_mb}
    return assess(history, rate, source, facts)


def assess(history: Mapping[str, Sequence[Any]], model_steps_per_sec: float | None,
           model_steps_source: str, advice_facts: Mapping[str, Any]) -> dict[str, Any]:
    """The run's input-bound record (training_summary.json's `input_bound`).

    Args:
        history: the per-epoch logs, with `input_wait_share` and `steps_per_sec`.
        model_steps_per_sec: the model alone on cached batches, if known.
        model_steps_source: where that figure comes from (or why there is none).
        advice_facts: what the advice names: `augment`, `cache_max_mb`, `cached`,
            `cache_needed_mb`, `input_size`.

    Returns:
        {"wait_share", "wait_share_per_epoch", "steps_per_sec", "model_steps_per_sec",
        "model_steps_source", "speedup_without_wait", "threshold", "input_bound", "advice"};
        `wait_share` and `steps_per_sec` are medians over the epochs after the first (which
        fills caches and traces the step) whenever there are two or more.
    """
    shares = [float(v) for v in history.get(INPUT_WAIT_SHARE) or [] if v is not None]
    rates = [float(v) for v in history.get(STEPS_PER_SEC) or [] if v is not None]
    share = _median_after_first(shares)
    speedup = None if share is None else 1.0 / max(1.0 - share, 1e-3)
    record: dict[str, Any] = {
        "wait_share": None if share is None else round(share, 4),
        "wait_share_per_epoch": [round(s, 4) for s in shares],
        "steps_per_sec": _rounded(_median_after_first(rates)),
        "model_steps_per_sec": _rounded(model_steps_per_sec),
        "model_steps_source": model_steps_source,
        "speedup_without_wait": None if speedup is None else round(speedup, 2),
        "threshold": INPUT_BOUND_SHARE,
        "input_bound": share is not None and share >= INPUT_BOUND_SHARE,
        "advice": None,
    }
    if record["input_bound"]:
        record["advice"] = advice(record, advice_facts)
    return record


def advice(record: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    """One sentence: the share, the speed-up without the wait, and what to change."""
    share, speedup = record["wait_share"], record["speedup_without_wait"]
    model, training = record.get("model_steps_per_sec"), record.get("steps_per_sec")
    alone = (f"; the model alone runs {model:.1f} steps/s on cached batches, training ran "
             f"{training:.1f}" if model and training else "")
    size = "x".join(str(v) for v in facts.get("input_size") or [])
    if facts.get("augment") == "crop_flip":
        cache = (f"trainer.cache_max_mb (crop_flip is never cached: trainer.augment=flip or "
                 f"none lets the decoded set, {facts.get('cache_needed_mb', 0):.0f} MB, stay "
                 f"in memory)")
    elif not facts.get("cached"):
        cache = (f"trainer.cache_max_mb (now {facts.get('cache_max_mb')}; the decoded train "
                 f"split needs {facts.get('cache_needed_mb', 0):.0f} MB)")
    else:
        cache = "trainer.cache_max_mb"
    return (
        f"input-bound: {100 * share:.0f} % of each training step waited for its next batch, "
        f"so the step would be {speedup:.1f}x faster without the wait{alone}; change "
        f"{cache}, data.shard_mb (more, smaller shards read in parallel), the decode size "
        f"(store images nearer the {size} input: each is decoded whole, then resized), "
        f"trainer.augment ({facts.get('augment')} now), or give each GPU more CPU in the "
        f"node pool (kubernetes.pools.<pool>.requests and limits cpu)"
    )


def _median_after_first(values: Sequence[float]) -> float | None:
    if not values:
        return None
    return statistics.median(values[1:] if len(values) > 1 else values)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), 2)

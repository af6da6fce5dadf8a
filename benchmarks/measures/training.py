"""One training-throughput cell: a model × precision × XLA setting on synthetic on-device data.

The cell builds and compiles the model exactly as the mptfx Trainer does (registry model,
Adam, sparse categorical cross-entropy, accuracy, `jit_compile=xla`), puts one random
batch on the device, and calls Keras' own train function on it, so what is timed is the
Trainer's train step without any input pipeline (like NVIDIA's `--synthetic` runs).

Timing: the first call (tracing, XLA compilation) and a warm-up are excluded; then
`windows` timed windows of whole steps, each ending with a device sync. The cell's
throughput is the median window.

Example:

    result = run_cell(CellSpec("seed_cnn", "float32", xla=False, batch_size=32,
                               input_shape=(64, 64, 1)))
    result["samples_per_sec"], result["peak_memory_mb"]
"""

from __future__ import annotations

import json
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf

from benchmarks.plan import CellSpec
from components.core.text import one_line
from components.trainer.precision import describe_devices
from models import SEGMENTATION, build_model, model_task
from models.segmentation import DiceBCELoss, DiceCoefficient


def build_compiled_model(
    name: str, input_shape: Sequence[int], num_classes: int, precision: str, xla: bool
) -> keras.Model:
    """Builds `name` under `precision` and compiles it with the Trainer's optimizer and the
    task's loss and metric (components/trainer/module.py): Adam; sparse categorical
    cross-entropy and accuracy for classification, Dice + BCE and Dice for segmentation.

    Under mixed_float16 Keras wraps Adam in a LossScaleOptimizer by itself. This is the
    plain Keras train step (what the Trainer adds to it: the lab's tools/lab/overhead.py).
    """
    keras.mixed_precision.set_dtype_policy(precision)
    model = build_model(name, tuple(input_shape), num_classes)
    if model_task(name) == SEGMENTATION:
        loss, metrics = DiceBCELoss(), [DiceCoefficient()]
    else:
        loss, metrics = keras.losses.SparseCategoricalCrossentropy(), ["accuracy"]
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3), loss=loss, metrics=metrics, jit_compile=xla
    )
    return model


def synthetic_batch(model: keras.Model, batch_size: int, num_classes: int) -> tuple:
    """A random float32 batch in [0, 1] with random labels, created on the default device:
    one class index per image for a classifier, a 0/1 mask shaped like the output for a
    segmentation model (one output channel)."""
    images = tf.random.uniform([batch_size, *model.input_shape[1:]], 0.0, 1.0, seed=1)
    if model.output_shape[-1] == 1:
        mask = tf.random.uniform([batch_size, *model.output_shape[1:]], seed=2) < 0.5
        return images, tf.cast(mask, tf.float32)
    labels = tf.random.uniform([batch_size], 0, num_classes, dtype=tf.int64, seed=2)
    return images, labels


class MemoryMeter:
    """Peak memory of this process: GPU:0's allocator peak with a GPU, else peak RSS."""

    def __init__(self) -> None:
        self.on_gpu = bool(tf.config.list_physical_devices("GPU"))
        self.kind = "GPU peak" if self.on_gpu else "peak RSS"
        self.baseline_mb = self.current_mb()
        if self.on_gpu:
            tf.config.experimental.reset_memory_stats("GPU:0")

    def current_mb(self) -> float:
        """Memory in use now, MB."""
        if self.on_gpu:
            return tf.config.experimental.get_memory_info("GPU:0")["current"] / 2**20
        return _rss_mb()

    def peak_mb(self) -> float:
        """The peak since this meter was created (for RSS: since the process started)."""
        if self.on_gpu:
            return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def time_steps(
    step: Callable[[], Any],
    sync: Callable[[Any], None],
    samples_per_step: int,
    spec: CellSpec,
    between_windows: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """Times `step` after its first call and a warm-up; returns the window statistics.

    Args:
        step: runs one training step, returns something `sync` waits on.
        sync: blocks until the device finished the work behind its argument.
        samples_per_step: batch size.
        spec: warm-up, window length and count, time budget.
        between_windows: called before each window (the interleaved matmul ceiling).
    """
    started = time.perf_counter()
    sync(step())
    first_call_seconds = time.perf_counter() - started

    warmup_steps, warmup_started = 0, time.perf_counter()
    while warmup_steps < 1 or time.perf_counter() - warmup_started < spec.warmup_seconds:
        sync(step())
        warmup_steps += 1
    step_seconds = (time.perf_counter() - warmup_started) / warmup_steps
    steps_per_window = max(1, round(spec.window_seconds / step_seconds))
    affordable = int(spec.time_budget_seconds // (steps_per_window * step_seconds))
    windows = max(2, min(spec.windows, affordable))

    rates = []
    for _ in range(windows):
        between_windows()
        window_started = time.perf_counter()
        for _ in range(steps_per_window):
            outputs = step()
        sync(outputs)
        rates.append(steps_per_window * samples_per_step / (time.perf_counter() - window_started))
    median = statistics.median(rates)
    return {
        "samples_per_sec": median,
        "step_ms": 1000.0 * samples_per_step / median,
        "window_rates": rates,
        "steps_per_window": steps_per_window,
        "first_call_seconds": first_call_seconds,
        "warmup_steps": warmup_steps,
    }


def run_cell(spec: CellSpec) -> dict[str, Any]:
    """Measures one cell; returns its throughput and memory (JSON-able).

    The lab's MFU cell (tools/lab/mfu.py) times the same step with matmul ceilings between
    the windows and counted FLOPs."""
    memory = MemoryMeter()
    model = build_compiled_model(
        spec.model, spec.input_shape, spec.num_classes, spec.precision, spec.xla
    )
    data = [synthetic_batch(model, spec.batch_size, spec.num_classes)]
    model.make_train_function()
    train_function = model.train_function
    timing = time_steps(
        lambda: train_function(data), lambda logs: float(logs["loss"]), spec.batch_size, spec
    )
    return {**timing, **cell_facts(model, spec, memory)}


def cell_facts(model: keras.Model, spec: CellSpec, memory: MemoryMeter) -> dict[str, Any]:
    """What a measured cell reports beside its timing: device, parameters, memory."""
    peak_memory_mb = memory.peak_mb()
    return {
        "unit": "volumes" if len(spec.input_shape) == 4 else "images",
        "device": "GPU" if memory.on_gpu else "CPU",
        "devices": [d.name for d in describe_devices()],
        "params": int(model.count_params()),
        "memory_kind": memory.kind,
        "peak_memory_mb": peak_memory_mb,
        "baseline_memory_mb": memory.baseline_mb,
        # What training added to the idle process (TensorFlow's runtime alone holds
        # ~0.7 GB of RSS on a CPU): the memory a precision can save.
        "training_memory_mb": peak_memory_mb - memory.baseline_mb,
    }


def probe_batch(
    model_name: str, precision: str, batch_size: int, input_shape: Sequence[int], num_classes: int
) -> dict[str, Any]:
    """Runs one training step at `batch_size`; reports whether it fit and the peak memory.

    A GPU out-of-memory error is a "does not fit"; on a CPU the caller enforces the memory
    cap by watching this process's RSS (see launch.run_task).
    """
    memory = MemoryMeter()
    model = build_compiled_model(model_name, input_shape, num_classes, precision, xla=False)
    data = [synthetic_batch(model, batch_size, num_classes)]
    try:
        model.make_train_function()
        float(model.train_function(data)["loss"])
    except tf.errors.ResourceExhaustedError as error:
        return {"fits": False, "reason": one_line(error, limit=200)}
    return {"fits": True, "memory_kind": memory.kind, "peak_memory_mb": memory.peak_mb()}


def probe_batch_ladder(
    model_name: str,
    precision: str,
    batches: Sequence[int],
    input_shape: Sequence[int],
    num_classes: int,
    progress_path: str,
) -> dict[str, Any]:
    """Runs one training step at each batch size in increasing order, in this process.

    After each step a JSON line `{"batch", "fits", "peak_memory_mb"}` is appended to
    `progress_path`, so what was learnt survives the process being killed at the memory
    cap. Stops at the first out-of-memory error. Memory left over from smaller batches can
    only raise the peak, so a batch that fits here fits alone; one that fails here is
    re-checked alone by the caller.
    """
    memory = MemoryMeter()
    model = build_compiled_model(model_name, input_shape, num_classes, precision, xla=False)
    model.make_train_function()
    steps = []
    for batch_size in sorted(batches):
        data = [synthetic_batch(model, batch_size, num_classes)]
        try:
            float(model.train_function(data)["loss"])
            step = {"batch": batch_size, "fits": True, "peak_memory_mb": memory.peak_mb()}
        except tf.errors.ResourceExhaustedError:
            step = {"batch": batch_size, "fits": False}
        steps.append(step)
        with open(progress_path, "a") as progress:
            progress.write(json.dumps(step) + "\n")
        if not step["fits"]:
            break
        del data
    return {"steps": steps, "memory_kind": memory.kind}

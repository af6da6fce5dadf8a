"""`trainer.autotune: on`: measure the plausible precision/XLA cells instead of guessing.

`auto` precision and XLA follow static rules (precision.py), and on this kind of machine
the right answer depends on the model, the input size, the batch and the load: the same
CPU trained the seed CNN 0.95x to 1.78x faster under mixed_bfloat16, ResNet-50 0.87x to
1.06x. So when more than one cell is plausible on the devices found (a CPU with bfloat16
instructions: float32 vs mixed_bfloat16; GPUs: XLA off/on, and mixed_float16 vs
mixed_bfloat16 at compute capability >= 8.0), the Trainer builds the real model for each
cell under the real strategy, runs a few warm-up steps and then a few short timed windows
of each in turn on the same real batch, and trains with the fastest numerically safe one:
float16 only with loss scaling, and never a cell whose loss went NaN/inf.

The decision is cached in the workspace (`trainer.autotune_cache_dir`, one JSON file per
key) under a key of the device fingerprint, TensorFlow version, model, input, batch and
strategy, so a later run with the same key pays nothing.

Example:

    cells = candidate_cells("auto", "auto", devices)        # [float32, mixed_bfloat16]
    rows = measure_cells(cells, build, batch_iterator, MeasureSettings())
    best = fastest_safe(rows)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from components.trainer.precision import CPU_BFLOAT16_FEATURES, DeviceDescription
from components.trainer.tuning_record import CellChoice, TuningRecord

AUTOTUNE_CHOICES = ("on", "off")
_BFLOAT16_MIN_CAPABILITY = (8, 0)
_FLOAT16_MIN_CAPABILITY = (7, 0)


@dataclasses.dataclass(frozen=True)
class Cell:
    """One way to train: a Keras dtype policy and whether the train step is XLA-compiled."""

    precision: str
    xla: bool

    @property
    def label(self) -> str:
        """E.g. `mixed_bfloat16 xla off`, as the log and the table show it."""
        return f"{self.precision} xla {'on' if self.xla else 'off'}"


@dataclasses.dataclass(frozen=True)
class MeasureSettings:
    """How long the probe times each cell; small so the first run pays little.

    Attributes:
        warmup_steps: untimed steps after the first call (which traces and compiles).
        window_seconds: target length of one timed window (whole steps, at least one).
        windows: timed windows per cell, taken in turn across cells so that a change in
            the machine's load hits every cell alike; the median window counts.
    """

    warmup_steps: int = 2
    window_seconds: float = 0.15
    windows: int = 3


def candidate_cells(
    precision: str, xla: str | bool, devices: Sequence[DeviceDescription]
) -> list[Cell]:
    """The cells worth measuring for the requested settings on `devices`.

    Only what is `auto` varies: a fixed precision or XLA setting stays fixed. CPUs never
    get XLA candidates (2-4x slower there); float16 is a GPU candidate only at compute
    capability >= 7.0 and bfloat16 only at >= 8.0 (where the tensor cores have it).
    """
    gpus = [d for d in devices if d.kind == "GPU"]
    tpu = any(d.kind == "TPU" for d in devices)
    if precision != "auto":
        precisions = [precision]
    elif tpu:
        precisions = ["mixed_bfloat16"]
    elif gpus:
        lowest = min(d.compute_capability or (0, 0) for d in gpus)
        precisions = (["mixed_float16", "mixed_bfloat16"] if lowest >= _BFLOAT16_MIN_CAPABILITY
                      else ["mixed_float16"] if lowest >= _FLOAT16_MIN_CAPABILITY
                      else ["float32"])
    else:
        cpus = [d for d in devices if d.kind == "CPU"]
        shared = set.intersection(*(set(d.cpu_features) for d in cpus)) if cpus else set()
        precisions = (["float32", "mixed_bfloat16"] if shared & CPU_BFLOAT16_FEATURES
                      else ["float32"])
    if isinstance(xla, bool) or str(xla).lower() != "auto":
        xlas = [xla if isinstance(xla, bool) else str(xla).lower() in ("on", "true")]
    elif tpu:
        xlas = [True]
    elif gpus:
        xlas = [False, True]
    else:
        xlas = [False]
    return [Cell(p, x) for p in precisions for x in xlas]


def device_fingerprint(devices: Sequence[DeviceDescription], cpuinfo: str = "/proc/cpuinfo"
                       ) -> str:
    """What identifies the hardware a decision was measured on: the CPU model and core
    count, and every device's kind, compute capability and bfloat16 flags."""
    cpu_model = platform.processor() or platform.machine()
    try:
        with open(cpuinfo) as f:
            cpu_model = next((line.split(":", 1)[1].strip() for line in f
                              if line.startswith("model name")), cpu_model)
    except OSError:
        pass
    parts = [f"cpu={cpu_model} x{os.cpu_count()}"] + [
        f"{d.kind}:{d.compute_capability}:{','.join(sorted(d.cpu_features))}" for d in devices
    ]
    return "; ".join(parts)


def decision_key(**identity: Any) -> str:
    """A short stable hash of the decision's identity (fingerprint, TF version, model,
    input shape, batch, strategy, replicas, the requested settings)."""
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


class DecisionCache:
    """Decisions on disk, one `<key>.json` per key, written atomically (a crash mid-write
    leaves the previous decision or none, never half a file)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def path(self, key: str) -> str:
        """The file that holds `key`'s decision."""
        return os.path.join(self.directory, f"{key}.json")

    def load(self, key: str) -> dict[str, Any] | None:
        """The stored decision, or None when there is none or it cannot be read."""
        try:
            with open(self.path(key)) as f:
                decision = json.load(f)
        except (OSError, ValueError):
            return None
        return decision if isinstance(decision, dict) and "choice" in decision else None

    def store(self, key: str, decision: Mapping[str, Any]) -> str:
        """Writes `decision` under `key`; returns its path."""
        os.makedirs(self.directory, exist_ok=True)
        path = self.path(key)
        with open(f"{path}.partial", "w") as f:
            json.dump(decision, f, indent=2, default=str)
        os.replace(f"{path}.partial", path)
        return path


def measure_cells(
    cells: Sequence[Cell],
    build: Callable[[Cell], Any],
    batches: Callable[[Cell], Iterator[Any]],
    settings: MeasureSettings,
    samples_per_step: Callable[[Cell], int],
    clock: Callable[[], float] = time.perf_counter,
    inference: bool = False,
) -> list[dict[str, Any]]:
    """Times one training step (`inference`: one prediction step) of each cell; returns
    one row per cell.

    Args:
        cells: what to measure.
        build: returns the compiled model for a cell (built under its policy, inside the
            strategy's scope) or raises; a cell that cannot be built is reported unsafe.
        batches: an iterator the cell's `model.train_function` takes (the real strategy's
            distributed dataset of one repeated real batch).
        settings: warm-up and window lengths.
        samples_per_step: the global batch of a cell.
        inference: time `model.predict_function` (a frozen teacher's step, which needs no
            loss scaling under float16) instead of `model.train_function`.

    Returns:
        [{"precision", "xla", "batch_size", "images_per_sec", "step_ms", "window_rates",
        "first_step_seconds", "safe", "note"}] with `images_per_sec` None when unsafe.
    """
    step = _predict_step if inference else _step
    probes = []
    for cell in cells:
        row: dict[str, Any] = {"precision": cell.precision, "xla": cell.xla,
                               "batch_size": samples_per_step(cell), "images_per_sec": None,
                               "step_ms": None, "window_rates": [], "safe": True, "note": ""}
        try:
            model = build(cell)
            if cell.precision == "mixed_float16" and not inference and \
                    not _loss_scaled(model.optimizer):
                raise ValueError("float16 without loss scaling")
            iterator = batches(cell)
            started = clock()
            loss = step(model, iterator)
            row["first_step_seconds"] = clock() - started
            started = clock()
            for _ in range(settings.warmup_steps):
                loss = step(model, iterator)
            step_seconds = max((clock() - started) / max(1, settings.warmup_steps), 1e-6)
            if not math.isfinite(loss):
                raise ValueError(f"non-finite loss {loss} in the warm-up steps")
            steps = max(1, round(settings.window_seconds / step_seconds))
            probes.append((row, model, iterator, steps))
        except Exception as error:  # noqa: BLE001 - any failure makes the cell ineligible
            row.update(safe=False, note=f"{type(error).__name__}: {str(error)[:160]}")
            probes.append((row, None, None, 0))
    for _ in range(settings.windows):
        for row, model, iterator, steps in probes:
            if model is None or not row["safe"]:
                continue
            started = clock()
            for _ in range(steps):
                loss = step(model, iterator)
            seconds = max(clock() - started, 1e-9)
            if not math.isfinite(loss):
                row.update(safe=False, note=f"non-finite loss {loss} while timed")
                continue
            row["window_rates"].append(steps * row["batch_size"] / seconds)
    rows = []
    for row, _model, _iterator, _steps in probes:
        if row["safe"] and row["window_rates"]:
            row["images_per_sec"] = statistics.median(row["window_rates"])
            row["step_ms"] = 1000.0 * row["batch_size"] / row["images_per_sec"]
        rows.append(row)
    return rows


def fastest_safe(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The safe row with the highest throughput.

    Raises:
        ValueError: listing each cell's note, when no cell could be measured.
    """
    measured = [row for row in rows if row["safe"] and row["images_per_sec"]]
    if not measured:
        notes = "; ".join(f"{Cell(r['precision'], r['xla']).label}: {r['note']}" for r in rows)
        raise ValueError(f"autotune: no cell trained safely ({notes})")
    return max(measured, key=lambda row: row["images_per_sec"])


def describe_choice(rows: Sequence[Mapping[str, Any]], choice: Mapping[str, Any]) -> str:
    """One sentence for the log and `precision_reason`: the choice and its margin."""
    chosen = Cell(choice["precision"], choice["xla"])
    others = [r for r in rows if r is not choice and r.get("images_per_sec")]
    versus = ", ".join(
        f"{choice['images_per_sec'] / r['images_per_sec']:.2f}x "
        f"{Cell(r['precision'], r['xla']).label}" for r in others
    )
    return (f"autotune: {chosen.label} measured fastest "
            f"({choice['images_per_sec']:.0f} img/s" + (f"; {versus}" if versus else "") + ")")


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The measured table, one line per cell, for the Trainer's log."""
    lines = []
    for row in rows:
        cell = Cell(row["precision"], row["xla"]).label
        rate = (f"{row['images_per_sec']:8.0f} img/s {row['step_ms']:7.2f} ms/step"
                if row["images_per_sec"] else f"unsafe: {row['note']}")
        lines.append(f"  {cell:24s} batch {row['batch_size']:5d}  {rate}")
    return "\n".join(lines)


def _step(model: Any, iterator: Iterator[Any]) -> float:
    logs = model.train_function(iterator)
    return float(logs["loss"])  # waits for the device


def _predict_step(model: Any, iterator: Iterator[Any]) -> float:
    outputs = model.predict_function([next(iterator)])  # Keras' predict step takes batches
    import numpy as np

    return float(np.sum(np.asarray(outputs)))  # waits for the device; NaN stays NaN


def _loss_scaled(optimizer: Any) -> bool:
    import keras

    return isinstance(optimizer, keras.optimizers.LossScaleOptimizer) or bool(
        getattr(optimizer, "loss_scale_factor", None))


@dataclasses.dataclass(frozen=True)
class TuningRequest:
    """Everything `tune` needs from the Trainer, as values and callables (so the GPU paths
    are tested with described devices and stand-in steps).

    Attributes:
        autotune: "on" or "off" (`trainer.autotune`).
        precision, xla: what the config asked for ("auto" or fixed).
        devices: `describe_devices()`.
        static: the static rules' (policy, reason, xla, xla_reason), used when nothing is
            measured.
        identity: what the cached decision is keyed by, besides the device fingerprint.
        cache_dir: where decisions are cached ("" = no cache).
        build: compiled model for a cell at a per-replica batch (inside the strategy scope).
        batches: the train_function iterator of one repeated real batch for a cell and
            per-replica batch.
        batch_for: the per-replica batch for a precision (fixed, or `batch_size: auto`'s).
        replicas: replicas in sync (global batch = per-replica x replicas).
        measure: False where every task must decide alike without talking (multi-worker):
            the static rules apply.
        inference: the cells are a frozen model's prediction steps (a distillation
            teacher's), not training steps.
    """

    autotune: str
    precision: str
    xla: str | bool
    devices: Sequence[DeviceDescription]
    static: tuple[str, str, bool, str]
    identity: Mapping[str, Any]
    cache_dir: str
    build: Callable[[Cell, int], Any]
    batches: Callable[[Cell, int], Iterator[Any]]
    batch_for: Callable[[str], int]
    replicas: int = 1
    measure: bool = True
    settings: MeasureSettings = MeasureSettings()
    inference: bool = False


def tune(request: TuningRequest, clock: Callable[[], float] = time.perf_counter
         ) -> TuningRecord:
    """Decides the cell (and per-replica batch) to train with; returns the record that
    goes into the log, training_summary.json and MLflow (status "off", "one candidate",
    "static (multi-worker)", "cached" or "measured")."""
    started = clock()
    policy, policy_reason, xla, xla_reason = request.static
    cells = candidate_cells(request.precision, request.xla, request.devices)
    static_status = ("off" if request.autotune == "off" else "one candidate" if len(cells) < 2
                     else "static (multi-worker)" if not request.measure else "")
    if static_status:
        return TuningRecord(
            static_status, CellChoice(policy, xla, request.batch_for(policy)), policy_reason,
            xla_reason, tuple(cell.label for cell in cells),
            probe_seconds=round(clock() - started, 3))
    key = decision_key(fingerprint=device_fingerprint(request.devices), **request.identity)
    cache = DecisionCache(request.cache_dir) if request.cache_dir else None
    cached = cache.load(key) if cache else None
    if cached:
        return TuningRecord(
            "cached", CellChoice(**cached["choice"]), cached["reason"] + " [cached]",
            cached["xla_reason"], tuple(cell.label for cell in cells),
            tuple(cached["table"]), round(clock() - started, 3), key, cache.path(key),
            cached.get("probe_seconds"))
    record = _measure(request, cells, clock)
    record = dataclasses.replace(record, key=key,
                                 probe_seconds=round(clock() - started, 3))
    if cache:
        record = dataclasses.replace(record, cache_file=cache.store(key, record.to_dict()))
    return record


def _measure(request: TuningRequest, cells: Sequence[Cell], clock: Callable[[], float]
             ) -> TuningRecord:
    """Times every cell and picks the fastest safe one."""
    batch_of = {cell: request.batch_for(cell.precision) for cell in cells}
    rows = measure_cells(
        cells,
        lambda cell: request.build(cell, batch_of[cell]),
        lambda cell: request.batches(cell, batch_of[cell]),
        request.settings,
        lambda cell: batch_of[cell] * request.replicas,
        clock,
        request.inference,
    )
    best = fastest_safe(rows)
    return TuningRecord(
        "measured",
        CellChoice(best["precision"], best["xla"], best["batch_size"] // request.replicas),
        describe_choice(rows, best),
        f"autotune: measured with XLA {'on' if best['xla'] else 'off'} fastest",
        tuple(cell.label for cell in cells), tuple(rows))

"""What watching the training costs: MLflow's system metrics and the input-wait meter.

The default `mptfx run`'s model trains on the Trainer's own input (`make_dataset` over the
ingested digits, cached as in the default run) with `model.fit`, in timed windows of the
same number of steps, the modes taken in turn within each round so that a change in the
machine's load hits every mode alike:

- `plain`: the dataset as it was before the Trainer measured input waits;
- `input meter`: what the Trainer runs with `tracking.system_metrics: false`
  (components/trainer/input_bound.py's meter and callback);
- `input meter + system metrics`: the default, with MLflow's SystemMetricsMonitor sampling
  to a run of a local MLflow store through components/tracking/system_metrics.py, as the
  Trainer does (started before the window, finished after it).

Example:

    costs = monitoring_cost(data, "auto", "auto", 32, "float32", False, 9, 5.0, 2.0,
                            "/ws/bench/system-metrics")
    costs["system_metrics_ratio"]   # images/s with the monitor / without, median over rounds
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.measures.training import build_compiled_model
from components.tracking import system_metrics
from components.tracking.live_run import open_run, trainer_environment
from components.tracking.store import TrackingStore, local_store_uri
from components.trainer import data as data_lib
from components.trainer.input_bound import InputWaitMeter
from models.choice import ImageProfile, choose_model

MODES = ("plain", "input meter", "input meter + system metrics")
DIGITS_SIDE = 8  # the bench's shared data are the built-in digits


def monitoring_cost(
    data: dict[str, Any], model_name: str, input_size: Sequence[int] | str, batch_size: int,
    precision: str, xla: bool, rounds: int, window_seconds: float, sampling_interval: float,
    store_dir: str,
) -> dict[str, Any]:
    """Images/s of each mode per round, their medians and the ratios to `input meter`.

    Returns:
        {"rows": [{"mode", "images_per_sec", "window_rates", "ratio"}], "steps", "rounds",
        "window_seconds", "sampling_interval", "samples", "system_metrics_ratio",
        "input_meter_ratio", ...}; "samples": CPU samples MLflow holds for the monitored
        windows.
    """
    # `auto` as `mptfx run` resolves it for the digits (8x8 images): seed_cnn at 16x16.
    choice = choose_model(model_name, input_size, ImageProfile(
        data["train_examples"], DIGITS_SIDE, DIGITS_SIDE, data["channels"]))
    model_name, input_size = choice.name, choice.input_size
    dataset = data_lib.make_dataset(
        data["train_files"], input_size, data["channels"], batch_size, shuffle=True,
        num_examples=data["train_examples"], repeat=True)
    model = build_compiled_model(model_name, (*input_size, data["channels"]), 10, precision, xla)
    meter = InputWaitMeter()
    watched = meter.watch(dataset)
    store = TrackingStore(uri=local_store_uri(Path(store_dir)), requested_uri="",
                          workspace=Path(store_dir), experiment="bench-system-metrics",
                          model_name="bench")
    run_id = open_run(store, f"bench-{int(time.time())}")
    environ = trainer_environment(store, run_id, sampling_interval)

    def fit(source: Any, callbacks: list, steps: int) -> tuple[float, float]:
        """(wall seconds, this process's CPU seconds) of `steps` training steps."""
        started, cpu = time.perf_counter(), time.process_time()
        model.fit(source, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=callbacks)
        return time.perf_counter() - started, time.process_time() - cpu

    def monitored(steps: int) -> tuple[float, float]:
        with system_metrics.monitoring(None, environ):
            return fit(watched, [meter.callback], steps)

    windows: dict[str, Callable[[int], tuple[float, float]]] = {
        "plain": lambda steps: fit(dataset, [], steps),
        "input meter": lambda steps: fit(watched, [meter.callback], steps),
        "input meter + system metrics": monitored,
    }
    fit(watched, [meter.callback], 5)  # traces the step, fills the cache
    calibration = 200  # long enough that fit's own start is a small part of it
    steps = max(50, round(window_seconds * calibration / fit(dataset, [], calibration)[0]))
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    cpu_rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    for index in range(rounds):
        order = MODES[index % len(MODES):] + MODES[:index % len(MODES)]
        for mode in order:
            wall, cpu = windows[mode](steps)
            rates[mode].append(steps * batch_size / wall)
            cpu_rates[mode].append(steps * batch_size / max(cpu, 1e-9))
    return _summary(rates, cpu_rates, steps, store, run_id, {
        "model": model_name, "input_size": list(input_size), "batch_size": batch_size,
        "precision": precision, "xla": xla, "rounds": rounds,
        "window_seconds": window_seconds, "sampling_interval": sampling_interval})


def _summary(rates: dict[str, list[float]], cpu_rates: dict[str, list[float]], steps: int,
             store: TrackingStore, run_id: str, facts: dict[str, Any]) -> dict[str, Any]:
    """Each mode's median images/s and images per CPU-second, their median ratio to
    `input meter` within a round (neighbouring windows: a load that drifts over the run
    cancels out), and how much the reference mode's own windows spread (`spread`: the
    interquartile range over the median; the machine's other load)."""
    from components.tracking.store import mlflow_client

    def ratios(series: dict[str, list[float]]) -> dict[str, float]:
        reference = series["input meter"]
        return {mode: statistics.median(r / ref for r, ref in zip(series[mode], reference,
                                                                   strict=True))
                for mode in MODES}

    wall, cpu = ratios(rates), ratios(cpu_rates)
    quartiles = statistics.quantiles(rates["input meter"], n=4)
    history = mlflow_client(store.uri).get_metric_history(
        run_id, "system/cpu_utilization_percentage")
    return {
        **facts, "steps": steps, "samples": len(history),
        "spread": (quartiles[2] - quartiles[0]) / statistics.median(rates["input meter"]),
        "rows": [{"mode": mode, "images_per_sec": statistics.median(rates[mode]),
                  "window_rates": rates[mode], "ratio": wall[mode],
                  "images_per_cpu_second": statistics.median(cpu_rates[mode]),
                  "cpu_ratio": cpu[mode]} for mode in MODES],
        "system_metrics_ratio": wall["input meter + system metrics"],
        "system_metrics_cpu_ratio": cpu["input meter + system metrics"],
        "input_meter_ratio": 1.0 / wall["plain"],
        "input_meter_cpu_ratio": 1.0 / cpu["plain"],
    }

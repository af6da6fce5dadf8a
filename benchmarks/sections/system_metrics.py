"""`system_metrics`: does watching the training slow it down?

The `system_metrics` task (benchmarks/measures/system_metrics.py) trains the default run's model on
the ingested digits in alternated windows: plain input, the Trainer's input-wait meter, and
the meter with MLflow's system metrics sampling into a local store at the default interval.
Target: the run with system metrics within 3 % of the run without (median of the rounds).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.sections.base import number, shape, status_line
from benchmarks.sections.context import Context
from benchmarks.sections.data import DataSection
from benchmarks.sections.tasks import Task, arguments

# With system metrics on, training keeps at least this share of its speed without them.
TARGET_RATIO = 0.97
# Above this spread of the reference windows (IQR / median) the machine's other load moves
# throughput more than the target can tell apart: no verdict on wall time then.
QUIET_SPREAD = 0.06


@dataclasses.dataclass(frozen=True)
class MonitoringParams:
    """The digits, the default run's model and batch, and how long and often to time."""

    data: dict[str, Any]
    model_name: str
    input_size: list[int] | str
    batch_size: int
    precision: str
    xla: bool
    rounds: int
    window_seconds: float
    sampling_interval: float
    store_dir: str


def measure(params: MonitoringParams) -> dict[str, Any]:
    from benchmarks.measures.system_metrics import monitoring_cost

    return monitoring_cost(**arguments(params))


SYSTEM_METRICS = Task("system_metrics", MonitoringParams, measure)


class SystemMetrics(DataSection):
    name = "system_metrics"
    tasks = (SYSTEM_METRICS,)

    def run(self, ctx: Context) -> None:
        from components.tracking.config import TrackingSection
        from components.trainer.config import ModelSection, TrainerSection

        model, trainer = ModelSection(), TrainerSection()
        interval = TrackingSection().system_metrics_interval_seconds

        # Short windows, many rounds: on a shared machine the load moves within seconds, and
        # only windows close in time compare; each window still spans a sampling interval.
        rounds = 15 if ctx.options.quick else 25
        window = max(1.25 * interval, 2.5)
        params = MonitoringParams(
            # "auto" as configured: the worker resolves it for the digits, as a run does.
            data=ctx.data["replicated"], model_name=model.name,
            input_size=model.input_size,
            batch_size=int(trainer.batch_size) if trainer.batch_size != "auto"
            else 32,
            precision="float32", xla=False, rounds=rounds, window_seconds=window,
            sampling_interval=interval, store_dir=str(ctx.bench_dir / "system-metrics"))
        ctx.say(f"  system metrics: {rounds} rounds of {window:.0f} s windows, sampling "
                f"every {interval:g} s ...")
        outcome = ctx.task(SYSTEM_METRICS, params, "system-metrics", timeout=900)
        section: dict[str, Any] = {"status": outcome.status, "error": outcome.error,
                                   **(outcome.result or {})}
        if outcome.ok:
            ctx.say(f"    with system metrics {section['system_metrics_ratio']:.3f}x the "
                    f"speed without; input meter {section['input_meter_ratio']:.3f}x plain")
        ctx.store("system_metrics", section)

    def table(self, results: dict[str, Any]) -> list[str]:
        section = results.get("system_metrics") or {}
        if not section.get("rows"):
            return status_line("System metrics", section)
        lines = [
            f"### System metrics and the input meter ({section['model']} "
            f"{shape(section['input_size'])}, batch {section['batch_size']}, "
            f"{section['precision']}, {section['steps']} steps per window, "
            f"{section['rounds']} alternated rounds; MLflow sampled every "
            f"{section['sampling_interval']:g} s, {section['samples']} samples)",
            "",
            "| mode | images/s (median) | ÷ input meter alone (median of the rounds) | "
            "images per CPU-second | ÷ input meter alone | windows, images/s |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for row in section["rows"]:
            windows = ", ".join(number(rate) for rate in row["window_rates"])
            lines.append(f"| {row['mode']} | {number(row['images_per_sec'])} | "
                         f"{row['ratio']:.3f} | {number(row['images_per_cpu_second'])} | "
                         f"{row['cpu_ratio']:.3f} | {windows} |")
        return lines + ["", f"The input meter's own windows spread "
                            f"{100 * section['spread']:.0f} % (interquartile range over the "
                            f"median): the machine's other load.", ""]

    def verdicts(self, results: dict[str, Any]) -> list[str]:
        section = results.get("system_metrics") or {}
        if not section.get("rows"):
            return []
        ratio, cpu = section["system_metrics_ratio"], section["system_metrics_cpu_ratio"]
        if section["spread"] > QUIET_SPREAD:
            verdict = (f"no verdict: the reference windows spread "
                       f"{100 * section['spread']:.0f} % (> {100 * QUIET_SPREAD:.0f} %), more "
                       f"than the target can tell apart; rerun on a quiet machine")
        else:
            verdict = "PASS" if ratio >= TARGET_RATIO else "FAIL"
        return [f"System metrics: training with MLflow's system metrics runs at {ratio:.3f}× "
                f"the speed without (target ≥ {TARGET_RATIO}): {verdict}; per CPU-second it "
                f"trains {cpu:.3f}× the images; the input-wait meter runs at "
                f"{section['input_meter_ratio']:.3f}× plain input "
                f"({section['input_meter_cpu_ratio']:.3f}× per CPU-second)."]


SECTION = SystemMetrics()

"""`overhead`: the Trainer's `run_fn` against a plain `model.fit` on the same digits.

The `trainer_overhead` task (tools/lab/overhead.py) trains plain fit, plain fit on the
Trainer's tf.data pipeline and the Trainer in turn, `rounds` times; ratio = Trainer / plain
fit. Its verdict says whether the Trainer is as fast, within the noise of a shared
machine, or slower.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from benchmarks.sections.base import shape, status_line, xla
from benchmarks.sections.context import Context
from benchmarks.sections.data import DataSection, pipeline_defaults
from benchmarks.sections.tasks import Task, arguments
from tools.lab.rates import epoch_rates

# Ratios measured on a machine shared with other work wobble by a few percent; within this
# band the Trainer counts as "as fast as" plain fit.
OVERHEAD_TOLERANCE = 0.05


@dataclasses.dataclass(frozen=True)
class OverheadParams:
    """The replicated digits and the default `mptfx run` model and trainer settings."""

    data: dict[str, Any]
    model_name: str
    input_size: list[int]
    batch_size: int
    precision: str
    xla: str
    epochs: int
    work_dir: str
    rounds: int


def measure(params: OverheadParams) -> dict[str, Any]:
    from tools.lab.overhead import trainer_vs_fit

    return trainer_vs_fit(**arguments(params))


TRAINER_OVERHEAD = Task("trainer_overhead", OverheadParams, measure)


class Overhead(DataSection):
    name = "overhead"
    tasks = (TRAINER_OVERHEAD,)

    def run(self, ctx: Context) -> None:
        defaults = pipeline_defaults()
        ctx.say(f"  trainer overhead: run_fn vs plain model.fit, {defaults['model']} "
                f"{defaults['input_size']}, digits x{ctx.data['replicate']}, "
                f"{ctx.preset.overhead_rounds} rounds ...")
        params = OverheadParams(
            data=ctx.data["replicated"], model_name=defaults["model"],
            input_size=defaults["input_size"], batch_size=defaults["batch_size"],
            precision=defaults["precision"], xla=defaults["xla"],
            epochs=ctx.preset.overhead_epochs, work_dir=str(ctx.bench_dir / "overhead"),
            rounds=ctx.preset.overhead_rounds,
        )
        outcome = ctx.task(TRAINER_OVERHEAD, params, "trainer-overhead", timeout=900)
        section = {"status": outcome.status, "error": outcome.error, **(outcome.result or {})}
        if outcome.ok:
            ctx.say(f"    plain fit {section['plain_fit_images_per_sec']:.0f} img/s, Trainer "
                    f"{section['trainer_images_per_sec']:.0f} img/s, "
                    f"ratio {section['ratio']:.2f}")
        ctx.store("overhead", section)

    def table(self, results: dict[str, Any]) -> list[str]:
        section = results.get("overhead") or {}
        if section.get("status") != "ok":
            return status_line("Trainer overhead", section)
        plain = section["plain_fit_images_per_sec"]
        return [
            f"### Trainer overhead ({section['model']} {shape(section['input_size'])}, batch "
            f"{section['batch_size']}, {section['precision']}, XLA {xla(section['xla'])}, "
            f"{section['epochs']} epochs of {section['train_examples']:,} images with "
            f"validation, {section['rounds']} rounds; median epoch after each run's first)",
            "",
            "| variant | train img/s (median) | single epochs | ÷ plain fit |",
            "|---|---:|---:|---:|",
            f"| plain `model.fit(x, y)`, images decoded once into memory | {plain:,.0f} | "
            f"{_range(section, 'plain_runs')} | 1.00 |",
            f"| plain `model.fit` on the Trainer's tf.data pipeline (`make_dataset`, its "
            f"defaults) | {section['plain_fit_on_trainer_dataset_images_per_sec']:,.0f} | "
            f"{_range(section, 'dataset_runs')} | {section['dataset_ratio']:.2f} |",
            f"| mptfx Trainer `run_fn` | {section['trainer_images_per_sec']:,.0f} | "
            f"{_range(section, 'trainer_runs')} | {section['ratio']:.2f} |",
            "",
        ]

    def verdicts(self, results: dict[str, Any]) -> list[str]:
        overhead = results.get("overhead") or {}
        if overhead.get("status") != "ok":
            return []
        ratio = overhead["ratio"]
        if ratio >= 1.0:
            verdict = "as fast as plain fit or faster"
        elif ratio >= 1.0 - OVERHEAD_TOLERANCE:
            verdict = f"within the {OVERHEAD_TOLERANCE:.0%} tolerance of plain fit"
        else:
            verdict = "SLOWER than plain fit"
        dataset_ratio = overhead["dataset_ratio"]
        line = (f"Trainer overhead: Trainer/plain fit = {ratio:.2f} ({verdict}); plain fit fed "
                f"by the Trainer's own tf.data pipeline runs at {dataset_ratio:.2f}, and the "
                f"Trainer runs at {ratio / dataset_ratio:.2f} of that")
        spread = _spread(overhead)
        if spread is not None:
            line += (f"; single epochs of one variant range over ±{spread:.0%} of its median "
                     "here, so smaller differences are noise")
        if ratio < 1.0 - OVERHEAD_TOLERANCE:
            line += ("; what the Trainer adds: its instrumented train step (gradient norm, "
                     "per-step loss for the divergence guard) and its callbacks")
        return [line + "."]


def _spread(section: dict[str, Any]) -> float | None:
    """The largest half-range of one variant's epoch rates, relative to its median."""
    spreads = []
    for key in ("plain_runs", "dataset_runs", "trainer_runs"):
        rates = epoch_rates(section.get(key))
        if len(rates) >= 2:
            spreads.append((max(rates) - min(rates)) / 2 / statistics.median(rates))
    return max(spreads) if spreads else None


def _range(section: dict[str, Any], key: str) -> str:
    rates = epoch_rates(section.get(key))
    return f"{min(rates):,.0f}–{max(rates):,.0f}" if rates else ""


SECTION = Overhead()

"""`throughput`: every model × precision × XLA cell trained on synthetic on-device data.

Each cell runs in a fresh process (`train_cell`, benchmarks/measures/training.py); its speedup is
over the same model's float32 without XLA in this run. The seed model runs first: with
--quick on a CPU its cells decide which of the other models' cells are worth measuring
(plan.cell_skip_reason). With --quick, a cell of another model that would leave the
sections after it no time in the budget is skipped, saying so (`Context.room_for`): the
seed model's cells always run. Its verdict: each model's fastest cell. Where `auto` stands
against it is the auto_check section's verdict, from the choice the Trainer measured; MFU
against matmul ceilings is the lab's (tools/lab/).
"""

from __future__ import annotations

from typing import Any

from benchmarks.plan import REFERENCE_PRECISION, SEED_MODEL, CellSpec, cell_skip_reason
from benchmarks.sections.base import Section, number, shape, short, xla
from benchmarks.sections.context import Context
from benchmarks.sections.tasks import Task


def measure(spec: CellSpec) -> dict[str, Any]:
    from benchmarks.measures.training import run_cell

    return run_cell(spec)


TRAIN_CELL = Task("train_cell", CellSpec, measure)


def add_speedups(rows: list[dict[str, Any]]) -> None:
    """speedup = samples/sec over the same model's float32 without XLA in this run."""
    reference = {
        row["model"]: row["samples_per_sec"]
        for row in rows
        if row["precision"] == REFERENCE_PRECISION and not row["xla"] and row["status"] == "ok"
    }
    for row in rows:
        base = reference.get(row["model"])
        row["speedup"] = (
            row["samples_per_sec"] / base if base and row["status"] == "ok" else None
        )


def cell_summary(row: dict[str, Any]) -> str:
    """One cell for the console."""
    if row["status"] != "ok":
        return f"{row['status']}: {row['error']}"
    speedup = f", {row['speedup']:.2f}x" if row.get("speedup") is not None else ""
    return (f"{row['samples_per_sec']:.1f} {row['unit']}/s, {row['step_ms']:.1f} ms/step"
            f"{speedup}, {row['memory_kind']} "
            f"{row['peak_memory_mb']:.0f} MB")


def ok_cells(results: dict[str, Any], model: str, key: str = "throughput"
             ) -> list[dict[str, Any]]:
    """`model`'s measured cells (of the `key` matrix: the lab's MFU cells are `mfu`)."""
    return [
        row for row in results.get(key, [])
        if row["model"] == model and row["status"] == "ok"
    ]


class Throughput(Section):
    """The matrix. The lab's MFU matrix (tools/lab/sections/mfu.py) is this one with its
    own task per cell (`cell_task`) and what it measures first (`prepare`)."""

    name = "throughput"
    tasks = (TRAIN_CELL,)

    def prepare(self, ctx: Context) -> bool:
        """Before the cells; False ends the section."""
        return True

    def cell_task(self, ctx: Context, spec: CellSpec) -> tuple[Task, Any]:
        """The task measuring the cell `spec` and its parameters."""
        return TRAIN_CELL, spec

    def run(self, ctx: Context) -> None:
        if not self.prepare(ctx):
            return
        ordered = sorted(ctx.models, key=lambda name: name != SEED_MODEL)
        cells = [
            (model, precision, on)
            for model in ordered
            for precision in ctx.options.precisions
            for on in ctx.options.xla
        ]
        rows: list[dict[str, Any]] = []
        costs: list[float] = []
        ctx.results[self.name] = rows
        ctx.say(f"  {self.name}: up to {len(cells)} cells, each in a fresh process")
        for index, (model, precision, on) in enumerate(cells, 1):
            setup = ctx.setup(model)
            label = f"  [{index}/{len(cells)}] {model} {precision} xla={xla(on)}"
            cell = {"model": model, "precision": precision, "xla": on,
                    "batch_size": setup.batch_size, "input_shape": list(setup.input_shape),
                    "unit": setup.unit}
            seed_speedups = {
                (row["precision"], row["xla"]): row["speedup"] for row in rows
                if row["model"] == SEED_MODEL and row.get("speedup") is not None
            }
            skip = cell_skip_reason(model, precision, on, ctx.device, ctx.options.quick,
                                    seed_speedups)
            if not skip and model != SEED_MODEL and not ctx.room_for(max(costs, default=0.0),
                                                                     self.name):
                skip = ("--quick budget: left for the sections after this one on a busy "
                        "machine; measure it alone with --models and --sections")
            if skip:
                rows.append({**cell, "status": "skipped", "error": skip})
                ctx.say(f"{label}: skipped ({skip})")
                continue
            spec = CellSpec(
                model=model,
                precision=precision,
                xla=on,
                batch_size=setup.batch_size,
                input_shape=setup.input_shape,
                num_classes=setup.num_classes,
                warmup_seconds=ctx.preset.warmup_seconds,
                window_seconds=ctx.preset.window_seconds,
                windows=ctx.preset.windows,
                time_budget_seconds=ctx.preset.cell_budget_seconds,
            )
            load = ctx.load()
            task, params = self.cell_task(ctx, spec)
            started = ctx.elapsed()
            outcome = ctx.task(task, params, f"{self.name}-{model}-{precision}-xla{xla(on)}",
                               timeout=ctx.preset.cell_timeout_seconds)
            row = {**cell, "status": outcome.status, "error": outcome.error,
                   "seconds": round(outcome.seconds, 1), "load_average_1m": load,
                   **(outcome.result or {})}
            rows.append(row)
            costs.append(ctx.elapsed() - started)  # the next cell's likely cost: the longest
            add_speedups(rows)
            ctx.say(f"{label}: {cell_summary(row)} ({outcome.seconds:.0f} s, load {load})")
            ctx.save()

    def table(self, results: dict[str, Any]) -> list[str]:
        rows = results.get("throughput") or []
        if not rows:
            return []
        lines = [
            "### Training throughput (synthetic data on the device)",
            "",
            "Median of timed windows after warm-up; speedup over float32 without XLA of the "
            "same model in this run.",
            "",
            "| model | input | batch | precision | XLA | samples/s | step ms | speedup "
            "| peak memory MB | load |",
            "|---|---|---:|---|---|---:|---:|---:|---:|---:|",
        ]
        for row in rows:
            head = (f"| {row['model']} | {shape(row['input_shape'])} | {row['batch_size']} | "
                    f"{row['precision']} | {xla(row['xla'])} |")
            if row["status"] != "ok":
                lines.append(f"{head} {row['status']}: {short(row['error'])} | | | | |")
                continue
            lines.append(
                f"{head} {number(row['samples_per_sec'], 1)} {row['unit']}/s | "
                f"{number(row['step_ms'], 1)} | {number(row.get('speedup'), 2)}× | "
                f"{number(row['peak_memory_mb'])} ({row['memory_kind']}; "
                f"+{number(row.get('training_memory_mb'))} training) | "
                f"{number(row.get('load_average_1m'), 1)} |"
            )
        return lines + [""]

    def verdicts(self, results: dict[str, Any]) -> list[str]:
        return [line for model in dict.fromkeys(row["model"] for row in
                                                results.get("throughput", []))
                for line in _fastest_verdict(results, model)]


def fastest_cell(results: dict[str, Any], model: str) -> dict[str, Any] | None:
    """`model`'s fastest measured cell in this run (None when none was measured)."""
    cells = ok_cells(results, model)
    return max(cells, key=lambda row: row["samples_per_sec"]) if cells else None


def _fastest_verdict(results: dict[str, Any], model: str) -> list[str]:
    fastest = fastest_cell(results, model)
    if not fastest:
        return []
    line = (f"{model}: fastest cell is {fastest['precision']} with XLA "
            f"{xla(fastest['xla'])} ({fastest['samples_per_sec']:,.1f} {fastest['unit']}/s")
    if fastest.get("speedup") is not None:
        line += f", {fastest['speedup']:.2f}× float32 without XLA"
    return [line + ")."]


SECTION = Throughput()

"""`stock_tfx`: the default `mptfx run` against a stock TFX pipeline doing the same job.

Both on the same digits, model, epochs and batch, wall time from process start to exit
(imports included): the `pipeline` section's default run (run here first if this run has
none), and the `stock_tfx` task in a fresh process (tools/lab/stock_tfx.py, TFX's
LocalDagRunner: ImportExampleGen ... Pusher); `ratio` is mptfx / stock.
"""

from __future__ import annotations

import dataclasses
import shutil
from typing import Any

from benchmarks.sections.base import number
from benchmarks.sections.context import Context
from benchmarks.sections.data import DataSection, pipeline_defaults
from benchmarks.sections.tasks import Task, arguments
from tools.lab.sections import pipeline

COMPONENTS = ["ImportExampleGen", "StatisticsGen", "SchemaGen", "Trainer", "Evaluator",
              "Pusher"]


@dataclasses.dataclass(frozen=True)
class StockParams:
    """The digits' tf.Examples, the pipeline's root, and its Trainer's `custom_config`
    (epochs, batch_size, input_size: tools/lab/stock_tfx_module.py reads them)."""

    examples_dir: str
    work_dir: str
    training: dict[str, Any]


def measure(params: StockParams) -> dict[str, Any]:
    from tools.lab.stock_tfx import run

    return run(**arguments(params))


STOCK_TFX = Task("stock_tfx", StockParams, measure)


class StockTfx(DataSection):
    name = "stock_tfx"
    tasks = (STOCK_TFX,)

    def run(self, ctx: Context) -> None:
        if "pipeline" not in ctx.results:
            pipeline.SECTION.run(ctx)
        defaults = pipeline_defaults()
        work_dir = ctx.bench_dir / "stock-tfx"
        shutil.rmtree(work_dir, ignore_errors=True)
        ctx.say(f"  stock TFX: ImportExampleGen ... Pusher with LocalDagRunner, "
                f"{defaults['model']} {defaults['epochs']} epochs ...")
        params = StockParams(
            examples_dir=ctx.data["examples_dir"], work_dir=str(work_dir),
            training={"epochs": defaults["epochs"], "batch_size": defaults["batch_size"],
                      "input_size": defaults["input_size"]},
        )
        outcome = ctx.task(STOCK_TFX, params, "stock-tfx",
                           timeout=ctx.preset.pipeline_timeout_seconds)
        ours = ctx.results.get("pipeline") or {}
        seconds = ours.get("seconds")
        section: dict[str, Any] = {
            "status": outcome.status, "error": outcome.error,
            "components": list(COMPONENTS),
            "mptfx_run_seconds": seconds,
            "stock_tfx_seconds": round(outcome.seconds, 1),
            **(outcome.result or {}),
        }
        section["ratio"] = (seconds / outcome.seconds) if outcome.ok and seconds else None
        if outcome.ok:
            ctx.say(f"    mptfx run {seconds} s, stock TFX {outcome.seconds:.1f} s, ratio "
                    + (f"{section['ratio']:.2f}" if section["ratio"] else "n/a"))
        ctx.store("stock_tfx", section)

    def table(self, results: dict[str, Any]) -> list[str]:
        section = results.get("stock_tfx") or {}
        if not section:
            return []
        if section.get("status") != "ok":
            return [f"Stock TFX pipeline: {section.get('status')}: {section.get('error')}", ""]
        ratio = section.get("ratio")
        ours = (results.get("pipeline") or {}).get("components") or {}
        counted = f" ({len(ours)} components)" if ours else ""
        return [
            "### Default `mptfx run` vs a stock TFX pipeline (same digits, model, epochs)", "",
            "| pipeline | wall seconds (process) |", "|---|---:|",
            f"| mptfx run{counted} | {number(section.get('mptfx_run_seconds'), 1)} |",
            f"| stock TFX ({', '.join(section['components'])}) | "
            f"{number(section.get('stock_tfx_seconds'), 1)} |",
            "", f"ratio (mptfx / stock): {'n/a' if ratio is None else f'{ratio:.2f}'}", "",
        ]


SECTION = StockTfx()

"""`mfu`: the throughput matrix again, each cell's FLOP/s against the matmul ceiling.

First the `ceilings` task measures the matmul ceiling of every compute dtype the run's
precisions use (tools/lab/ceiling.py); then each cell of mptfx bench's matrix runs as an
`mfu_cell` task (tools/lab/mfu.py), the ceiling measured again between its windows. The
seed model's float32 cell without XLA is the MFU-target cell: it is also profiled, and
`time_breakdown` renders where its step time goes. Its verdict: the MFU target.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.plan import COMPUTE_DTYPES, REFERENCE_PRECISION, SEED_MODEL, CellSpec
from benchmarks.sections.base import number, shape, short, xla
from benchmarks.sections.context import Context
from benchmarks.sections.tasks import Task, arguments
from benchmarks.sections.throughput import Throughput, ok_cells

MFU_TARGET = 0.60


@dataclasses.dataclass(frozen=True)
class CeilingParams:
    """repeats: timed repeats per matmul size; dtypes: the compute dtypes to measure."""

    repeats: int
    dtypes: tuple[str, ...]


def measure_ceilings(params: CeilingParams) -> dict[str, Any]:
    import tensorflow as tf

    from tools.lab.ceiling import CPU_SIZES, GPU_SIZES, measure_ceiling

    sizes = GPU_SIZES if tf.config.list_physical_devices("GPU") else CPU_SIZES
    return {dtype: measure_ceiling(dtype, sizes, params.repeats) for dtype in params.dtypes}


@dataclasses.dataclass(frozen=True)
class MfuParams:
    """cell: the bench's cell; ceiling_sizes: matmul size per dtype; profile_steps: steps
    the profiler traces after the windows (0: no profile, no per-pass timing)."""

    cell: CellSpec
    ceiling_sizes: dict[str, int]
    profile_steps: int


def measure_cell(params: MfuParams) -> dict[str, Any]:
    from tools.lab.mfu import run_mfu_cell

    return run_mfu_cell(**arguments(params))


CEILINGS = Task("ceilings", CeilingParams, measure_ceilings)
MFU_CELL = Task("mfu_cell", MfuParams, measure_cell)


class Mfu(Throughput):
    name = "mfu"
    tasks = (CEILINGS, MFU_CELL)

    def prepare(self, ctx: Context) -> bool:
        dtypes = ["float32"] + [COMPUTE_DTYPES[p] for p in ctx.options.precisions
                                if COMPUTE_DTYPES[p] != "float32"]
        params = CeilingParams(repeats=ctx.preset.ceiling_repeats, dtypes=tuple(dtypes))
        outcome = ctx.task(CEILINGS, params, "ceilings", timeout=600)
        if not outcome.ok:
            ctx.say(f"  ceilings failed: {outcome.error}")
            return False
        ctx.results["ceilings"] = outcome.result
        ctx.say("  ceilings: " + ", ".join(f"{d} {c['gflops']:.0f} GFLOP/s ({c['size']}²)"
                                           for d, c in outcome.result.items()))
        return True

    def cell_task(self, ctx: Context, spec: CellSpec) -> tuple[Task, Any]:
        target = (spec.model == SEED_MODEL and spec.precision == REFERENCE_PRECISION
                  and not spec.xla)
        sizes = {dtype: c["size"] for dtype, c in ctx.results["ceilings"].items()}
        return MFU_CELL, MfuParams(cell=spec, ceiling_sizes=sizes,
                                   profile_steps=ctx.preset.profile_steps if target else 0)

    def table(self, results: dict[str, Any]) -> list[str]:
        rows = results.get("mfu") or []
        if not rows:
            return []
        ceilings = "; ".join(f"{dtype} {c['gflops']:.0f} GFLOP/s at {c['size']}²"
                             for dtype, c in (results.get("ceilings") or {}).items())
        lines = [
            "### MFU (counted training FLOP/s ÷ matmul ceiling of the compute dtype)",
            "",
            f"Matmul ceiling (best median over square sizes): {ceilings}. The ceiling is "
            "measured again between each cell's windows (tools/lab/flops.py has the formula).",
            "",
            "| model | input | batch | precision | XLA | samples/s | GFLOP/s | MFU |",
            "|---|---|---:|---|---|---:|---:|---:|",
        ]
        for row in rows:
            head = (f"| {row['model']} | {shape(row['input_shape'])} | {row['batch_size']} | "
                    f"{row['precision']} | {xla(row['xla'])} |")
            if row["status"] != "ok":
                lines.append(f"{head} {row['status']}: {short(row['error'])} | | |")
                continue
            lines.append(f"{head} {number(row['samples_per_sec'], 1)} | "
                         f"{number(row['achieved_gflops'], 1)} | {row['mfu']:.0%} "
                         f"(of {row['ceiling_gflops']:.0f}) |")
        return lines + [""]

    def verdicts(self, results: dict[str, Any]) -> list[str]:
        seed = next((row for row in ok_cells(results, SEED_MODEL, "mfu")
                     if row["precision"] == REFERENCE_PRECISION and not row["xla"]), None)
        if not seed:
            return []
        holds = "holds" if seed["mfu"] >= MFU_TARGET else "does NOT hold"
        return [f"MFU target ({MFU_TARGET:.0%} of the matmul ceiling) {holds} for {SEED_MODEL} "
                f"float32 {shape(seed['input_shape'])} batch {seed['batch_size']}: "
                f"{seed['achieved_gflops']:.1f} GFLOP/s of {seed['ceiling_gflops']:.1f} = "
                f"{seed['mfu']:.0%}."]


SECTION = Mfu()

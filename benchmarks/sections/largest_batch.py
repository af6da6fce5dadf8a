"""`largest_batch`: the largest batch each model and precision trains at.

On a CPU the limit is the peak RSS cap (--memory-cap), on a GPU its memory. The batch
doubles in one process (the `batch_ladder` task); fresh processes (`batch_probe`) settle
what the ladder could not: its first failure and the bisection probes
(components/trainer/batch_size.py `search_largest_batch`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from benchmarks.plan import MIN_SPEEDUP_FOR_BATCH_SEARCH, ModelSetup
from benchmarks.sections.base import Section, number, shape
from benchmarks.sections.context import Context
from benchmarks.sections.tasks import Task, arguments
from components.trainer.batch_size import search_largest_batch


@dataclasses.dataclass(frozen=True)
class BatchParams:
    """The model a probe trains, under `precision`, at the bench's input and classes."""

    model_name: str
    precision: str
    input_shape: list[int]
    num_classes: int


@dataclasses.dataclass(frozen=True)
class ProbeParams(BatchParams):
    """One training step at `batch_size`, in a fresh process."""

    batch_size: int


@dataclasses.dataclass(frozen=True)
class LadderParams(BatchParams):
    """A step at each of `batches` in turn, each result appended to `progress_path`."""

    batches: list[int]
    progress_path: str


def measure_probe(params: ProbeParams) -> dict[str, Any]:
    from benchmarks.measures.training import probe_batch

    return probe_batch(**arguments(params))


def measure_ladder(params: LadderParams) -> dict[str, Any]:
    from benchmarks.measures.training import probe_batch_ladder

    return probe_batch_ladder(**arguments(params))


BATCH_PROBE = Task("batch_probe", ProbeParams, measure_probe)
BATCH_LADDER = Task("batch_ladder", LadderParams, measure_ladder)


class LargestBatch(Section):
    name = "largest_batch"
    tasks = (BATCH_LADDER, BATCH_PROBE)

    def run(self, ctx: Context) -> None:
        chosen = ctx.preset.largest_batch_models
        models = [m for m in ctx.models if chosen is None or m in chosen]
        cap = None if ctx.device == "GPU" else ctx.options.memory_cap_mb
        rows: list[dict[str, Any]] = []
        ctx.results["largest_batch"] = {"memory_cap_mb": cap, "rows": rows}
        ctx.say(f"  largest batch: {', '.join(models) or 'no model'}"
                + (f", CPU memory cap {cap:.0f} MB (peak RSS)" if cap else ", GPU memory"))
        longest = 0.0  # the longest search so far: the next one's likely cost
        for model in models:
            setup = ctx.setup(model)
            for precision in ctx.options.precisions:
                skip = _skip_reason(ctx, model, precision)
                if not skip and longest and not ctx.room_for(longest, self.name):
                    skip = ("--quick budget: left for the sections after this one on a busy "
                            "machine; search it alone with --sections largest_batch")
                if skip:
                    rows.append({"model": model, "precision": precision, "skipped": skip})
                    ctx.say(f"    {model} {precision}: skipped ({skip})")
                    continue
                started = ctx.elapsed()
                row = _search(ctx, model, precision, setup, cap)
                longest = max(longest, ctx.elapsed() - started)
                rows.append(row)
                ctx.say(f"    {model} {precision}: largest batch {row['largest']}"
                        f" (first failure {row['first_failure']}, "
                        f"{len(row['probes'])} fresh probes, {row['seconds']:.0f} s)")
                ctx.save()

    def table(self, results: dict[str, Any]) -> list[str]:
        section = results.get("largest_batch") or {}
        if not section.get("rows"):
            return []
        cap = section.get("memory_cap_mb")
        limit = f"peak RSS ≤ {cap:.0f} MB (`--memory-cap`)" if cap else "GPU memory"
        lines = [
            f"### Largest batch ({limit}; doubling, then bisection)",
            "",
            "| model | input | precision | largest batch | first failure | peak MB at largest "
            "| probes |",
            "|---|---|---|---:|---:|---:|---:|",
        ]
        for row in section["rows"]:
            if row.get("skipped"):
                lines.append(f"| {row['model']} | | {row['precision']} | skipped: "
                             f"{row['skipped']} | | | |")
                continue
            largest = str(row["largest"]) + (" (max tried)" if row.get("capped") else "")
            if row.get("unknown_at"):
                largest += f" (probe at {row['unknown_at']} did not finish)"
            lines.append(
                f"| {row['model']} | {shape(row['input_shape'])} | {row['precision']} | "
                f"{largest} | {row['first_failure'] or '–'} | "
                f"{number(row.get('peak_memory_mb_at_largest'))} | {len(row['probes'])} |"
            )
        return lines + [""]


def _search(ctx: Context, model: str, precision: str, setup: ModelSetup,
            cap: float | None) -> dict[str, Any]:
    """Doubling in one process (a "ladder"), then fresh processes for everything the
    ladder could not settle: its first failure and the bisection probes."""
    started = time.monotonic()
    trained = BatchParams(model_name=model, precision=precision,
                          input_shape=list(setup.input_shape), num_classes=setup.num_classes)
    max_batch = ctx.preset.max_batch
    batches, batch = [], max(1, setup.batch_size)
    while batch < max_batch:
        batches.append(batch)
        batch *= 2
    batches.append(max_batch)
    name = f"ladder-{model}-{precision}"
    progress_path = ctx.bench_dir / "tasks" / f"{name}.progress.jsonl"
    progress_path.parent.mkdir(parents=True, exist_ok=True)
    progress_path.unlink(missing_ok=True)
    ctx.task(BATCH_LADDER,
             LadderParams(**arguments(trained), batches=batches,
                          progress_path=str(progress_path)),
             name, timeout=ctx.preset.probe_timeout_seconds * 2, memory_cap_mb=cap)
    peaks: dict[int, float] = {}
    for line in progress_path.read_text().splitlines() if progress_path.exists() else []:
        step = json.loads(line)
        if step["fits"] and (not cap or step["peak_memory_mb"] <= cap):
            peaks[step["batch"]] = step["peak_memory_mb"]
    ladder = sorted(peaks)

    def fits(batch: int) -> bool | None:
        if batch in peaks:
            return True
        outcome = ctx.task(
            BATCH_PROBE, ProbeParams(**arguments(trained), batch_size=batch),
            f"probe-{model}-{precision}-b{batch}",
            timeout=ctx.preset.probe_timeout_seconds, memory_cap_mb=cap,
        )
        if outcome.status == "over_memory_cap":
            return False
        if not outcome.ok:
            return None
        result = outcome.result
        if result.get("fits") and cap and result["peak_memory_mb"] > cap:
            return False  # a spike between two polls; the child's own peak saw it
        if result.get("fits"):
            peaks[batch] = result["peak_memory_mb"]
        return bool(result.get("fits"))

    search = search_largest_batch(
        fits, setup.batch_size, max_batch, ctx.preset.largest_batch_resolution
    )
    search["probes"] = [probe for probe in search["probes"] if probe[0] not in ladder]
    return {
        "model": model,
        "precision": precision,
        "input_shape": list(setup.input_shape),
        "ladder_fits": ladder,
        "peak_memory_mb_at_largest": peaks.get(search["largest"]),
        "seconds": round(time.monotonic() - started, 1),
        **search,
    }


def _skip_reason(ctx: Context, model: str, precision: str) -> str | None:
    """With --quick: a precision that trained this model too slowly in the throughput
    matrix (each probe would take minutes)."""
    if not ctx.options.quick:
        return None
    cells = {
        (row["precision"], row["xla"]): row
        for row in ctx.results.get("throughput", [])
        if row["model"] == model and row["status"] == "ok"
    }
    speedup = (cells.get((precision, False)) or {}).get("speedup")
    if speedup is not None and speedup < MIN_SPEEDUP_FOR_BATCH_SEARCH:
        return f"trains at {speedup:.2f}x float32 here; each probe would take minutes"
    return None


SECTION = LargestBatch()

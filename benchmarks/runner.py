"""`mptfx bench`: runs every section in its own processes and writes table, JSON and charts.

This process never imports TensorFlow: each measurement runs in a fresh worker process
(benchmarks/launch.py), and every ratio compares numbers taken in this one run. The
sections (benchmarks/sections/) run in turn, each writing its entries into the results.

Outputs in `<workspace>/bench/`: `results.json` (everything, rewritten after every section,
so an interrupted run keeps what it measured), `results.md` (the tables),
`throughput.png`, `memory.png`, and `logs/` with each task's full output.
"""

from __future__ import annotations

import shutil
import sys
from typing import TextIO

from benchmarks import charts, report
from benchmarks.options import BenchOptions
from benchmarks.sections import SECTIONS
from benchmarks.sections.context import RESULTS_JSON, Context

RESULTS_MD = "results.md"


def run_bench(options: BenchOptions, out: TextIO = sys.stdout) -> int:
    """Runs `mptfx bench` with `options`; returns the process exit code (1 if a task
    failed or a required section measured nothing)."""
    ctx = Context(options, out, SECTIONS)
    bench_dir = ctx.bench_dir
    bench_dir.mkdir(parents=True, exist_ok=True)
    for stale in (RESULTS_JSON, RESULTS_MD, charts.THROUGHPUT_PNG, charts.MEMORY_PNG):
        (bench_dir / stale).unlink(missing_ok=True)
    for folder in ("tasks", "logs"):
        shutil.rmtree(bench_dir / folder, ignore_errors=True)
    ctx.say(f"mptfx bench{' --quick' if options.quick else ''}: writing to "
            f"{bench_dir} (load average {ctx.load()})")
    for section in SECTIONS:
        if section.wanted(ctx):
            section.run(ctx)
        if section.required and section.name not in ctx.results:
            ctx.save()
            return 1
    ctx.results["verdicts"] = report.verdicts(ctx.results)
    ctx.save()
    markdown = report.render_markdown(ctx.results)
    (bench_dir / RESULTS_MD).write_text(markdown)
    written = charts.write_charts(ctx.results, bench_dir)
    ctx.say("")
    ctx.say(markdown)
    ctx.say(f"wrote {bench_dir / RESULTS_JSON}, {bench_dir / RESULTS_MD}"
            + "".join(f", {path}" for path in written)
            + f" in {ctx.results['seconds']:.0f} s")
    for failure in ctx.failures:
        ctx.say(f"FAILED {failure}")
    return 1 if ctx.failures else 0

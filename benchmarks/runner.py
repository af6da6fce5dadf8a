"""`mptfx bench`: runs every section in its own processes and writes table, JSON and charts.

This process never imports TensorFlow: each measurement runs in a fresh worker process
(benchmarks/launch.py), and every ratio compares numbers taken in this one run. The
sections (benchmarks/sections/) run in turn, each writing its entries into the results.
The developer lab (tools/lab/, from the checkout) runs its own suite through `run_bench`.

Outputs in `<workspace>/bench/`: `results.json` (everything, rewritten after every section,
so an interrupted run keeps what it measured), `results.md` (the tables),
`throughput.png`, `memory.png`, and `logs/` with each task's full output. With
`write_docs`, also the generated page of the machine's figures (benchmarks/performance.py).

Every section the run lists (--sections, default all) either leaves its entry in the
results or the run fails (exit 1) with a line naming it and why it did not run.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import TextIO

from benchmarks import charts, performance, report
from benchmarks.options import BenchOptions
from benchmarks.sections import BENCH
from benchmarks.sections.base import Suite
from benchmarks.sections.context import RESULTS_JSON, Context

RESULTS_MD = "results.md"


def run_bench(options: BenchOptions, out: TextIO = sys.stdout, suite: Suite = BENCH,
              write_docs: str | None = None) -> int:
    """Runs `suite` with `options`; returns the process exit code (1 if a task failed, a
    required section measured nothing or a listed section did not run).

    Args:
        write_docs: also write the generated performance page (docs/PERFORMANCE.md) here.
    """
    ctx = Context(options, out, suite)
    bench_dir = ctx.bench_dir
    bench_dir.mkdir(parents=True, exist_ok=True)
    for stale in (RESULTS_JSON, RESULTS_MD, charts.THROUGHPUT_PNG, charts.MEMORY_PNG):
        (bench_dir / stale).unlink(missing_ok=True)
    for folder in ("tasks", "logs"):
        shutil.rmtree(bench_dir / folder, ignore_errors=True)
    ctx.say(f"{suite.title}{' --quick' if options.quick else ''}: writing to "
            f"{bench_dir} (load average {ctx.load()}); sections: host, "
            f"{', '.join(options.sections)}")
    for section in suite.sections:
        if section.wanted(ctx):
            section.run(ctx)
        if section.required and section.name not in ctx.results:
            ctx.save()
            return 1
    for name in options.sections:
        if name not in ctx.results:
            ctx.failures.append(f"section {name} not run: what it needs was not measured "
                                "(see the lines above)")
    ctx.results["verdicts"] = report.verdicts(ctx.results, suite.sections)
    ctx.save()
    markdown = report.render_markdown(ctx.results, suite.sections, suite.title)
    (bench_dir / RESULTS_MD).write_text(markdown)
    written = charts.write_charts(ctx.results, bench_dir)
    if write_docs:
        written.append(performance.write_page(ctx.results, Path(write_docs), suite.sections))
    ctx.say("")
    ctx.say(markdown)
    ctx.say(f"wrote {bench_dir / RESULTS_JSON}, {bench_dir / RESULTS_MD}"
            + "".join(f", {path}" for path in written)
            + f" in {ctx.results['seconds']:.0f} s")
    for failure in ctx.failures:
        ctx.say(f"FAILED {failure}")
    return 1 if ctx.failures else 0

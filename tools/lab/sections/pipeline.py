"""`pipeline`: the default `mptfx run --json` in a fresh workspace, per component.

The real command in a subprocess (not a worker task), a fresh process importing every
library as a user's run does, its stderr to logs/pipeline-run.log, read through the run
summary it prints. `seconds` is its wall time from process start to exit.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from typing import Any

from benchmarks.sections.base import Section, number, status_line
from benchmarks.sections.context import Context
from components.run_summary import RunSummary, SummaryError

MPTFX = [sys.executable, "-m", "pipelines.cli"]


def _timed_run(ctx: Context) -> dict[str, Any]:
    """One `mptfx run --json` in a fresh workspace: its section fields."""
    workspace = ctx.bench_dir / "pipeline-run"
    shutil.rmtree(workspace, ignore_errors=True)  # nothing cached
    log_path = ctx.bench_dir / "logs" / "pipeline-run.log"
    timeout = ctx.preset.pipeline_timeout_seconds
    started = time.monotonic()
    completed = None
    try:
        with open(log_path, "w") as log:
            completed = subprocess.run(
                [*MPTFX, "run", "--json", "--workspace", str(workspace)],
                stdout=subprocess.PIPE, stderr=log, text=True, timeout=timeout,
            )
        summary = RunSummary.parse(json.loads(completed.stdout), "mptfx run --json")
    except subprocess.TimeoutExpired:
        summary, error = None, f"timed out after {timeout:.0f} s"
    except SummaryError as bad:
        summary, error = None, str(bad)
    except ValueError:
        summary, error = None, f"no JSON summary on stdout (exit {completed.returncode})"
    result: dict[str, Any] = {"seconds": round(time.monotonic() - started, 1)}
    if summary is None:
        return {**result, "status": "failed", "error": f"{error}; log: {log_path}"}
    if summary.status != "completed":
        result["error"] = f"{summary.error} (log: {log_path})"
    return {
        **result, "status": summary.status, "wall_seconds": summary.wall_seconds,
        "components": {name: {"status": c.status, "seconds": c.seconds}
                       for name, c in summary.components.items()},
        "trainer_images_per_sec": summary.trainer.images_per_sec,
    }


class Pipeline(Section):
    name = "pipeline"

    def run(self, ctx: Context) -> None:
        ctx.say("  pipeline: mptfx run --json (default config, fresh workspace) ...")
        section: dict[str, Any] = {"command": "mptfx run --json --workspace <fresh folder>",
                                   **_timed_run(ctx)}
        if section.get("error"):
            ctx.failures.append(f"pipeline: {section['error']}")
        elif section["status"] == "completed":
            ctx.say(f"    {section['status']} in {section['seconds']} s")
        ctx.store("pipeline", section)

    def table(self, results: dict[str, Any]) -> list[str]:
        section = results.get("pipeline") or {}
        if not section.get("components"):
            return status_line("Pipeline", section)
        lines = [
            f"### Pipeline (`{section['command']}`: {section['status']}, "
            f"{number(section.get('seconds'), 1)} s process, "
            f"{number(section.get('wall_seconds'), 1)} s in the run)",
            "",
            "| component | status | seconds |",
            "|---|---|---:|",
        ]
        for name, component in section["components"].items():
            lines.append(f"| {name} | {component['status']} | "
                         f"{number(component['seconds'], 1)} |")
        return lines + [""]


SECTION = Pipeline()

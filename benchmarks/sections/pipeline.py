"""`pipeline`: a cold default `mptfx run --json` in a fresh workspace, per component.

It runs the real command in a subprocess (not a worker task), its stderr to
logs/pipeline-run.log, and reads the run summary it prints.
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


class Pipeline(Section):
    name = "pipeline"

    def run(self, ctx: Context) -> None:
        workspace = ctx.bench_dir / "pipeline-run"
        shutil.rmtree(workspace, ignore_errors=True)  # a cold run: nothing cached
        command = [sys.executable, "-m", "pipelines.cli", "run", "--json",
                   "--workspace", str(workspace)]
        ctx.say("  pipeline: mptfx run --json (default config, fresh workspace) ...")
        started = time.monotonic()
        log_path = ctx.bench_dir / "logs" / "pipeline-run.log"
        timeout = ctx.preset.pipeline_timeout_seconds
        try:
            with open(log_path, "w") as log:
                completed = subprocess.run(
                    command, stdout=subprocess.PIPE, stderr=log, text=True, timeout=timeout,
                )
            summary = RunSummary.parse(json.loads(completed.stdout), "mptfx run --json")
        except subprocess.TimeoutExpired:
            summary, completed = None, None
            error = f"timed out after {timeout:.0f} s"
        except SummaryError as bad:
            summary, error = None, str(bad)
        except ValueError:
            summary, error = None, f"no JSON summary on stdout (exit {completed.returncode})"
        section: dict[str, Any] = {
            "command": "mptfx run --json --workspace <fresh folder>",
            "seconds": round(time.monotonic() - started, 1),
        }
        if summary is None:
            section.update(status="failed", error=f"{error}; log: {log_path}")
            ctx.failures.append(f"pipeline: {section['error']}")
        else:
            section.update(
                status=summary.status,
                wall_seconds=summary.wall_seconds,
                components={name: {"status": c.status, "seconds": c.seconds}
                            for name, c in summary.components.items()},
                trainer_images_per_sec=summary.trainer.images_per_sec,
            )
            if summary.status != "completed":
                ctx.failures.append(f"pipeline: {summary.error} (log: {log_path})")
            ctx.say(f"    {summary.status} in {summary.wall_seconds} s")
        ctx.store("pipeline", section)

    def table(self, results: dict[str, Any]) -> list[str]:
        section = results.get("pipeline") or {}
        if not section.get("components"):
            return status_line("Pipeline", section)
        lines = [
            f"### Pipeline (`{section['command']}`: {section['status']}, "
            f"{number(section.get('wall_seconds'), 1)} s wall)",
            "",
            "| component | status | seconds |",
            "|---|---|---:|",
        ]
        for name, component in section["components"].items():
            lines.append(f"| {name} | {component['status']} | "
                         f"{number(component['seconds'], 1)} |")
        return lines + [""]


SECTION = Pipeline()

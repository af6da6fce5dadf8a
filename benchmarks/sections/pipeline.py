"""`pipeline`: the default `mptfx run --json` in a fresh workspace, cold and warm, per component.

Each run is the real command in a subprocess (not a worker task), its stderr to
logs/pipeline-<kind>.log, read through the run summary it prints:

- cold: `MPTFX_STANDBY=off`, a fresh process importing every library (the first run);
- warm: the default command again with the standby process a run leaves behind ready
  (pipelines/standby), as every later run of a user iterating finds it. Skipped when
  standbys are off in the bench's environment. Afterwards the bench waits for the next
  standby and stops it, so nothing imports beside the sections that follow.

`seconds` is the warm run's wall time when there is one (`cold_seconds` beside it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Any

from benchmarks.sections.base import Section, number, status_line
from benchmarks.sections.context import Context
from components.run_summary import RunSummary, SummaryError
from pipelines import standby

MPTFX = [sys.executable, "-m", "pipelines.cli"]
STANDBY_WAIT_SECONDS = 300


def _timed_run(ctx: Context, kind: str, env: dict[str, str]) -> dict[str, Any]:
    """One `mptfx run --json` in a fresh workspace: its section fields."""
    workspace = ctx.bench_dir / f"pipeline-{kind}"
    shutil.rmtree(workspace, ignore_errors=True)  # nothing cached
    log_path = ctx.bench_dir / "logs" / f"pipeline-{kind}.log"
    timeout = ctx.preset.pipeline_timeout_seconds
    started = time.monotonic()
    completed = None
    try:
        with open(log_path, "w") as log:
            completed = subprocess.run(
                [*MPTFX, "run", "--json", "--workspace", str(workspace)], env=env,
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


def _standby(verb: str, env: dict[str, str]) -> tuple[int, str]:
    wait = ["--wait", str(STANDBY_WAIT_SECONDS)] if verb == "start" else []
    completed = subprocess.run([*MPTFX, "standby", verb, *wait], env=env, text=True,
                               capture_output=True, timeout=STANDBY_WAIT_SECONDS + 60)
    return completed.returncode, (completed.stdout + completed.stderr).strip()


def _gone_within(pid: int, seconds: float) -> bool:
    """True once `pid` has exited (an unreaped zombie counts as exited)."""
    deadline = time.monotonic() + seconds
    while standby.running(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _warm_run(ctx: Context, env: dict[str, str]) -> dict[str, Any]:
    """The default run with a ready standby; `standby_pid` is the one that ran it."""
    code, said = _standby("start", env)
    ready = re.search(r"pid (\d+) ready", said)
    if code != 0 or not ready:
        return {"status": "failed", "error": f"no standby became ready: {said}"}
    pid = int(ready.group(1))
    result = _timed_run(ctx, "warm", env)
    if not _gone_within(pid, 15):  # a standby serves one command, then exits
        result.update(status="failed", error=f"the run did not go to standby pid {pid}")
    _standby("start", env)  # the one the run started for the next: ready, then stopped
    _standby("stop", env)
    return {**result, "standby_pid": pid}


class Pipeline(Section):
    name = "pipeline"

    def run(self, ctx: Context) -> None:
        ctx.say("  pipeline: mptfx run --json (default config, fresh workspace), cold ...")
        cold = _timed_run(ctx, "cold", dict(os.environ, MPTFX_STANDBY="off"))
        section: dict[str, Any] = {"command": "mptfx run --json --workspace <fresh folder>"}
        warm = None
        if cold["status"] == "completed" and standby.enabled():
            ctx.say(f"    cold: {cold['seconds']} s; again with the standby ready ...")
            warm = _warm_run(ctx, dict(os.environ))
        section.update(warm or cold, cold_seconds=cold["seconds"], standby=warm is not None,
                       cold={k: cold.get(k) for k in ("seconds", "wall_seconds", "components")})
        if section.get("error"):
            ctx.failures.append(f"pipeline: {section['error']}")
        elif section["status"] == "completed":
            ctx.say(f"    {section['status']} in {section['seconds']} s"
                    + (f" (cold {cold['seconds']} s)" if warm else ""))
        ctx.store("pipeline", section)

    def table(self, results: dict[str, Any]) -> list[str]:
        section = results.get("pipeline") or {}
        if not section.get("components"):
            return status_line("Pipeline", section)
        kind = "warm: the standby ready" if section.get("standby") else "cold"
        lines = [
            f"### Pipeline (`{section['command']}`, {kind}: {section['status']}, "
            f"{number(section.get('seconds'), 1)} s process, "
            f"{number(section.get('wall_seconds'), 1)} s in the run)",
            "",
            "| component | status | seconds | cold run's seconds |",
            "|---|---|---:|---:|",
        ]
        cold = (section.get("cold") or {}).get("components") or {}
        for name, component in section["components"].items():
            lines.append(f"| {name} | {component['status']} | "
                         f"{number(component['seconds'], 1)} | "
                         f"{number((cold.get(name) or {}).get('seconds'), 1)} |")
        return lines + ["", f"cold run (MPTFX_STANDBY=off): "
                            f"{number(section.get('cold_seconds'), 1)} s process", ""]


SECTION = Pipeline()

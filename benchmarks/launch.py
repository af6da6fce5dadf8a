"""Runs one benchmark task in a fresh Python process and collects its JSON result.

A fresh process per task gives every throughput cell its own peak RSS, its own TensorFlow
state (dtype policy, XLA caches, thread pools) and a hard timeout. On a CPU, a memory cap
is enforced by watching the child's RSS and killing it when it goes over: RLIMIT_AS does
not work for TensorFlow, which reserves gigabytes of address space it never touches.

Example:

    outcome = run_task("train_cell", spec, bench_dir, "seed_cnn-float32", timeout_seconds=120)
    if outcome.ok:
        outcome.result["samples_per_sec"]
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_POLL_SECONDS = 0.02


@dataclasses.dataclass
class TaskOutcome:
    """How a task ended.

    Attributes:
        status: "ok", "failed" (the task raised; `error` says what), "timeout" or
            "over_memory_cap" (killed when its RSS passed the cap).
        result: the task's JSON result when ok.
        seconds: wall time including process start-up.
        error: one line for people, when not ok.
        log_path: the task's full output.
        observed_peak_rss_mb: the largest RSS the parent saw (with a memory cap only).
    """

    status: str
    result: dict[str, Any] | None
    seconds: float
    error: str | None
    log_path: str
    observed_peak_rss_mb: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def run_task(
    task: str,
    params: dict[str, Any],
    bench_dir: str | os.PathLike,
    name: str,
    timeout_seconds: float,
    memory_cap_mb: float | None = None,
    worker: str = "benchmarks.worker",
) -> TaskOutcome:
    """Runs `python -m WORKER TASK` with `params`; waits, enforcing the limits.

    Args:
        task: a name in the worker's tasks (`benchmarks.sections.TASKS` for mptfx bench).
        params: the task's JSON-able parameters.
        bench_dir: `<workspace>/bench`; params, results and logs go below it.
        name: file-name-safe label of this run of the task.
        timeout_seconds: kill the task after this long.
        memory_cap_mb: kill the task when its resident memory exceeds this (CPU).
        worker: the module run as the task's process (the lab's: tools.lab.worker).
    """
    tasks_dir = Path(bench_dir) / "tasks"
    logs_dir = Path(bench_dir) / "logs"
    tasks_dir.mkdir(parents=True, exist_ok=True)
    logs_dir.mkdir(parents=True, exist_ok=True)
    params_path = tasks_dir / f"{name}.params.json"
    result_path = tasks_dir / f"{name}.result.json"
    log_path = logs_dir / f"{name}.log"
    params_path.write_text(json.dumps(params, indent=2))
    result_path.unlink(missing_ok=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    started = time.monotonic()
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", worker, task, str(params_path), str(result_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group, so a kill takes its helpers too
        )
        status, peak_rss_mb = _wait(process, started, timeout_seconds, memory_cap_mb)
    seconds = time.monotonic() - started
    result = _read_json(result_path)
    if status is None:
        status = "ok" if process.returncode == 0 and result and "error" not in result else "failed"
    if status == "ok":
        return TaskOutcome(status, result, seconds, None, str(log_path), peak_rss_mb)
    if status == "timeout":
        error = f"timed out after {timeout_seconds:.0f} s"
    elif status == "over_memory_cap":
        error = f"resident memory passed the {memory_cap_mb:.0f} MB cap"
    else:
        error = (result or {}).get("error") or _last_line(log_path)
    return TaskOutcome(status, None, seconds, error, str(log_path), peak_rss_mb)


def _wait(
    process: subprocess.Popen,
    started: float,
    timeout_seconds: float,
    memory_cap_mb: float | None,
) -> tuple[str | None, float | None]:
    """Polls the child; returns ("timeout" | "over_memory_cap" | None, peak RSS seen)."""
    peak_rss_mb = None
    while process.poll() is None:
        if time.monotonic() - started > timeout_seconds:
            _kill(process)
            return "timeout", peak_rss_mb
        if memory_cap_mb:
            rss_mb = process_rss_mb(process.pid)
            peak_rss_mb = max(peak_rss_mb or 0.0, rss_mb)
            if rss_mb > memory_cap_mb:
                _kill(process)
                return "over_memory_cap", peak_rss_mb
        time.sleep(_POLL_SECONDS)
    return None, peak_rss_mb


def process_rss_mb(pid: int) -> float:
    """Resident memory of process `pid` in MB, from /proc (0.0 once it has exited)."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _kill(process: subprocess.Popen) -> None:
    """Kills the task's process group (the task and anything it started), then reaps it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _last_line(log_path: Path) -> str:
    try:
        lines = [line.strip() for line in log_path.read_text().splitlines() if line.strip()]
    except OSError:
        return "no output"
    return lines[-1][:300] if lines else "no output"

"""The state of one `mptfx bench` run that every section reads and writes.

The results dict (results.json), the console, the failures, the device and models the
host section found, and the plumbing a section runs through: `task` starts a worker
process, `store` puts a section's entry into the results and `save` rewrites results.json
(after every section, so an interrupted run keeps what it measured), `wanted` applies
--sections and `room_for` the --quick time budget.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from benchmarks.launch import TaskOutcome, run_task
from benchmarks.options import BenchOptions
from benchmarks.plan import ModelSetup, model_setup
from benchmarks.sections.tasks import Task, to_json

RESULTS_JSON = "results.json"
_UNSUPPORTED = "No OpKernel was registered"


class Context:
    """One run: its options, results and console, shared by the sections in turn.

    Attributes:
        suite: what runs: its sections in order, their worker module and --quick seconds
            (benchmarks/sections/__init__.py `BENCH`, or the lab's).
        sections: the suite's sections.
        device: "CPU" or "GPU", once the host section ran.
        models: the models to measure, once the host section ran.
        data: the digits prepared once for the data sections (benchmarks/sections/data.py);
            `data_asked` once a data section asked for them.
    """

    def __init__(self, options: BenchOptions, out: TextIO, suite: Any) -> None:
        self.options = options
        self.preset = options.preset
        self.out = out
        self.suite = suite
        self.sections: Sequence[Any] = tuple(suite.sections)
        self.bench_dir = Path(options.workspace).resolve() / "bench"
        self.failures: list[str] = []
        self.started = time.monotonic()
        self.results: dict[str, Any] = {
            "command": options.command,
            "quick": options.quick,
            "started": datetime.datetime.now().isoformat(timespec="seconds"),
            "load_average_start": list(os.getloadavg()),
            "sections": list(options.sections),
        }
        self.device = "CPU"
        self.models: list[str] = []
        self.data: dict[str, Any] | None = None
        self.data_asked = False

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def task(
        self,
        task: Task,
        params: Any,
        name: str,
        timeout: float,
        memory_cap_mb: float | None = None,
    ) -> TaskOutcome:
        """Runs `task` with `params` (an instance of `task.params`) in a fresh process."""
        if not isinstance(params, task.params):
            raise TypeError(f"task {task.name} takes {task.params.__name__}, not {params!r}")
        values = to_json(params)
        if self.options.model_file:
            values["user_model"] = {"module_file": self.options.model_file,
                                    "builder": self.options.model_builder,
                                    "task": self.options.model_task}
        outcome = run_task(task.name, values, self.bench_dir, name, timeout, memory_cap_mb,
                           worker=self.suite.worker)
        self.results.setdefault("task_seconds", {})[name] = round(outcome.seconds, 1)
        if outcome.status == "failed" and _UNSUPPORTED in (outcome.error or ""):
            # A fact about this platform (e.g. no float16 MaxPool3D kernel on CPUs), not a
            # defect of the benchmark: reported in the table, not a failed run.
            outcome.status = "unsupported"
        if outcome.status == "failed":
            self.failures.append(f"{name}: {outcome.error} (log: {outcome.log_path})")
        return outcome

    def store(self, key: str, entry: Any) -> None:
        """Puts a section's `entry` into the results under `key` and saves them."""
        self.results[key] = entry
        self.save()

    def save(self) -> None:
        self.results["seconds"] = round(time.monotonic() - self.started, 1)
        self.results["load_average_end"] = list(os.getloadavg())
        self.results["failures"] = self.failures
        self.bench_dir.mkdir(parents=True, exist_ok=True)
        path = self.bench_dir / RESULTS_JSON
        path.with_suffix(".partial").write_text(json.dumps(self.results, indent=2, default=str))
        path.with_suffix(".partial").replace(path)

    def wanted(self, section: str) -> bool:
        """Whether to run `section`: selected. A selected section always runs, also past
        the --quick budget: the sections before it size their work to leave it its time
        (`room_for`), and a section that still cannot run fails the run by name."""
        return section in self.options.sections

    def elapsed(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self.started

    def room_for(self, seconds: float, after: str) -> bool:
        """Whether `seconds` more of section `after` still leave the --quick budget the
        typical time of every selected section after it (always True without a budget).
        How a section sizes its own work so that the sections after it still run."""
        budget = self.preset.time_budget_seconds
        if not budget:
            return True
        names = [section.name for section in self.sections]
        later = names[names.index(after) + 1:] if after in names else []
        reserve = sum(self.suite.seconds.get(name, 0) for name in later
                      if name in self.options.sections)
        return self.elapsed() + seconds + reserve <= budget

    def setup(self, model: str) -> ModelSetup:
        """The input shape, batch and classes `model` is measured at in this run."""
        return model_setup(
            model, self.device, self.options.quick, self.options.batch_size,
            self.options.input_shape,
        )

    @staticmethod
    def load() -> float:
        """The 1-minute load average now, rounded."""
        return round(os.getloadavg()[0], 2)

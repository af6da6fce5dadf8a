"""`mptfx sweep`: run the pipeline once per point of a grid of `--set` values.

    axes = parse_grid(["trainer.precision=float32,mixed_float16", "trainer.xla=off,on"])
    expand_grid(axes)
    # [["trainer.precision=float32", "trainer.xla=off"], ["trainer.precision=float32",
    #   "trainer.xla=on"], ["trainer.precision=mixed_float16", "trainer.xla=off"], ...]

Each point is a separate `python -m pipelines.cli run --json` in the same workspace, so TFX's
cache reuses every component whose inputs did not change (Ingest, statistics, schema) and
only the Trainer and what follows it run again.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from components.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_PIPELINE_FAILED, EXIT_USAGE


class GridError(ValueError):
    """A `--set` that cannot be expanded into a grid."""


@dataclass
class SweepPoint:
    """One run of the sweep: its overrides, exit code and summary.json (None if unreadable)."""

    overrides: list[str]
    returncode: int | None = None
    summary: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def mlflow(self) -> dict[str, Any]:
        """The summary's `mlflow` section ({} when the run was not recorded)."""
        return (self.summary or {}).get("mlflow") or {}


def split_values(raw: str) -> list[str]:
    """Split `a,b,[1, 2]` at top-level commas: `["a", "b", "[1, 2]"]` (YAML lists, mappings
    and quoted strings stay whole)."""
    values, current, depth, quote = [], [], 0, ""
    for char in raw:
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            values.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    values.append("".join(current).strip())
    return values


def parse_grid(sets: Sequence[str]) -> list[tuple[str, list[str]]]:
    """`KEY=V1,V2,...` strings → [(key, [values])], keeping the order given."""
    axes: list[tuple[str, list[str]]] = []
    for text in sets:
        key, sep, raw = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise GridError(f"--set expects KEY=VALUE[,VALUE...], e.g. "
                            f"trainer.precision=float32,mixed_float16. Received: {text!r}")
        if key in (existing for existing, _ in axes):
            raise GridError(f"--set {key} is given twice; list its values once: {key}=A,B")
        values = split_values(raw)
        if any(value == "" for value in values) and len(values) > 1:
            raise GridError(f"--set {text!r} has an empty value between commas")
        axes.append((key, values))
    return axes


def expand_grid(axes: Sequence[tuple[str, list[str]]]) -> list[list[str]]:
    """Every combination of the axes' values, as `--set` overrides (first axis slowest)."""
    keys = [key for key, _ in axes]
    return [[f"{key}={value}" for key, value in zip(keys, combination, strict=True)]
            for combination in itertools.product(*(values for _, values in axes))]


def run_command(overrides: Sequence[str], workspace: str, config: str | None,
                data: str | None) -> list[str]:
    """The `mptfx run` subprocess command line for one sweep point."""
    command = [sys.executable, "-m", "pipelines.cli", "run", "--workspace", workspace, "--json"]
    if config:
        command += ["--config", config]
    if data:
        command += ["--data", data]
    for override in overrides:
        command += ["--set", override]
    return command


def run_sweep(
    points: Sequence[list[str]],
    workspace: str,
    config: str | None,
    data: str | None,
    report: Callable[[str], None],
) -> tuple[list[SweepPoint], int]:
    """Run the points one after another; returns them and the sweep's exit code.

    A usage error (exit 2: a bad key or value) stops the sweep, since every later point
    would fail the same way; a failed run (exit 1) does not.
    """
    done: list[SweepPoint] = []
    exit_code = EXIT_OK
    for index, overrides in enumerate(points, start=1):
        report(f"mptfx sweep {index}/{len(points)}: {' '.join(overrides) or '(no overrides)'}")
        point = SweepPoint(list(overrides))
        # The child's progress lines (stderr) go straight to the terminal; stdout is JSON.
        completed = subprocess.run(run_command(overrides, workspace, config, data),
                                   stdout=subprocess.PIPE, text=True, check=False)
        point.returncode = completed.returncode
        try:
            point.summary = json.loads(completed.stdout) if completed.stdout.strip() else None
        except ValueError:
            point.summary = None
        done.append(point)
        if completed.returncode in (EXIT_USAGE, EXIT_INTERRUPTED, -2):
            return done, EXIT_INTERRUPTED if completed.returncode != EXIT_USAGE else EXIT_USAGE
        if completed.returncode != EXIT_OK:
            exit_code = EXIT_PIPELINE_FAILED
            report(f"mptfx sweep {index}/{len(points)}: run failed (exit {completed.returncode})")
    return done, exit_code

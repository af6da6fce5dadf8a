"""`mptfx sweep`: run the pipeline once per point of a grid of `--set` values.

    axes = parse_grid(["trainer.precision=float32,mixed_float16", "trainer.xla=off,on"])
    expand_grid(axes)
    # [["trainer.precision=float32", "trainer.xla=off"], ["trainer.precision=float32",
    #   "trainer.xla=on"], ["trainer.precision=mixed_float16", "trainer.xla=off"], ...]

    mptfx sweep --set trainer.precision=float32,mixed_float16 --set trainer.xla=off,on
                [--workspace DIR] [--config FILE] [--data DIR] [--format ...] [--out DIR]

Each point is one `run_pipeline` (pipelines/api.py) in this process and the same workspace,
so TFX's cache reuses every component whose inputs did not change (Ingest, statistics,
schema) and only the Trainer and what follows it run again. The runs recorded in MLflow are
then compared as `mptfx compare` does.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_PIPELINE_FAILED, UsageError
from components.run_summary import RunSummary
from pipelines import tracking_commands


class GridError(ValueError):
    """A `--set` that cannot be expanded into a grid."""


@dataclass
class SweepPoint:
    """One run of the sweep: its overrides and summary (None: the run did not start)."""

    overrides: list[str]
    summary: RunSummary | None = field(default=None, repr=False)

    @property
    def recorded_run(self) -> tuple[str, str] | None:
        """(MLflow run id, tracking URI) when the run was recorded, else None."""
        mlflow = self.summary.mlflow if self.summary else None
        if mlflow is None or not mlflow.run_id or not mlflow.tracking_uri:
            return None
        return mlflow.run_id, mlflow.tracking_uri


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


def run_sweep(
    points: Sequence[list[str]],
    workspace: str,
    config: str | None,
    data: str | None,
    report: Callable[[str], None],
) -> tuple[list[SweepPoint], int]:
    """Run the points one after another; returns them and the sweep's exit code.

    A usage error (a bad key or value) stops the sweep, since every later point would fail
    the same way; a failed run does not, nor a point skipped because another run holds the
    workspace. Ctrl-C stops it after the interrupted point.
    """
    from pipelines.api import RunInterrupted, WorkspaceInUse, run_pipeline

    done: list[SweepPoint] = []
    exit_code = EXIT_OK
    for index, overrides in enumerate(points, start=1):
        report(f"mptfx sweep {index}/{len(points)}: {' '.join(overrides) or '(no overrides)'}")
        point = SweepPoint(list(overrides))
        done.append(point)
        try:
            point.summary = run_pipeline(config, workspace, data, overrides=overrides,
                                         console_fd=2, command="sweep")
        except WorkspaceInUse as busy:  # as `mptfx run` says it: one line, not a failure
            report(str(busy))
            continue
        except RunInterrupted as interrupted:
            point.summary = interrupted.summary
            return done, EXIT_INTERRUPTED
        if point.summary.status == "failed":
            exit_code = EXIT_PIPELINE_FAILED
            report(f"mptfx sweep {index}/{len(points)}: run failed: {point.summary.error} "
                   f"(full log: {point.summary.log_path})")
    return done, exit_code


def command_sweep(args: argparse.Namespace) -> int:
    """`mptfx sweep`: every grid point as a `mptfx run`, then the comparison of those runs."""
    try:
        points = expand_grid(parse_grid(args.set))
    except GridError as error:
        raise UsageError(str(error)) from None

    def report(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    done, exit_code = run_sweep(points, args.workspace, args.config, args.data, report)
    recorded = [point.recorded_run for point in done if point.recorded_run]
    if not recorded:
        report("mptfx sweep: no run was recorded in MLflow; nothing to compare")
        return exit_code
    from components.tracking.compare import load_rows

    rows: list[dict[str, Any]] = []
    workspace = Path(args.workspace).resolve()
    for run_id, uri in recorded:
        reader = tracking_commands.open_store(uri, workspace)
        rows += load_rows(reader, [run for run in [reader.run(run_id)] if run], workspace)
    tracking_commands.print_comparison(rows, args, recorded[-1][1], "sweep")
    return exit_code


def register(commands: Any) -> None:
    """Add `sweep` to the `mptfx` argparse tree."""
    sweep = commands.add_parser(
        "sweep", help="run the pipeline for every combination of --set values, then compare",
        description="Run the pipeline once per point of the grid (TFX's cache skips what did "
        "not change), then print the compare table for those runs.")
    sweep.add_argument("--set", action="append", required=True, metavar="KEY=V1,V2,...",
                       help="a config key and its values, e.g. "
                       "trainer.precision=float32,mixed_float16 (repeatable; one value = fixed)")
    sweep.add_argument("--config", help="YAML config (default: configs/local.yaml when present)")
    sweep.add_argument("--data", help="image or TFRecord folder, as for `mptfx run`")
    tracking_commands.workspace_argument(sweep)
    tracking_commands.output_arguments(sweep)
    sweep.set_defaults(handler=command_sweep)

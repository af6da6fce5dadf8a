"""The tracking sub-commands of `mptfx`.

    mptfx compare [--experiment NAME] [--last N | RUN_ID ...] [--out DIR]
                  [--format table|csv|json|markdown] [--workspace DIR] [--tracking-uri URI]
    mptfx ui [--workspace DIR] [--host 127.0.0.1] [--port 5000]
    mptfx tracking sync [--workspace DIR] [--to URI]

Imports stay light (no MLflow, no TensorFlow) until a command runs.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path
from typing import Any

from components.errors import EXIT_OK, UsageError
from components.tracking.compare import FORMATS
from components.tracking.reader import StoreReader
from components.tracking.store import (
    LOCAL_ARTIFACTS_DIR,
    LOCAL_DB_NAME,
    is_local_uri,
    local_store_uri,
    requested_tracking_uri,
    require_reachable,
)

DEFAULT_LAST = 10
CONNECT_TIMEOUT_SECONDS = 5.0


def workspace_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workspace", default="workspace",
                        help="workspace folder (default ./workspace)")


def output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="table (best per column marked *), csv, json or markdown")
    parser.add_argument("--out", help="folder for the PNG (default <workspace>/compare)")


def register(commands: Any) -> None:
    """Add `compare`, `ui` and `tracking sync` to the `mptfx` argparse tree (`sweep`, which
    runs the pipeline, is pipelines/sweep.py and reuses the output options here)."""
    compare = commands.add_parser(
        "compare", help="compare recorded runs side by side (table + PNG)",
        description="Compare pipeline runs recorded in MLflow: precision, XLA, strategy, "
        "batch, images/sec, accuracy, model sizes, wall time; the best in each column marked. "
        "Under the table, each run's report (runs/<run id>/report.html beside its "
        "summary.json, as a file:// URL) when it has one; in json and csv its `report` field, "
        "in markdown a link on the run's name. A workspace's sqlite store is read without "
        "importing MLflow.")
    compare.add_argument("runs", nargs="*", metavar="RUN_ID",
                         help="MLflow run ids or TFX run ids (default: the last runs)")
    compare.add_argument("--experiment", help="MLflow experiment (default: the experiment "
                         "of the newest mptfx run)")
    compare.add_argument("--last", type=int, metavar="N",
                         help=f"compare the N newest runs (default {DEFAULT_LAST})")
    compare.add_argument("--tracking-uri", help="MLflow store (default: $MLFLOW_TRACKING_URI, "
                         "else sqlite:///<workspace>/mlflow.db)")
    workspace_argument(compare)
    output_arguments(compare)
    compare.set_defaults(handler=command_compare)

    ui = commands.add_parser("ui", help="start the MLflow UI on the workspace's store")
    workspace_argument(ui)
    ui.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    ui.add_argument("--port", type=int, default=5000, help="port (default 5000)")
    ui.set_defaults(handler=command_ui)

    tracking = commands.add_parser("tracking", help="MLflow store maintenance")
    actions = tracking.add_subparsers(dest="tracking_command", required=True, metavar="ACTION")
    sync = actions.add_parser(
        "sync", help="copy runs recorded locally while the server was down to the server")
    workspace_argument(sync)
    sync.add_argument("--to", metavar="URI", help="server to copy to (default: the one each "
                      "run was meant for)")
    sync.set_defaults(handler=command_sync)


def _now() -> str:
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def _plot_path(args: argparse.Namespace, name: str) -> Path:
    folder = Path(args.out) if args.out else Path(args.workspace) / "compare"
    return folder.resolve() / f"{name}-{_now()}.png"


def open_store(uri: str, workspace: Path) -> StoreReader:
    """A reader of the MLflow store at `uri` (components/tracking/reader.py: a workspace's
    sqlite file is read without importing MLflow); exit 2 when there is none."""
    from components.tracking.reader import open_reader, sqlite_path

    if is_local_uri(uri):
        database = sqlite_path(uri)
        if database is not None and not database.exists():
            raise UsageError(f"no MLflow store at {database}; record a run first with "
                             f"`mptfx run --workspace {workspace}`")
    else:
        require_reachable(uri, CONNECT_TIMEOUT_SECONDS,
                          hint=f"compare the runs recorded locally with --tracking-uri "
                          f"{local_store_uri(workspace)}")
    return open_reader(uri)


def print_comparison(rows: list[dict], args: argparse.Namespace, uri: str, name: str) -> None:
    from components.tracking.compare import format_rows, plot_runs

    plot = plot_runs(rows, _plot_path(args, name))
    print(format_rows(rows, args.format, extra={"tracking_uri": uri, "plot": str(plot)}))
    if args.format == "table":
        print(f"\nplot: {plot}")
    elif args.format != "json":
        print(f"plot: {plot}", file=sys.stderr)


def command_compare(args: argparse.Namespace) -> int:
    """`mptfx compare`: the table (or CSV/JSON/markdown) and the PNG."""
    from components.tracking.compare import load_rows, resolve_runs

    if args.runs and args.last is not None:
        raise UsageError("give either RUN_IDs or --last N, not both")
    if args.last is not None and args.last < 1:
        raise UsageError(f"--last must be at least 1. Received: {args.last}")
    workspace = Path(args.workspace).resolve()
    uri = args.tracking_uri or requested_tracking_uri("", os.environ) or local_store_uri(
        workspace)
    reader = open_store(uri, workspace)
    try:
        runs = resolve_runs(reader, args.runs, args.experiment, args.last or DEFAULT_LAST)
    except LookupError as error:
        raise UsageError(f"{error} in {uri}") from None
    if not runs:
        raise UsageError(f"no mptfx runs to compare in experiment {args.experiment!r} at {uri}")
    print_comparison(load_rows(reader, runs, workspace), args, uri, "compare")
    return EXIT_OK


def command_ui(args: argparse.Namespace) -> int:
    """`mptfx ui`: replace this process with `mlflow ui` on `<workspace>/mlflow.db`."""
    workspace = Path(args.workspace).resolve()
    database = workspace / LOCAL_DB_NAME
    if not database.exists():
        raise UsageError(f"no MLflow store at {database}; record a run first with "
                         f"`mptfx run --workspace {args.workspace}`")
    env = dict(os.environ)
    # The UI needs no background job runner (GenAI evaluation jobs); it costs processes.
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    argv = [sys.executable, "-m", "mlflow", "ui",
            "--backend-store-uri", local_store_uri(workspace),
            "--artifacts-destination", str(workspace / LOCAL_ARTIFACTS_DIR),
            "--host", args.host, "--port", str(args.port), "--workers", "1"]
    print(f"mptfx ui: MLflow UI for {database} on http://{args.host}:{args.port} "
          f"(Ctrl+C stops it)", file=sys.stderr, flush=True)
    os.execve(sys.executable, argv, env)
    return EXIT_OK  # not reached


def command_sync(args: argparse.Namespace) -> int:
    """`mptfx tracking sync`: copy pending local runs to their server."""
    from components.tracking.sync import sync_workspace

    def report(line: str) -> None:
        print(line, flush=True)

    try:
        sync_workspace(Path(args.workspace), args.to, CONNECT_TIMEOUT_SECONDS, report)
    except FileNotFoundError as error:
        raise UsageError(str(error)) from None
    return EXIT_OK

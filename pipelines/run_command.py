"""`mptfx run` as a function: the pipeline in this process, in one locked workspace.

    exit_code = command_run(args)                         # mptfx run
    exit_code = command_run(args, planner=plan_retrain)   # mptfx retrain: skip or add a schema

`command_run` checks the workspace, the config and a user's model file before any component
starts (UsageError, exit 2), runs the pipeline with the libraries' output in
`runs/<run id>/pipeline.log`, prints one line per component and a summary table, writes
summary.json and records the run in MLflow. Exit codes: 0 the run completed (blessed or
not), 1 a component failed, 2 usage, configuration or input-data error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from components.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_PIPELINE_FAILED, UsageError
from components.redact import redact_text, redact_tree
from pipelines.console import library_output_to, one_line, quiet_tensorflow
from pipelines.data_source import resolve_data
from pipelines.workspace import Workspace, new_run_id


@dataclass
class RunPlan:
    """What a command adds to a plain `run`: a reason to skip it before any component runs,
    a schema to validate against, and a step after the summary is written."""

    skip_reason: str | None = None
    schema_file: str = ""
    after_run: Callable[[dict[str, Any]], None] | None = None


Planner = Callable[[Any, Any, Any], RunPlan]

WORKSPACE_LOCK_FILE = "workspace.lock"


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `mptfx run`, shared by the commands that run the pipeline."""
    parser.add_argument("--config", help="YAML config (default: configs/local.yaml when present)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="override one config key, e.g. --set trainer.epochs=3 (repeatable)")
    parser.add_argument("--workspace", default="workspace",
                        help="output folder (default ./workspace)")
    parser.add_argument("--data", help="image folder (one sub-folder per class), TFRecord "
                        "folder, or folder of span-<N> drops")
    parser.add_argument("--json", action="store_true", help="print summary.json on stdout")


def command_run(args: argparse.Namespace, planner: Planner | None = None) -> int:
    """`mptfx run`; other commands (retrain) reuse it with a planner.

    Holds the workspace lock for the whole run: two runs in one workspace would share its
    sqlite ML Metadata and MLflow stores and its pipeline root. The second one exits 0
    naming the holder, as `mptfx retrain` does (a cron job must not pile up failures).
    """
    from pipelines.locking import RunLock

    workspace_root = Path(args.workspace).resolve()
    check_writable_workspace(workspace_root)
    with RunLock(workspace_root / WORKSPACE_LOCK_FILE) as lock:
        if not lock.acquired:
            message = (f"mptfx {args.command}: workspace {workspace_root} is in use by another "
                       f"run ({lock.describe_holder()}); nothing to do")
            print(message, file=sys.stderr if args.json else sys.stdout)
            if args.json:
                print(json.dumps({"status": "skipped", "reason": message}, indent=2))
            return EXIT_OK
        return _run_in_workspace(args, workspace_root, planner)


def _run_in_workspace(args: argparse.Namespace, workspace_root: Path,
                      planner: Planner | None) -> int:
    quiet_tensorflow()
    started = time.monotonic()
    run_id = new_run_id()
    log_path = workspace_root / "runs" / run_id / "pipeline.log"
    # Our own lines go to the terminal: stdout, or stderr when stdout carries the JSON.
    crash: Exception | None = None
    with library_output_to(log_path, console_fd=2 if args.json else 1) as out:
        try:
            summary, error = _run_pipeline(
                args, workspace_root, run_id, log_path, started, out, planner
            )
        except UsageError:
            raise
        except Exception as failure:  # outside any component: the traceback goes to the log
            logging.getLogger("mptfx").exception("mptfx %s %s stopped", args.command, run_id)
            crash = failure
        else:
            if summary["status"] != "skipped":
                _print_summary(summary, out)
    if crash is not None:
        return _report_crash(crash, log_path)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if error is not None:
        print(f"mptfx: error: {summary['error']} (full log: {log_path})", file=sys.stderr)
        return EXIT_PIPELINE_FAILED
    return EXIT_OK


def _report_crash(crash: Exception, log_path: Path) -> int:
    """One line for an error raised outside the components: a path the OS refused is the
    user's to fix (exit 2, naming it); anything else is a failed run (exit 1)."""
    if isinstance(crash, OSError) and crash.filename:
        reason = crash.strerror or one_line(crash)
        raise UsageError(f"cannot use {crash.filename}: {reason} (full log: {log_path})")
    print(f"mptfx: error: {redact_text(one_line(crash))} (full log: {log_path})",
          file=sys.stderr)
    return EXIT_PIPELINE_FAILED


def check_writable_workspace(workspace_root: Path) -> None:
    """Create the workspace folder and prove it takes a file, else exit 2 naming it."""
    try:
        workspace_root.mkdir(parents=True, exist_ok=True)
        probe = workspace_root / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise UsageError(f"workspace {workspace_root} is not writable: "
                         f"{error.strerror or error}") from None


def check_model_file(config: Any, out: TextIO) -> None:
    """Import `model.module_file` and build its model once under the resolved policy; a
    refusal is a UsageError (exit 2) in one line, its traceback in the log."""
    if not config.model.module_file:
        return
    from components.trainer.model_check import check_configured_model
    from models.user_module import UserModelError

    try:
        notes = check_configured_model(config)
    except UserModelError as error:
        logging.getLogger("mptfx").error("model file check failed", exc_info=error)
        raise UsageError(str(error)) from None
    for note in notes:
        print(f"mptfx: {note}", file=out)


def _run_pipeline(
    args: argparse.Namespace,
    workspace_root: Path,
    run_id: str,
    log_path: Path,
    started: float,
    out: TextIO,
    planner: Planner | None = None,
) -> tuple[dict[str, Any], BaseException | None]:
    """Build and run the pipeline; returns summary.json's content and the error, if any."""
    from pipelines.config import ConfigError, load_config

    try:
        config = load_config(args.config, args.set or [])
    except ConfigError as error:
        raise UsageError(str(error)) from None
    workspace = Workspace(workspace_root)
    check_model_file(config, out)  # before anything runs: a bad model file costs seconds
    data = resolve_data(config, workspace, args.data)
    plan = planner(config, workspace, data) if planner else RunPlan()
    run_dir = workspace.run_dir(run_id)
    base = {
        "status": "completed",
        "run_id": run_id,
        "pipeline": config.pipeline.name,
        "workspace": str(workspace.root),
        "data_root": data.root,
        "spans": data.spans,
        "summary_path": str(run_dir / "summary.json"),
        "log_path": str(log_path),
        # Redacted: summary.json, MLflow params and the model card all copy this.
        "config": redact_tree(config.model_dump()),
    }
    if plan.skip_reason:
        print(f"mptfx {args.command} {run_id}: {plan.skip_reason}; nothing to do", file=out)
        summary = {**base, "status": "skipped", "reason": plan.skip_reason, "components": {},
                   "wall_seconds": round(time.monotonic() - started, 2)}
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        return summary, None

    from components import tracking

    tracking_store = tracking.resolve_store(config, workspace.root, out)  # exit 2 if required
    from components.ingest.errors import DataError
    from models.user_module import UserModelError
    from pipelines.local_runner import RunProgress, run_locally
    from pipelines.pipeline import create_pipeline
    from pipelines.summary import build_summary, collect_outputs

    try:
        pipeline = create_pipeline(config, workspace, data, schema_file=plan.schema_file)
    except (UserModelError, DataError) as error:  # model file not staged; data fingerprint
        raise UsageError(str(error)) from None
    print(f"mptfx run {run_id}: {len(pipeline.components)} components, "
          f"workspace {workspace.root}, log {log_path}", file=out)

    def on_event(kind: str, timing: Any) -> None:
        if kind == "start":
            print(f"  > {timing.name} ...", file=out, flush=True)
        else:
            print(f"  < {timing.name} done in {timing.seconds:.1f} s", file=out, flush=True)

    progress = RunProgress()
    error: BaseException | None = None
    try:
        run_locally(pipeline, run_id, on_event, progress)
    except KeyboardInterrupt:
        error = KeyboardInterrupt("interrupted")
    except Exception as failure:  # a component raised: report it, keep the summary
        error = failure
        logging.getLogger("mptfx").exception("component %s failed", progress.failed_component)

    if error is not None:
        base["status"] = "failed"
        base["failed_component"] = progress.failed_component
        base["error"] = (f"{progress.failed_component or 'pipeline'} failed: "
                         f"{redact_text(one_line(error))}")
    nodes = collect_outputs(pipeline.metadata_connection_config, config.pipeline.name, run_id)
    timings = {name: t.seconds for name, t in progress.timings.items()}
    summary = build_summary(nodes, timings, base)
    summary["trainer"].setdefault("model", config.model.name)
    summary["wall_seconds"] = round(time.monotonic() - started, 2)
    if plan.after_run is not None and error is None:
        plan.after_run(summary)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    tracking.log_run(tracking_store, summary, out)  # adds summary["mlflow"], rewrites the file
    return summary, error


def _print_summary(summary: dict[str, Any], out: TextIO) -> None:
    rows = [("component", "status", "seconds")]
    for name, info in summary["components"].items():
        seconds = info["seconds"]
        rows.append((name, info["status"], "-" if seconds is None else f"{seconds:.1f}"))
    width = max(len(row[0]) for row in rows)
    print("", file=out)
    for row in rows:
        print(f"  {row[0]:<{width}}  {row[1]:<10} {row[2]:>8}", file=out)
    trainer, evaluation = summary.get("trainer", {}), summary.get("eval", {})
    pushed, data = summary.get("pushed", {}), summary.get("data", {})
    facts = [
        ("run", f"{summary['run_id']}  {summary['status']}  {summary['wall_seconds']:.1f} s"),
        ("data", f"{data.get('images', '?')} images, {data.get('quarantined', 0)} quarantined"),
    ]
    if trainer:
        xla = "on" if trainer.get("xla") else "off"
        facts.append(("trainer", f"{trainer.get('model')} {trainer.get('precision')} "
                      f"({trainer.get('precision_reason')}), strategy {trainer.get('strategy')}, "
                      f"xla {xla}, {trainer.get('epochs')} epochs, "
                      f"{trainer.get('images_per_sec', 0):.0f} img/s"))
    if evaluation:
        verdict = "BLESSED" if evaluation.get("blessed") else "NOT blessed: " + "; ".join(
            evaluation.get("why_not_blessed", []))
        metric = "dice" if "dice" in evaluation else "accuracy"
        facts.append(("eval", f"{metric} {evaluation.get(metric)}  {verdict}"))
    if pushed:
        facts.append(("pushed", f"version {pushed['version']} -> {pushed['path']}"
                      if pushed.get("pushed") else "nothing pushed"))
    for variant, info in (summary.get("tflite") or {}).items():
        if variant == "skipped":
            facts.append(("tflite", f"skipped: {info}"))
        elif isinstance(info, dict):
            facts.append((f"tflite {variant}", f"{info.get('bytes')} bytes, agreement "
                          f"{info.get('agreement')}, published: {info.get('path') or 'no'}"))
    if summary.get("error"):
        facts.append(("error", summary["error"]))
    facts.append(("summary", summary["summary_path"]))
    print("", file=out)
    for key, value in facts:
        print(f"  {key + ':':<13} {value}", file=out)

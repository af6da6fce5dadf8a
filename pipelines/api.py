"""Run the pipeline from Python, as `mptfx run` does, and get its summary back.

    from pipelines.api import run_pipeline
    summary = run_pipeline("configs/local.yaml", "workspace", overrides=["trainer.epochs=1"])
    summary.status, summary.eval.blessed, summary.pushed_version, summary.trainer.precision

`run_pipeline` holds the workspace lock, checks the workspace, the config and a user's model
file before any component starts, runs the TFX pipeline in this process with the libraries'
output in `runs/<run id>/pipeline.log`, writes summary.json and records the run in MLflow.
`mptfx run` (`pipelines/run_command.py`), `mptfx retrain` and `mptfx sweep` call it.

What it raises: UsageError (a bad config key, data folder, model file or workspace: one line
naming it; exit 2 in the CLI), WorkspaceInUse (another run holds the workspace),
RunInterrupted (Ctrl-C or SIGTERM during the run; its summary was written). A component
that fails does not raise: the summary says `status: failed`, `failed_component` and
`error`. An error outside the components propagates after its traceback went to the log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from components.core.text import one_line
from components.errors import UsageError
from components.ingest.selection import DataSelection
from components.redact import redact_text, redact_tree
from components.run_summary import SUMMARY_FILE, RunSummary
from pipelines.config import Config
from pipelines.console import library_output
from pipelines.data_source import resolve_data
from pipelines.distill import check_teacher
from pipelines.os_errors import Stage, disk_full_error, raise_if_disk_full
from pipelines.workspace import Workspace, new_run_id

WORKSPACE_LOCK_FILE = "workspace.lock"
LOG_FILE = "pipeline.log"


@dataclass
class RunPlan:
    """What a command adds to a plain run: a reason to skip it before any component runs,
    a schema to validate against, a step after the summary is built, and why the run was
    started (summary.json's `trigger`, e.g. `{"kind": "drift", "features": [...]}`)."""

    skip_reason: str | None = None
    schema_file: str = ""
    after_run: Callable[[RunSummary], None] | None = None
    trigger: dict[str, Any] | None = None


# (config, workspace, data selection) -> the plan; pipelines/retrain.py `plan_retrain`.
Planner = Callable[[Config, Workspace, DataSelection], RunPlan]


class WorkspaceInUse(Exception):
    """Another run holds the workspace lock (the message names the holder)."""


class RunInterrupted(KeyboardInterrupt):
    """The run was interrupted; `summary` (status failed) was written before this was raised."""

    def __init__(self, summary: RunSummary) -> None:
        super().__init__("interrupted")
        self.summary = summary


def log_path_of(workspace: str | os.PathLike, run_id: str) -> Path:
    """Where run `run_id` writes the libraries' output."""
    return Workspace(Path(workspace).resolve()).run_dir(run_id) / LOG_FILE


def run_pipeline(
    config: Config | str | os.PathLike | None = None,
    workspace: str | os.PathLike = "workspace",
    data: str | None = None,
    *,
    overrides: Sequence[str] = (),
    planner: Planner | None = None,
    run_id: str | None = None,
    console_fd: int = 2,
    command: str = "run",
) -> RunSummary:
    """Run the pipeline once in `workspace` and return its summary.

    Args:
        config: a YAML file (default `configs/local.yaml` when present) or a loaded Config.
        workspace: the output folder (created when missing).
        data: an image, TFRecord, volume or span folder; default the config's data.source.
        overrides: `KEY=VALUE` overrides, as `--set` (only with a file or None).
        planner: retrain's hook (see RunPlan).
        run_id: the run's id (default a new one); its log is `log_path_of(workspace, run_id)`.
        console_fd: where our own progress lines go (1 stdout, 2 stderr).
        command: the command name used in our lines ("run", "retrain").
    """
    from pipelines.locking import RunLock

    stage = Stage("loading the config")
    workspace_root = Path(workspace).resolve()
    log_path: Path | None = None
    # From here the libraries' output is held: loading the config may import TensorFlow,
    # whose start-up lines then open pipeline.log instead of the terminal.
    with library_output(console_fd) as output:
        try:
            loaded = _load(config, overrides, data)  # a config error writes nothing
            stage.enter("checking the workspace", workspace_root)
            check_writable_workspace(workspace_root)
            with RunLock(workspace_root / WORKSPACE_LOCK_FILE) as lock:
                if not lock.acquired:
                    raise WorkspaceInUse(f"mptfx {command}: workspace {workspace_root} is in "
                                         f"use by another run ({lock.describe_holder()}); "
                                         f"nothing to do")
                run_id = run_id or new_run_id()
                log_path = log_path_of(workspace_root, run_id)
                stage.enter("opening the run's log", log_path)
                output.move_to(log_path)
                summary, interrupted = _run(loaded, workspace_root, data, run_id, log_path,
                                            time.monotonic(), output.console, planner,
                                            command, stage)
        except (UsageError, WorkspaceInUse):
            raise
        except Exception as error:  # outside any component: the traceback goes to the log
            logging.getLogger("mptfx").exception("mptfx %s %s stopped", command, run_id)
            raise_if_disk_full(error, stage, workspace_root, log_path)
            raise
    if interrupted:
        raise RunInterrupted(summary)
    return summary


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


def check_pretrained_weights(config: Config) -> None:
    """`model.params.weights: imagenet`: the weights are in Keras' cache or download now, so
    a machine without them stops before the Ingest (UsageError, exit 2, naming the URL and
    where to place the file)."""
    if config.model.weights() != "imagenet":
        return
    from components.trainer.pretrained import WeightsUnavailableError, check_imagenet_available

    try:
        check_imagenet_available(config.model.name, config.model.input_size)
    except WeightsUnavailableError as error:
        raise UsageError(str(error)) from None


def check_model_file(config: Config, out: TextIO) -> None:
    """Import `model.module_file` and build its model once under the resolved policy; a
    refusal is a UsageError (exit 2) in one line, its traceback in the log."""
    if not config.model.module_file:
        return
    from models.user_module import UserModelError
    from pipelines.model_file_check import check_configured_model

    try:
        notes = check_configured_model(config)
    except UserModelError as error:
        logging.getLogger("mptfx").error("model file check failed", exc_info=error)
        raise UsageError(str(error)) from None
    for note in notes:
        print(f"mptfx: {note}", file=out)


def _load(config: Config | str | os.PathLike | None, overrides: Sequence[str],
          data_arg: str | None) -> Config:
    from pipelines.config import ConfigError, load_config

    if isinstance(config, Config):
        if overrides:
            raise UsageError("run_pipeline: overrides apply to a config file, not a Config")
        return config
    try:
        return load_config(config, list(overrides), data=data_arg)
    except ConfigError as error:
        raise UsageError(str(error)) from None


def _run(
    config: Config,
    workspace_root: Path,
    data_arg: str | None,
    run_id: str,
    log_path: Path,
    started: float,
    out: TextIO,
    planner: Planner | None,
    command: str,
    stage: Stage,
) -> tuple[RunSummary, bool]:
    """Build and run the pipeline; returns the written summary and whether it was
    interrupted. `stage` follows what is being done, for the line an OS error becomes."""
    workspace = Workspace(workspace_root)
    stage.enter("checking the model file", config.model.module_file or None)
    check_model_file(config, out)  # before anything runs: a bad model file costs seconds
    stage.enter("fetching the pretrained weights", None)
    check_pretrained_weights(config)
    stage.enter("preparing the data", workspace.builtin_data_dir.parent)
    data = resolve_data(config, workspace, data_arg)
    check_teacher(config, workspace, data, out)  # trainer.distill: before the Ingest too
    plan = planner(config, workspace, data) if planner else RunPlan()
    base = _summary_base(config, workspace, data, run_id, log_path, plan)
    if plan.skip_reason:
        print(f"mptfx {command} {run_id}: {plan.skip_reason}; nothing to do", file=out)
        return _skipped(base, plan.skip_reason, started, stage), False

    from components import tracking

    # exit 2 if required
    tracking_store = tracking.resolve_store(config.tracking, config.run_names, workspace.root,
                                            out)
    from components.ingest.errors import DataError
    from models.user_module import UserModelError
    from pipelines.pipeline import create_pipeline

    stage.enter("building the pipeline", workspace.pipeline_root(config.pipeline.name))
    try:
        pipeline = create_pipeline(config, workspace, data, schema_file=plan.schema_file)
    except (UserModelError, DataError) as error:  # model file not staged; data fingerprint
        raise UsageError(str(error)) from None
    named = (f"pipeline {config.pipeline.name} and model {config.pusher.model_name} named "
             f"after {config.named_after}, " if config.named_after else "")
    print(f"mptfx {command} {run_id}: {named}{len(pipeline.components)} components, "
          f"workspace {workspace.root}, log {log_path}", file=out)
    # MLflow's import, store and (system metrics on) the run while the components run;
    # started after TFX and Beam are imported here, so the two threads never import the
    # same heavy packages at once.
    tracking_ready = tracking.prepare(
        tracking_store, run_id if config.tracking.system_metrics else None,
        started=time.time() - (time.monotonic() - started))
    # A crash from here on leaves no MLflow run RUNNING (log_run ends it otherwise).
    with tracking.ended_on_crash(tracking_ready):
        error, progress = _run_components(pipeline, run_id, out, stage, workspace, config,
                                          tracking_ready)
        disk_full = disk_full_error(error, stage, workspace.root, log_path) if error else None
        if error is not None:
            base["status"] = "failed"
            base["failed_component"] = progress.failed_component
            base["error"] = str(disk_full) if disk_full else (
                f"{progress.failed_component or 'pipeline'} failed: "
                f"{redact_text(one_line(error))}")
        try:
            summary = _summarize(pipeline, config, run_id, progress, base, started,
                                 plan.after_run if error is None else None, stage)
        except Exception:  # on a full disk, the summary is written only if it still fits
            if disk_full is None:
                raise
            logging.getLogger("mptfx").exception("no summary for a run stopped by a full disk")
        if disk_full is not None:  # the component's line, not a second one about MLflow's
            raise disk_full
        stage.enter("recording the run in MLflow", tracking_store.uri)
        tracking.log_run(tracking_store, summary, out, tracking_ready)  # sets summary.mlflow
    return summary, isinstance(error, KeyboardInterrupt)


def _summary_base(config: Config, workspace: Workspace, data: DataSelection, run_id: str,
                  log_path: Path, plan: RunPlan) -> dict[str, Any]:
    """summary.json's fields known before anything runs (status completed until a
    component fails)."""
    base = {
        "status": "completed",
        "run_id": run_id,
        "pipeline": config.pipeline.name,
        "workspace": str(workspace.root),
        "data_root": data.root,
        "spans": data.spans,
        "summary_path": str(workspace.run_dir(run_id) / SUMMARY_FILE),
        "log_path": str(log_path),
        # Redacted: summary.json, MLflow params and the model card all copy this.
        "config": redact_tree(config.model_dump()),
    }
    if plan.trigger:
        base["trigger"] = plan.trigger
    return base


def _skipped(base: dict[str, Any], reason: str, started: float, stage: Stage) -> RunSummary:
    """summary.json of a run that had nothing to do (retrain: no new span), written."""
    summary = RunSummary.parse({**base, "status": "skipped", "reason": reason,
                                "components": {},
                                "wall_seconds": round(time.monotonic() - started, 2)})
    stage.enter("writing summary.json", summary.summary_path)
    summary.write()
    return summary


def _summarize(pipeline: Any, config: Config, run_id: str, progress: Any, base: dict[str, Any],
               started: float, after_run: Callable[[RunSummary], None] | None,
               stage: Stage) -> RunSummary:
    """summary.json from ML Metadata and the timings, written after `after_run` saw it."""
    from pipelines.metadata_summary import build_summary, collect_outputs

    nodes = collect_outputs(pipeline.metadata_connection_config, config.pipeline.name, run_id)
    timings = {name: t.seconds for name, t in progress.timings.items()}
    summary = build_summary(nodes, timings, base, model_name=config.model.name)
    summary.wall_seconds = round(time.monotonic() - started, 2)
    if after_run is not None:
        after_run(summary)
    stage.enter("writing summary.json", summary.summary_path)
    summary.write()
    return summary


def _run_components(pipeline: Any, run_id: str, out: TextIO, stage: Stage,
                    workspace: Workspace, config: Config,
                    tracking_ready: Any = None) -> tuple[BaseException | None, Any]:
    """Run the components, one line as each starts and ends; returns what stopped them
    (None when all completed) and the run's progress (timings, the failed component). The
    in-process Trainer gets the MLflow run `tracking_ready` opened (system metrics)."""
    from components import tracking
    from pipelines.kubernetes.ir import TRAINER_NODE
    from pipelines.local_runner import RunProgress, run_locally

    outputs = workspace.pipeline_root(config.pipeline.name)
    # The opened MLflow run is handed to the Trainer through the environment, as MLflow
    # hands a run to a child process (until the pipeline ends).
    handoff = contextlib.ExitStack()

    def on_event(kind: str, timing: Any) -> None:
        if kind == "start":
            if timing.name == TRAINER_NODE and config.tracking.system_metrics:
                handoff.enter_context(tracking.trainer_handoff(
                    tracking_ready, config.tracking.system_metrics_interval_seconds))
            stage.enter(timing.name, outputs / timing.name)
            print(f"  > {timing.name} ...", file=out, flush=True)
        else:
            print(f"  < {timing.name} done in {timing.seconds:.1f} s", file=out, flush=True)

    progress = RunProgress()
    try:
        with handoff:
            run_locally(pipeline, run_id, on_event, progress)
    except KeyboardInterrupt:
        return KeyboardInterrupt("interrupted"), progress
    except Exception as failure:  # a component raised: report it, keep the summary
        logging.getLogger("mptfx").exception("component %s failed", progress.failed_component)
        return failure, progress
    return None, progress

"""MLflow tracking for mptfx, behind two calls the CLI makes around a pipeline run.

    store = tracking.resolve_store(config.tracking, names, workspace.root, out)  # first
    warm = tracking.prepare(store, run_id)                        # the store and the run
    with tracking.trainer_handoff(warm, interval): ...            # the Trainer runs
    tracking.log_run(store, summary, out, warm)                   # after summary.json

`resolve_store` picks the store (`tracking.uri`, else MLFLOW_TRACKING_URI, else
`sqlite:///<workspace>/mlflow.db`) and checks that a server answers: unreachable means one
warning and the local store, or exit 2 with `tracking.required: true`. `log_run` records the
run (params, per-epoch and final metrics, artifacts, registry aliases), sets
`summary.mlflow` and rewrites summary.json. Tracking never fails a pipeline run that
completed: if the server goes away mid-run, the run is recorded locally instead.

With `tracking.system_metrics` on, the MLflow run is opened when the pipeline starts and the
Trainer logs MLflow's system metrics to it (live_run.py, system_metrics.py); `log_run` then
completes that run instead of creating one.

The commands `mptfx compare`, `ui` and `tracking sync` are pipelines/tracking_commands.py
(`sweep`: pipelines/sweep.py); they read through `reader.py` and `compare.py`.
Nothing here imports MLflow or TensorFlow at import time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

from components.core.text import one_line
from components.redact import redact
from components.run_summary import RunSummary
from components.tracking import store as store_lib
from components.tracking.config import TrackingSection
from components.tracking.live_run import PreparedRun, ended_on_crash, trainer_handoff
from components.tracking.store import TrackingStore, is_local_uri, server_host

__all__ = ["PreparedRun", "TrackingStore", "ended_on_crash", "log_run", "prepare",
           "resolve_store", "trainer_handoff"]

# How long log_run waits for `prepare` before going on without it (sqlite migrations take
# seconds; a store that takes minutes is reported by log_run's own attempt).
PREPARE_WAIT_SECONDS = 300.0


def resolve_store(section: TrackingSection, names: tuple[str, str], workspace_root: Path,
                  out: TextIO) -> TrackingStore:
    """Where this run will be recorded; prints the one warning when the server is down.
    `names`: (pipeline.name, pusher.model_name), the experiment's and the model's.

    Raises TrackingServerUnreachable (a UsageError, exit 2, naming the host) when the server
    does not answer and `tracking.required` is true.
    """
    store = store_lib.resolve_store(section, *names, Path(workspace_root))
    if store.is_fallback:
        print(store.fallback_warning(), file=out, flush=True)
    return store


def prepare(store: TrackingStore, pipeline_run_id: str | None = None,
            started: float | None = None) -> PreparedRun | None:
    """Import MLflow, create a local store's database and, given `pipeline_run_id` (system
    metrics on), open the pipeline run's MLflow run, in a background thread while the
    pipeline runs (live_run.PreparedRun), so `log_run` finds all of it ready and the
    Trainer has a run to log system metrics to (starting at `started`, epoch seconds, the
    pipeline run's start). A failure here is only logged (log_run then
    meets it again and reports it). A server store with nothing to open: None."""
    if pipeline_run_id is None and not is_local_uri(store.uri):
        return None
    return PreparedRun.start(store, pipeline_run_id, started)


def log_run(store: TrackingStore, summary: RunSummary, out: TextIO,
            prepared: PreparedRun | None = None) -> dict[str, Any]:
    """Record the finished run in MLflow, set `summary.mlflow`, rewrite summary.json.

    `prepared`: what `prepare` started; it is awaited first, so only one thread ever
    migrates the store, and the run it opened is the one recorded (when it is in this
    store: a server that went away makes it a new local run). Returns the `mlflow` section:
    run_id, experiment, tracking_uri, run_url, registered_model (and pending_sync_to /
    sync_command when the run went to the local store instead).
    """
    from components.tracking.recorder import record_pipeline_run

    opened = prepared.wait(PREPARE_WAIT_SECONDS) if prepared is not None else None
    if prepared is not None and prepared.store.uri != store.uri:
        opened = None
    try:
        section = record_pipeline_run(store, summary, opened)
    except Exception as error:  # tracking must not fail a pipeline run that completed
        section = {}
        if not is_local_uri(store.uri):  # the server went away during the run
            store = store.fall_back(one_line(error, limit=300, redact=True))
            print(store.fallback_warning(), file=out, flush=True)
            try:
                section = record_pipeline_run(store, summary)
            except Exception as local_error:
                error = local_error
        if not section:
            from components.tracking.content import read_training_summary
            from components.tracking.recorder import write_report_quietly

            write_report_quietly(summary, read_training_summary(summary))  # still, for the run
            reason = one_line(error, limit=300, redact=True)
            section = {"error": f"MLflow tracking failed: {reason}",
                       "tracking_uri": redact(store.uri)}
            print(f"mptfx: warning: {section['error']}", file=out, flush=True)
    summary.mlflow = section
    summary.write()
    if "run_id" in section:
        where = section.get("run_url") or section["tracking_uri"]
        model = section.get("registered_model") or {}
        alias = f", {model['name']} v{model['version']}" if model else ""
        alias += f" @{model['alias']}" if model.get("alias") else ""
        pending = (f" (server {server_host(store.requested_uri)} pending: "
                   f"{store.sync_command})" if store.is_fallback else "")
        print(f"  mlflow: run {section['run_id']} in experiment {section['experiment']!r}"
              f"{alias} -> {where}{pending}", file=out, flush=True)
    return section

"""MLflow tracking for mptfx, behind two calls the CLI makes around a pipeline run.

    store = tracking.resolve_store(config, workspace.root, out)   # before anything trains
    warm = tracking.prepare(store)                                # the store, meanwhile
    ...                                                           # the pipeline runs
    tracking.log_run(store, summary, out, warm)                   # after summary.json

`resolve_store` picks the store (`tracking.uri`, else MLFLOW_TRACKING_URI, else
`sqlite:///<workspace>/mlflow.db`) and checks that a server answers: unreachable means one
warning and the local store, or exit 2 with `tracking.required: true`. `log_run` records the
run (params, per-epoch and final metrics, artifacts, registry aliases), sets
`summary.mlflow` and rewrites summary.json. Tracking never fails a pipeline run that
completed: if the server goes away mid-run, the run is recorded locally instead.

The commands `mptfx compare`, `ui` and `tracking sync` are pipelines/tracking_commands.py
(`sweep`: pipelines/sweep.py); they read through `reader.py` and `compare.py`.
Nothing here imports MLflow or TensorFlow at import time.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, TextIO

from components.core.config import Config
from components.core.text import one_line
from components.redact import redact
from components.run_summary import RunSummary
from components.tracking import store as store_lib
from components.tracking.store import TrackingStore, is_local_uri, server_host

__all__ = ["TrackingStore", "log_run", "prepare", "resolve_store"]

# How long log_run waits for `prepare` before going on without it (sqlite migrations take
# seconds; a store that takes minutes is reported by log_run's own attempt).
PREPARE_WAIT_SECONDS = 300.0


def resolve_store(config: Config, workspace_root: Path, out: TextIO) -> TrackingStore:
    """Where this run will be recorded; prints the one warning when the server is down.

    Raises TrackingServerUnreachable (a UsageError, exit 2, naming the host) when the server
    does not answer and `tracking.required` is true.
    """
    store = store_lib.resolve_store(config.tracking, config.pipeline.name,
                                    config.pusher.model_name, Path(workspace_root))
    if store.is_fallback:
        print(store.fallback_warning(), file=out, flush=True)
    return store


def prepare(store: TrackingStore) -> threading.Thread | None:
    """Import MLflow and create a local store's database (its schema migrations) in a
    background thread while the pipeline runs, so `log_run` finds both ready: about ten
    seconds of a first run's wall time off the critical path. Nothing is shared with the
    main thread but the files; a failure here is only logged (log_run then meets it again
    and reports it). A server store needs no preparing: None."""
    if not is_local_uri(store.uri):
        return None

    def create_store() -> None:
        try:
            store_lib.mlflow_client(store.uri).search_experiments(max_results=1)
        except Exception:  # log_run's own attempt reports it
            logging.getLogger("mptfx").warning("preparing the MLflow store failed",
                                               exc_info=True)

    thread = threading.Thread(target=create_store, name="mptfx-mlflow-store", daemon=True)
    thread.start()
    return thread


def log_run(store: TrackingStore, summary: RunSummary, out: TextIO,
            prepared: threading.Thread | None = None) -> dict[str, Any]:
    """Record the finished run in MLflow, set `summary.mlflow`, rewrite summary.json.

    `prepared`: the thread `prepare(store)` started; it is awaited first, so only one
    thread ever migrates the store. Returns the `mlflow` section: run_id, experiment,
    tracking_uri, run_url, registered_model (and pending_sync_to / sync_command when the
    run went to the local store instead).
    """
    from components.tracking.recorder import record_pipeline_run

    if prepared is not None:
        prepared.join(PREPARE_WAIT_SECONDS)

    try:
        section = record_pipeline_run(store, summary)
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

"""`mptfx tracking sync`: copy runs recorded locally while the server was down to the server.

A run that fell back to `<workspace>/mlflow.db` carries the tag `mptfx.sync_to=<server URI>`.
Sync copies each such run (oldest first) with its params, full metric histories, tags,
artifacts, status and times into the experiment of the same name on the server, redoes its
model registration and alias there, then tags the local run `mptfx.synced_run_id`. The
server run carries `mptfx.synced_from=<local run id>`, so an interrupted sync never copies a
run twice.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.tracking import registry
from components.tracking.recorder import log_in_batches
from components.tracking.store import (
    LOCAL_DB_NAME,
    SYNC_TO_TAG,
    SYNCED_RUN_TAG,
    SYNCED_TO_TAG,
    ensure_experiment,
    local_artifact_location,
    local_store_uri,
    mlflow_client,
    require_reachable,
    server_host,
)

SYNCED_FROM_TAG = "mptfx.synced_from"
_LOCAL_ONLY_TAGS = {SYNC_TO_TAG, SYNCED_TO_TAG, SYNCED_RUN_TAG, "mlflow.runName",
                    registry.REGISTERED_VERSION_TAG}


@dataclass(frozen=True)
class SyncedRun:
    """One copied run: its id here and on the server, and where it went."""

    local_run_id: str
    remote_run_id: str
    tfx_run_id: str
    server: str
    registered: str | None


def pending_runs(client: Any) -> list[Any]:
    """Local runs waiting for a server (tagged sync_to, not yet synced), oldest first."""
    experiment_ids = [e.experiment_id for e in client.search_experiments()]
    runs, token = [], None
    while True:
        page = client.search_runs(experiment_ids, filter_string=f"tags.`{SYNC_TO_TAG}` LIKE '%'",
                                  max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    pending = [run for run in runs if SYNCED_RUN_TAG not in run.data.tags]
    return sorted(pending, key=lambda run: run.info.start_time or 0)


def _already_copied(remote: Any, experiment_id: str, local_run_id: str) -> Any | None:
    found = remote.search_runs([experiment_id],
                               filter_string=f"tags.`{SYNCED_FROM_TAG}` = '{local_run_id}'",
                               max_results=1)
    return found[0] if found else None


def copy_run(local: Any, remote: Any, run: Any, experiment_id: str) -> Any:
    """Create `run` on `remote` in `experiment_id` (params, metric histories, tags, artifacts,
    status, times); returns the new remote run."""
    tags = {key: value for key, value in run.data.tags.items() if key not in _LOCAL_ONLY_TAGS}
    tags[SYNCED_FROM_TAG] = run.info.run_id
    copy = remote.create_run(experiment_id, start_time=run.info.start_time, tags=tags,
                             run_name=run.info.run_name)
    metrics = [metric for key in run.data.metrics
               for metric in local.get_metric_history(run.info.run_id, key)]
    log_in_batches(remote, copy.info.run_id, params=run.data.params, metrics=metrics)
    with tempfile.TemporaryDirectory(prefix="mptfx-sync-") as folder:
        if local.list_artifacts(run.info.run_id):
            downloaded = local.download_artifacts(run.info.run_id, "", folder)
            remote.log_artifacts(copy.info.run_id, downloaded)
    return remote.get_run(copy.info.run_id)


def copy_registration(local: Any, remote: Any, run: Any, copy: Any) -> str | None:
    """Redo the local run's model registration on the server; returns `name vN [@alias]`."""
    tags = run.data.tags
    name, model_uri = tags.get(registry.REGISTERED_MODEL_TAG), tags.get(registry.MODEL_URI_TAG)
    if not name or not model_uri:
        return None
    version = registry.find_version(remote, name, model_uri)
    if version is None:
        artifacts = {a.path for a in remote.list_artifacts(copy.info.run_id)}
        if registry.SERVING_ARTIFACT not in artifacts:
            return None  # registered by an earlier run that has not been copied
        local_version = registry.find_version(local, name, model_uri)
        version_tags = dict(local_version.tags) if local_version else {
            registry.MODEL_URI_TAG: model_uri}
        version = registry.create_version(remote, copy.info.run_id, copy.info.artifact_uri,
                                          name, version_tags)
    alias = tags.get(registry.REGISTERED_ALIAS_TAG)
    if alias:
        registry.set_alias(remote, name, alias, version)
    remote.set_tag(copy.info.run_id, registry.REGISTERED_VERSION_TAG, str(version.version))
    return f"{name} v{version.version}" + (f" @{alias}" if alias else "")


def sync_workspace(workspace: Path, target_uri: str | None, timeout: float,
                   report: Callable[[str], None]) -> list[SyncedRun]:
    """Copy every pending run of `<workspace>/mlflow.db` to its server (or `target_uri`).

    Raises TrackingServerUnreachable naming the host when a server does not answer (nothing
    is copied to it), FileNotFoundError when the workspace has no MLflow store.
    """
    database = Path(workspace).resolve() / LOCAL_DB_NAME
    if not database.exists():
        raise FileNotFoundError(f"no MLflow store at {database}; nothing to sync")
    local = mlflow_client(local_store_uri(workspace))
    runs = pending_runs(local)
    if not runs:
        report(f"nothing to sync: no run in {database} is waiting for a server")
        return []
    by_server: dict[str, list[Any]] = {}
    for run in runs:
        by_server.setdefault(target_uri or run.data.tags[SYNC_TO_TAG], []).append(run)
    for server in by_server:
        require_reachable(server, timeout, hint="nothing was copied; try again when it is up")
    synced = []
    for server, server_runs in by_server.items():
        remote = mlflow_client(server)
        for run in server_runs:
            synced.append(_sync_one(local, remote, run, server))
            entry = synced[-1]
            report(f"synced run {entry.tfx_run_id} ({entry.local_run_id}) -> "
                   f"{server_host(server)} run {entry.remote_run_id}"
                   + (f", registered {entry.registered}" if entry.registered else ""))
    return synced


def _sync_one(local: Any, remote: Any, run: Any, server: str) -> SyncedRun:
    experiment = local.get_experiment(run.info.experiment_id)
    experiment_id = ensure_experiment(remote, experiment.name, local_artifact_location(server))
    copy = _already_copied(remote, experiment_id, run.info.run_id)
    if copy is not None and copy.info.status == "RUNNING":  # an interrupted sync: start over
        remote.delete_run(copy.info.run_id)
        copy = None
    registered = None
    if copy is None:
        copy = copy_run(local, remote, run, experiment_id)
        registered = copy_registration(local, remote, run, copy)
        remote.set_terminated(copy.info.run_id, run.info.status, run.info.end_time)
    local.set_tag(run.info.run_id, SYNCED_TO_TAG, server)
    local.set_tag(run.info.run_id, SYNCED_RUN_TAG, copy.info.run_id)
    return SyncedRun(run.info.run_id, copy.info.run_id,
                     run.data.tags.get("mptfx.tfx_run_id", run.info.run_name), server, registered)


"""Where MLflow records a pipeline run: the tracking store, and whether its server answers.

The embedded default needs nothing running: `sqlite:///<workspace>/mlflow.db`, artifacts in
`<workspace>/mlartifacts/`. `tracking.uri` (or the standard `MLFLOW_TRACKING_URI`) points at
a server instead; if it does not answer, the run is recorded locally and tagged so that
`mptfx tracking sync` can copy it later, unless `tracking.required` makes that an error.

    store = resolve_store(config.tracking, "mptfx-digits", "digits", Path("workspace"))
    store.uri  # "sqlite:////abs/workspace/mlflow.db"

Nothing here imports MLflow at module level: `mptfx --help` stays instant.
"""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from components.errors import UsageError
from components.redact import redact_text, with_credentials
from components.tracking.config import TrackingSection

LOCAL_DB_NAME = "mlflow.db"
LOCAL_ARTIFACTS_DIR = "mlartifacts"
ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"
# A run recorded locally because its server was down carries the server's URI in this tag
# until `mptfx tracking sync` has copied it (then SYNCED_RUN_TAG holds the server's run id).
SYNC_TO_TAG = "mptfx.sync_to"
SYNCED_TO_TAG = "mptfx.synced_to"
SYNCED_RUN_TAG = "mptfx.synced_run_id"
_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433, "http": 80, "https": 443}


class TrackingServerUnreachable(UsageError):
    """The MLflow server does not answer and the command cannot go on without it (exit 2)."""


@dataclass(frozen=True)
class TrackingStore:
    """Where one pipeline run is recorded, and what it was asked to be recorded in.

    Attributes:
        uri: the tracking (and registry) URI the run is written to.
        requested_uri: what `tracking.uri` / MLFLOW_TRACKING_URI asked for ("" = default).
        workspace: the workspace folder (home of the local sqlite store).
        experiment: the MLflow experiment name.
        model_name: the registered model name (pusher.model_name).
        register_model: whether to register versions and set aliases.
        unreachable_reason: why `requested_uri` was not used; None when it was.
    """

    uri: str
    requested_uri: str
    workspace: Path
    experiment: str
    model_name: str
    register_model: bool = True
    unreachable_reason: str | None = None

    @property
    def is_fallback(self) -> bool:
        """True when a server was asked for but the run goes to the local sqlite store."""
        return self.unreachable_reason is not None

    @property
    def artifact_location(self) -> str | None:
        """Artifacts of a new experiment in a local store go into the workspace; a server
        decides for itself (None)."""
        if is_local_uri(self.uri):
            return (self.workspace / LOCAL_ARTIFACTS_DIR).resolve().as_uri()
        return None

    @property
    def sync_command(self) -> str:
        """The command that copies this workspace's locally recorded runs to the server."""
        return f"mptfx tracking sync --workspace {self.workspace}"

    def fall_back(self, reason: str) -> TrackingStore:
        """The same store, redirected to the workspace's sqlite file because of `reason`."""
        return replace(self, uri=local_store_uri(self.workspace), unreachable_reason=reason)

    def fallback_warning(self) -> str:
        """The one line a user sees when the server cannot be reached."""
        return (
            f"mptfx: warning: MLflow server {server_host(self.requested_uri)} is unreachable "
            f"({self.unreachable_reason}); recording this run in "
            f"{self.workspace / LOCAL_DB_NAME} instead; copy it to the server later with: "
            f"{self.sync_command}"
        )


def local_store_uri(workspace: Path) -> str:
    """`sqlite:///<absolute workspace>/mlflow.db`, the embedded default store."""
    return f"sqlite:///{(Path(workspace).resolve() / LOCAL_DB_NAME).as_posix()}"


def local_artifact_location(uri: str) -> str | None:
    """Where a new experiment of a sqlite store keeps its artifacts: `mlartifacts/` beside
    the database file (else MLflow puts them in `./mlruns` of whatever the working directory
    is); None for a server or a file store, which decide for themselves."""
    if not uri.startswith("sqlite:///"):
        return None
    database = Path(uri[len("sqlite:///"):])
    return (database.parent / LOCAL_ARTIFACTS_DIR).resolve().as_uri()


def is_local_uri(uri: str) -> bool:
    """True for stores that need no server: sqlite files, file:// folders, plain paths."""
    scheme = urllib.parse.urlparse(uri).scheme
    return scheme in ("sqlite", "file", "") or len(scheme) == 1  # "C:" style drive letters


def server_host(uri: str) -> str:
    """`host:port` of a server URI without credentials, e.g. `127.0.0.1:5000`."""
    parsed = urllib.parse.urlparse(uri)
    if not parsed.hostname:
        return uri
    return f"{parsed.hostname}:{parsed.port}" if parsed.port else parsed.hostname


def requested_tracking_uri(configured: str, environ: Mapping[str, str]) -> str:
    """`tracking.uri` when set, else MLFLOW_TRACKING_URI, else "" (the workspace default)."""
    return configured.strip() or environ.get(ENV_TRACKING_URI, "").strip()


def check_reachable(uri: str, timeout: float) -> str | None:
    """None when the store at `uri` answers (or needs no server); else a short reason.

    HTTP(S) servers must answer `GET /health` (any status below 500 counts: the server is
    there); database URIs must accept a TCP connection on their port.
    """
    if is_local_uri(uri):
        return None
    parsed = urllib.parse.urlparse(uri)
    scheme = parsed.scheme.split("+")[0]
    if scheme in ("http", "https"):
        # /health needs no credentials, and urllib cannot take them in the URL.
        bare = urllib.parse.urlunsplit(urllib.parse.urlsplit(uri)._replace(
            netloc=parsed.netloc.rpartition("@")[2]))
        return _check_http(bare.rstrip("/") + "/health", timeout)
    if not parsed.hostname:
        return None  # e.g. databricks: MLflow resolves it; nothing to probe here
    port = parsed.port or _DEFAULT_PORTS.get(scheme)
    if port is None:
        return None
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout):
            return None
    except OSError as error:
        return _reason(error, timeout)


def _check_http(health_url: str, timeout: float) -> str | None:
    try:
        with urllib.request.urlopen(health_url, timeout=timeout):
            return None
    except urllib.error.HTTPError as error:
        return None if error.code < 500 else f"HTTP {error.code} from {health_url}"
    except urllib.error.URLError as error:
        return _reason(error.reason, timeout)
    except (OSError, ValueError) as error:
        return _reason(error, timeout)


def _reason(error: Any, timeout: float) -> str:
    if isinstance(error, (socket.timeout, TimeoutError)):
        return f"no answer within {timeout:g} s"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return redact_text(str(error).strip()) or type(error).__name__


def resolve_store(
    tracking: TrackingSection,
    pipeline_name: str,
    model_name: str,
    workspace: Path,
    environ: Mapping[str, str] = os.environ,
) -> TrackingStore:
    """Decide where this run is recorded, before anything is trained.

    Args:
        tracking: the `tracking` config section (uri, required, experiment, register_model,
            connect_timeout_seconds).
        pipeline_name: the default experiment name.
        model_name: the registered model name.
        workspace: the workspace folder.
        environ: where MLFLOW_TRACKING_URI is looked up.

    Raises:
        TrackingServerUnreachable: the server does not answer and `tracking.required` is true.
    """
    requested = requested_tracking_uri(tracking.uri, environ)
    store = TrackingStore(
        uri=requested or local_store_uri(workspace),
        requested_uri=requested,
        workspace=Path(workspace).resolve(),
        experiment=tracking.experiment or pipeline_name,
        model_name=model_name,
        register_model=tracking.register_model,
    )
    reason = check_reachable(store.uri, tracking.connect_timeout_seconds)
    if reason is None:
        return store
    if tracking.required:
        raise TrackingServerUnreachable(
            f"MLflow tracking server {server_host(requested)} is unreachable ({reason}) and "
            f"tracking.required is true; start the server or set tracking.required=false"
        )
    return store.fall_back(reason)


def require_reachable(uri: str, timeout: float, hint: str = "") -> None:
    """Raise TrackingServerUnreachable (exit 2, naming the host) when `uri` does not answer."""
    reason = check_reachable(uri, timeout)
    if reason is not None:
        raise TrackingServerUnreachable(
            f"MLflow tracking server {server_host(uri)} is unreachable ({reason})"
            + (f"; {hint}" if hint else "")
        )


def mlflow_client(uri: str) -> Any:
    """An `MlflowClient` for tracking and registry at `uri`, with MLflow's console chatter
    (run URLs on stdout, progress bars, INFO lines) turned off: our commands print their own."""
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import logging

    from mlflow import MlflowClient

    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    if uri.startswith("sqlite:///"):
        from components.tracking import sqlite_seed

        database = Path(uri[len("sqlite:///"):])
        database.parent.mkdir(parents=True, exist_ok=True)
        sqlite_seed.seed(database)  # a fresh workspace skips MLflow's migrations
    # A database URI stored without its password (redacted) gets it back from
    # MLFLOW_TRACKING_PASSWORD here, in memory only.
    uri = with_credentials(uri, os.environ)
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def ensure_experiment(client: Any, name: str, artifact_location: str | None) -> str:
    """The id of experiment `name`, created (or restored from deletion) when needed."""
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        try:
            return client.create_experiment(name, artifact_location=artifact_location)
        except MlflowException:  # another run created it a moment ago
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                raise
    if experiment.lifecycle_stage == "deleted":
        client.restore_experiment(experiment.experiment_id)
    return experiment.experiment_id

"""`mptfx retrain`: the scheduled entry point. New data in, better model out, nothing broken.

- Asks ML Metadata which spans (or, without spans, which input fingerprints) the Trainer
  already trained on; with nothing new it says "no new data since span N" and exits 0
  before any TFX component starts.
- Holds a lock (pipelines/locking.py) so two schedules never overlap; a second `retrain`
  exits 0 with "already running (since …, pid …)"; a lock left by a killed run is taken over.
- Validates every new drop against the schema of the first trained drop, frozen in
  `<workspace>/schema/<pipeline>.pbtxt` (edit it to accept a deliberate change), so a
  drop with new classes or broken features stops at ExampleValidator.
- With `trainer.warm_start: true` the Trainer starts from the champion's weights.
- With `--runner kubernetes` (the CronJob in k8s/base) the run is the cluster's: each node a
  Job in its node pool (`mptfx k8s submit`'s driver), ML Metadata in the cluster PostgreSQL
  (`kubernetes.metadata`), the workspace at `kubernetes.workspace`, and the lock is the
  cluster run lock that `mptfx k8s submit` takes too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.core.text import one_line
from components.errors import EXIT_OK, UsageError
from pipelines.config import Config

SCHEMA_FILE = "schema.pbtxt"


def frozen_schema_path(workspace: Any, pipeline_name: str) -> Path:
    """Where retraining keeps the schema every new span is validated against."""
    return Path(workspace.root) / "schema" / f"{pipeline_name}.pbtxt"


def trained_inputs(metadata: str | Any, pipeline_name: str) -> list[dict[str, Any]]:
    """Span and input fingerprint of the Examples each successful Trainer execution used.

    `metadata`: the workspace's sqlite file, or an ML Metadata ConnectionConfig (the
    cluster's PostgreSQL, password filled in).
    """
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    if isinstance(metadata, metadata_store_pb2.ConnectionConfig):
        config = metadata
    elif not Path(metadata).exists():
        return []
    else:
        config = metadata_store_pb2.ConnectionConfig()
        config.sqlite.filename_uri = str(metadata)
        config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    try:
        store = metadata_store.MetadataStore(config)
    except Exception as error:  # MLMD raises its own errors (UnavailableError, ...)
        from pipelines.node_entrypoint import describe_database

        raise UsageError(f"cannot read ML Metadata at {describe_database(config)}: "
                         f"{one_line(error)}") from None
    context = store.get_context_by_type_and_name("node", f"{pipeline_name}.Trainer")
    if context is None:
        return []
    done = (metadata_store_pb2.Execution.COMPLETE, metadata_store_pb2.Execution.CACHED)
    executions = [e for e in store.get_executions_by_context(context.id)
                  if e.last_known_state in done]
    events = store.get_events_by_execution_ids([e.id for e in executions])
    example_ids = [e.artifact_id for e in events
                   if e.type == metadata_store_pb2.Event.INPUT
                   and e.path.steps and e.path.steps[0].key == "examples"]
    found = []
    for artifact in store.get_artifacts_by_id(example_ids):
        properties = artifact.custom_properties
        found.append({
            "span": properties["span"].int_value if "span" in properties else 0,
            "input_fingerprint": properties["input_fingerprint"].string_value
            if "input_fingerprint" in properties else "",
        })
    return found


def plan_retrain(config: Config, workspace: Any, data: Any, metadata: Any = None,
                 require_new_data: bool = True) -> Any:
    """Skip when nothing new arrived; otherwise validate against the frozen schema.

    `metadata`: where the trained spans are recorded (see `trained_inputs`); default the
    workspace's own sqlite file. `require_new_data=False` retrains on data already trained
    on (`monitor.retrain_without_new_data`).
    """
    from pipelines.api import RunPlan

    if require_new_data:
        trained = trained_inputs(metadata or str(workspace.metadata_path), config.pipeline.name)
        nothing_new = _nothing_new(data, trained)
        if nothing_new:
            return RunPlan(skip_reason=nothing_new)

    frozen = frozen_schema_path(workspace, config.pipeline.name)
    schema_file = config.data.schema_file or (str(frozen) if frozen.exists() else "")

    def freeze_first_schema(summary: Any) -> None:
        schema_uri = summary.data.schema_uri
        if schema_file or not schema_uri or not summary.eval.blessed:
            return
        frozen.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(schema_uri) / SCHEMA_FILE, frozen)
        summary.schema_frozen = str(frozen)

    return RunPlan(schema_file=schema_file, after_run=freeze_first_schema)


@dataclass
class RetrainOutcome:
    """What `start_retrain` did: its exit code, and why it did not train (None: it ran)."""

    code: int
    skipped: str | None = None


class _TriggeredPlanner:
    """plan_retrain, recording why the run starts (`trigger`) and what it decided."""

    def __init__(self, trigger: dict[str, Any] | None, same_data: bool,
                 metadata: Any = None) -> None:
        self.trigger, self.same_data, self.metadata = trigger, same_data, metadata
        self.skipped: str | None = None

    def __call__(self, config: Any, workspace: Any, data: Any) -> Any:
        plan = plan_retrain(config, workspace, data, metadata=self.metadata,
                            require_new_data=not self.same_data)
        plan.trigger = self.trigger
        self.skipped = plan.skip_reason
        return plan


def start_retrain(args: argparse.Namespace, trigger: dict[str, Any] | None = None,
                  same_data: bool = False) -> RetrainOutcome:
    """The retraining `mptfx retrain` starts (local, or `--runner kubernetes`), recording
    `trigger` (why it started) in summary.json and MLflow; `same_data` trains even when no
    new data arrived. `args` carries retrain's options (see `add_retrain_options`)."""
    from pipelines.locking import LockHeartbeat
    from pipelines.run_command import command_run

    planner = _TriggeredPlanner(trigger, same_data)
    if args.runner == "kubernetes":
        return _retrain_on_kubernetes(args, planner)
    workspace_root = Path(args.workspace).resolve()
    with _run_lock(args, workspace_root) as lock:
        if not lock.acquired:
            print(f"mptfx retrain: already running ({lock.describe_holder()}); nothing to do",
                  file=sys.stderr if args.json else sys.stdout)
            return RetrainOutcome(EXIT_OK, f"already running ({lock.describe_holder()})")
        if lock.took_over:
            print(f"mptfx retrain: took over the lock of a run that did not finish "
                  f"({lock.describe_holder()})", file=sys.stderr)
        if args.lock != "database":
            code = command_run(args, planner=planner)
        else:
            with LockHeartbeat(lock, HEARTBEAT_SECONDS, _stop_run_lock_lost):
                code = command_run(args, planner=planner)
    return RetrainOutcome(code, planner.skipped)


def _nothing_new(data: Any, trained: list[dict[str, Any]]) -> str | None:
    """Why `data` holds nothing the Trainer has not trained on, or None when it does."""
    if data.spans and trained:
        newest_trained = max(item["span"] for item in trained)
        if data.span <= newest_trained:
            return f"no new data since span {newest_trained}"
    elif trained:
        # The run's one listing (resolve_data) already holds the digest the Ingest stores.
        if any(item["input_fingerprint"] == data.fingerprint for item in trained):
            return f"no new data in {data.root} since the last training"
    return None


def _command_retrain(args: argparse.Namespace) -> int:
    return start_retrain(args).code


# How often a database lock's session is checked; a lost session stops the run.
HEARTBEAT_SECONDS = 30.0


def _stop_run_lock_lost() -> None:
    # SIGINT ends the run the way Ctrl-C does: components stop, summary.json says so,
    # exit 130; going on would let two retrainings run at once.
    print("mptfx retrain: the lock's database session is gone (database restarted or "
          "unreachable); stopping this run", file=sys.__stderr__, flush=True)
    os.kill(os.getpid(), signal.SIGINT)


def _say_already_running(args: argparse.Namespace, lock: Any) -> None:
    print(f"mptfx retrain: already running ({lock.describe_holder()}); nothing to do",
          file=sys.stderr if args.json else sys.stdout)


def _retrain_on_kubernetes(args: argparse.Namespace,
                           planner: _TriggeredPlanner) -> RetrainOutcome:
    """One Job per node on the cluster, spans and no-op judged by the cluster's ML Metadata."""
    from pipelines.console import quiet_tensorflow
    from pipelines.data_source import resolve_data
    from pipelines.k8s_commands import drive_run, load_cluster_config, make_clients
    from pipelines.locking import cluster_run_lock
    from pipelines.workspace import Workspace, new_run_id

    refused = [flag for flag, given in (("--lock file", args.lock == "file"),
                                        ("--workspace", args.workspace != "workspace"),
                                        ("--json", args.json)) if given]
    if refused:
        raise UsageError(f"{refused[0]} does not apply to --runner kubernetes: the workspace "
                         f"is kubernetes.workspace, the lock the cluster run lock, the summary "
                         f"<kubernetes.workspace>/runs/<run id>/summary.json")
    quiet_tensorflow()
    config = load_cluster_config(args, check_model=True)
    run_id = new_run_id()
    with cluster_run_lock(config) as lock:
        if not lock.acquired:
            _say_already_running(args, lock)
            return RetrainOutcome(EXIT_OK, f"already running ({lock.describe_holder()})")
        workspace = Workspace(Path(config.kubernetes.workspace))
        data = resolve_data(config, workspace, args.data)
        planner.metadata = _cluster_metadata(config)
        plan = planner(config, workspace, data)
        if plan.skip_reason:
            print(f"mptfx retrain {run_id}: {plan.skip_reason}; nothing to do")
            return RetrainOutcome(EXIT_OK, plan.skip_reason)
        clients = make_clients(args.in_cluster, args.context)
        code = drive_run(config, run_id, clients, in_cluster=args.in_cluster, data=data,
                         schema_file=plan.schema_file, follow_logs=args.follow_logs,
                         after_run=plan.after_run, trigger=plan.trigger)
        return RetrainOutcome(code)


def _cluster_metadata(config: Config) -> Any:
    """The ConnectionConfig of the cluster's ML Metadata database, password from the env."""
    from ml_metadata.proto import metadata_store_pb2

    from components.pod_env import PASSWORD_ENV

    database = config.kubernetes.metadata
    connection = metadata_store_pb2.ConnectionConfig()
    password = os.environ.get(PASSWORD_ENV, "")
    if database.engine == "postgresql":
        pg = connection.postgresql
        pg.host, pg.port, pg.dbname = database.host, str(database.port), database.database
        pg.user, pg.password = database.user, password
    else:
        my = connection.mysql
        my.host, my.port, my.database = database.host, database.port, database.database
        my.user, my.password = database.user, password
    return connection


def _run_lock(args: argparse.Namespace, workspace_root: Path) -> Any:
    """The file lock in the workspace, or with `--lock database` the cluster run lock."""
    from pipelines.locking import RunLock, cluster_run_lock

    if args.lock in (None, "file"):
        return RunLock(workspace_root / "retrain.lock")
    from pipelines.config import ConfigError, load_config

    try:
        config = load_config(args.config, args.set or [], data=args.data)
    except ConfigError as error:
        raise UsageError(str(error)) from None
    return cluster_run_lock(config)


def register(commands: Any) -> None:
    """Add `mptfx retrain` to the CLI."""
    from pipelines.run_command import add_run_arguments

    retrain = commands.add_parser(
        "retrain", help="retrain when new data arrived (for cron / a Kubernetes CronJob)")
    add_run_arguments(retrain)
    add_retrain_options(retrain)
    retrain.set_defaults(handler=_command_retrain)


def add_retrain_options(retrain: argparse.ArgumentParser) -> None:
    """The options of how a retraining runs (lock, runner), for retrain and monitor."""
    retrain.add_argument(
        "--lock", choices=("file", "database"),
        help="file: <workspace>/retrain.lock (default of the local runner, one machine); "
        "database: the cluster run lock in the PostgreSQL of kubernetes.metadata (always "
        "with --runner kubernetes), for runs on different pods or machines")
    retrain.add_argument(
        "--runner", choices=("local", "kubernetes"), default="local",
        help="local: the whole pipeline in this process (default); kubernetes: one Job per "
        "node on the cluster, as mptfx k8s submit (the Kubernetes CronJob)")
    retrain.add_argument("--in-cluster", action="store_true",
                         help="--runner kubernetes: use the pod's ServiceAccount, not kubeconfig")
    retrain.add_argument("--context", help="--runner kubernetes: kubeconfig context")
    retrain.add_argument("--follow-logs", action="store_true",
                         help="--runner kubernetes: echo every pod's log here")

"""Records a Kubernetes run in MLflow, as `mptfx run` records a local one.

After the driver (`mptfx k8s submit`) has seen every node finish, it reads the run's outputs
from the cluster's ML Metadata database, writes `<log dir>/summary.json` and logs the run to
the tracking store (`tracking.uri`, else MLFLOW_TRACKING_URI, else
`sqlite:///<workspace>/mlflow.db`, the driver's workspace): the same params, metrics, artifacts and
registry aliases as a local run, tagged `mptfx.orchestrator=kubernetes`.

Tracking never changes the run's outcome: an unreachable ML Metadata database or MLflow
server is one warning line naming it.

Example:

    summary = record_run(config, ir, report, Path("workspace/runs/r1"), Path("workspace"),
                         sys.stdout)
    summary.mlflow.run_id
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

from components.run_summary import SUMMARY_FILE, RunSummary
from pipelines.config import Config

ORCHESTRATOR = "kubernetes"


def open_run_for_pods(config: Config, workspace_root: Path, run_id: str,
                      out: TextIO) -> tuple[Any, dict[str, str]]:
    """Opens the run's MLflow run before the first Job (or finds the one a first driver
    opened), so that the Trainer's pods log MLflow's system metrics to it.

    The pods reach MLflow at `kubernetes.tracking_uri`; the run is recorded where
    `tracking.resolve_store` says. Only when both are the same server can the pods log to
    the run: otherwise one line says why the Trainer logs no system metrics.

    Returns:
        (the opened run for `record_run`, or None; the variables for the Trainer's pods).
    """
    import io

    from components import tracking
    from components.core.text import one_line
    from components.redact import redact
    from components.tracking.live_run import PreparedRun, open_run, trainer_environment
    from components.tracking.system_metrics import ENV_TRACKING_URI

    if not config.tracking.system_metrics:
        return None, {}
    pods_uri = config.kubernetes.tracking_uri
    try:
        # Its warnings are printed once, by record_run after the run.
        store = tracking.resolve_store(config.tracking, config.run_names, workspace_root,
                                       io.StringIO())
        if store.uri != pods_uri:
            raise ValueError(f"the pods' MLflow server kubernetes.tracking_uri "
                             f"{redact(pods_uri)} is not where this run is recorded "
                             f"({redact(store.uri)}); run the driver in the cluster "
                             f"(--driver-job) or set tracking.uri to it")
        opened = open_run(store, run_id)
    except Exception as error:  # the run goes on without them
        print(f"mptfx k8s submit: system metrics: not logged: {one_line(error, redact=True)}",
              file=out, flush=True)
        return None, {}
    env = trainer_environment(store, opened, config.tracking.system_metrics_interval_seconds)
    del env[ENV_TRACKING_URI]  # every pod has it already (manifests.pod_env), with its login
    return PreparedRun.opened(store, opened), env


def record_run(
    config: Config, ir: Any, report: Any, log_dir: Path, workspace_root: Path, out: TextIO,
    trigger: dict[str, Any] | None = None, opened: Any = None,
) -> RunSummary | None:
    """Builds the run's summary from ML Metadata and records it in MLflow.

    Args:
        config: the run's PipelineConfig.
        ir: the compiled pipeline (names the ML Metadata database; the password comes
            from MPTFX_MLMD_PASSWORD, as in the pods).
        report: the driver's RunReport (node states and seconds).
        log_dir: the driver's log folder; summary.json is written there.
        workspace_root: where the default tracking store lives: `kubernetes.workspace` for
            a driver in the cluster, the local workspace for one outside it.
        out: where the one-line messages go.
        trigger: why the run was started (summary.json's `trigger`), e.g. by drift.
        opened: the MLflow run `open_run_for_pods` opened (recorded into), or None.

    Returns:
        the run's summary (with an `mlflow` section when it was recorded), or None when
        ML Metadata could not be read.
    """
    from components import tracking
    from components.core.text import one_line
    from pipelines.metadata_summary import build_summary, collect_outputs
    from pipelines.node_entrypoint import connection_config, describe_database

    connection = connection_config(ir)
    try:
        nodes = collect_outputs(connection, config.pipeline.name, report.run_id)
    except Exception as error:  # the run itself is over: report, do not fail it
        print(f"mptfx: warning: run {report.run_id} not tracked: ML Metadata at "
              f"{describe_database(connection)} could not be read: {one_line(error)}",
              file=out, flush=True)
        return None
    timings = {node_id: status.seconds for node_id, status in report.nodes.items()}
    log_dir.mkdir(parents=True, exist_ok=True)
    base = {
        "status": "completed" if report.succeeded else "failed",
        "run_id": report.run_id,
        "pipeline": config.pipeline.name,
        "orchestrator": ORCHESTRATOR,
        "workspace": config.kubernetes.workspace,
        "summary_path": str(log_dir / SUMMARY_FILE),
        "log_path": str(log_dir / "driver.log"),
        "config": config.model_dump(),
        "wall_seconds": round(sum(s or 0.0 for s in timings.values()), 2),
    }
    if trigger:
        base["trigger"] = trigger
    if not report.succeeded:
        failed = report.failed_nodes
        base["failed_component"] = failed[0] if failed else None
        base["error"] = (f"{failed[0]} failed: {report.nodes[failed[0]].message}"
                         if failed else "the run did not finish")
    summary = build_summary(nodes, timings, base, model_name=config.model.name)
    summary.write()
    try:
        store = tracking.resolve_store(config.tracking, config.run_names, workspace_root, out)
    except Exception as error:  # tracking.required with the server down: say so, keep going
        print(f"mptfx: warning: run {report.run_id} not tracked: {one_line(error)}",
              file=out, flush=True)
        return summary
    tracking.log_run(store, summary, out, opened)
    return summary

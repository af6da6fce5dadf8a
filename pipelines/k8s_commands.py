"""`mptfx k8s`: run the pipeline on a Kubernetes cluster.

    mptfx k8s compile [--out DIR] [--engine jobs|kfp [--pipeline-root gs://...]]   as YAML
    mptfx k8s submit [--driver-job | --in-cluster] [--resume RUN] [--follow-logs]
    mptfx k8s status RUN
    mptfx k8s logs RUN NODE

`submit` drives the run from here (kubeconfig; the workspace PVC path must be reachable here,
as it is inside the cluster) or, with `--driver-job`, creates the in-cluster driver Job and
returns; every `submit` flag reaches that driver (--config and --set as the run's ConfigMap,
--data, --log-dir and --follow-logs on its command line). A run holds the cluster run lock
(a PostgreSQL advisory lock in `kubernetes.metadata`, shared with `mptfx retrain --runner
kubernetes`). Exit codes: 0 the run succeeded, 1 a node failed, 2 usage, configuration, an
API error (403, 404, 409, quota: one line each) or the pipeline already running on the
cluster, 130 interrupted (the Jobs keep running; resume with `--resume RUN`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from components.core.text import one_line
from components.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPELINE_FAILED,
    UsageError,
)
from pipelines.config import Config


def make_clients(in_cluster: bool = False, context: str | None = None) -> tuple[Any, Any, Any]:
    """BatchV1Api, CoreV1Api and CustomObjectsApi from the in-cluster or kubeconfig credentials."""
    from kubernetes import client
    from kubernetes import config as kube_config

    try:
        if in_cluster:
            kube_config.load_incluster_config()
        else:
            kube_config.load_kube_config(context=context)
    except (kube_config.ConfigException, OSError, TypeError) as error:
        where = "the in-cluster ServiceAccount" if in_cluster else "kubeconfig (~/.kube/config " \
            "or $KUBECONFIG)"
        raise UsageError(f"cannot load Kubernetes credentials from {where}: "
                         f"{one_line(error)}") from None
    return client.BatchV1Api(), client.CoreV1Api(), client.CustomObjectsApi()


def load_cluster_config(args: argparse.Namespace, check_model: bool = False) -> Any:
    """The config of `--config` / `--set`, checked for what the cluster runner needs; with
    `check_model`, a user's model file too (commands that start a run)."""
    from pipelines.config import ConfigError, load_config

    try:
        config = load_config(args.config, args.set or [], data=getattr(args, "data", None))
    except ConfigError as error:
        raise UsageError(str(error)) from None
    trainer, workers = config.trainer, config.kubernetes.trainer.workers
    if workers > 1 and trainer.strategy not in ("auto", "multi_worker"):
        raise UsageError(f"kubernetes.trainer.workers={workers} needs trainer.strategy auto or "
                         f"multi_worker. Received: trainer.strategy={trainer.strategy}")
    if not check_model:
        return config
    from pipelines.api import check_model_file

    # A user's model file is imported and built here, before any object reaches the cluster:
    # a refusal costs seconds here instead of a pod start and an Ingest there.
    check_model_file(config, sys.stdout)
    return config


def compile_for_kubernetes(config: Config, run_id: str, data_arg: str | None,
                           allow_missing_data: bool = False, data: Any = None,
                           schema_file: str = "") -> tuple[Any, Any, str]:
    """Build and compile the pipeline as the pods see it (workspace = kubernetes.workspace).

    Returns (tfx pipeline, IR pointed at the cluster's database, a note). With
    `allow_missing_data`, data that is not reachable here (it lives on the cluster's volume)
    is stood in for by a selection nobody listed: the objects are the same, only the
    Ingest's data selection is not the real one. `data` (a DataSelection already resolved,
    e.g. by `mptfx retrain`) replaces `data_arg`; `schema_file` is the schema to validate
    against.
    """
    from components.ingest.selection import DataSelection
    from pipelines.data_source import resolve_data
    from pipelines.kubernetes.ir import prepare_ir
    from pipelines.local_runner import compile_pipeline
    from pipelines.pipeline import create_pipeline
    from pipelines.workspace import Workspace

    workspace = Workspace(Path(config.kubernetes.workspace))
    note = ""
    try:
        data = data or resolve_data(config, workspace, data_arg)
    except (UsageError, OSError) as error:
        if not allow_missing_data:
            raise UsageError(f"{error} (data.source must be reachable where the driver runs; "
                             "in the cluster use mptfx k8s submit --driver-job)") from None
        data = DataSelection(root=data_arg or config.data.source)
        note = (f"data {data_arg or config.data.source} is not reachable here ({error}); "
                "the driver lists the data for the Ingest at submit time")
    from models.user_module import UserModelError

    try:
        pipeline = create_pipeline(config, workspace, data, schema_file=schema_file)
    except UserModelError as error:  # the model file cannot be staged into the pipeline root
        raise UsageError(str(error)) from None
    ir = compile_pipeline(pipeline, run_id)
    prepare_ir(ir, config)
    return pipeline, ir, note


def _write_objects(objects: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    import yaml

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for index, body in enumerate(objects):
        name = f"{index:02d}-{body['kind'].lower()}-{body['metadata']['name']}.yaml"
        path = out_dir / name
        path.write_text(yaml.safe_dump(body, sort_keys=False))
        written.append(path)
    return written


def _command_compile(args: argparse.Namespace) -> int:
    from pipelines.console import library_output_to, quiet_tensorflow
    from pipelines.workspace import new_run_id

    quiet_tensorflow()
    config = load_cluster_config(args, check_model=True)
    if args.pipeline_root is not None:
        from pipelines.kfp_export import check_pipeline_root

        if args.engine != "kfp":
            raise UsageError("--pipeline-root is for --engine kfp; the Jobs engine writes to "
                             "kubernetes.workspace's volume")
        try:
            check_pipeline_root(args.pipeline_root)
        except ValueError as error:
            raise UsageError(f"--pipeline-root: {error}") from None
    run_id = args.run_id or new_run_id()
    out_dir = Path(args.out or f"k8s-out/{run_id}")
    # The libraries' chatter goes to compile.log; our lines to the terminal.
    with library_output_to(out_dir / "compile.log", console_fd=1) as out:
        pipeline, ir, note = compile_for_kubernetes(config, run_id, args.data,
                                                    allow_missing_data=True)
        if args.engine == "kfp":
            from pipelines.kfp_export import export_kfp

            path = export_kfp(config, pipeline, out_dir, args.pipeline_root)
            print(f"mptfx k8s compile: KFP v2 pipeline {path} (Vertex AI PipelineJob) and "
                  f"{path.with_suffix('.yaml')} (PipelineSpec + PlatformSpec, for Kubeflow "
                  f"Pipelines)", file=out)
        else:
            _write_run_objects(config, run_id, ir, out_dir, out)
        if note:
            print(f"  note: {note}", file=out)
    return EXIT_OK


def _write_run_objects(config: Config, run_id: str, ir: Any, out_dir: Path, out: Any) -> None:
    import yaml
    from google.protobuf import json_format

    from pipelines.kubernetes.ir import ir_uri, plan_nodes
    from pipelines.kubernetes.manifests import run_objects

    root = ir.runtime_spec.pipeline_root.field_value.string_value
    plan = plan_nodes(ir, config)
    config_yaml = yaml.safe_dump(config.model_dump(), sort_keys=False)
    objects = run_objects(config, run_id, plan, ir_uri(root, run_id), config_yaml)
    written = _write_objects(objects, out_dir)
    (out_dir / "pipeline.json").write_text(json_format.MessageToJson(ir, sort_keys=True))
    print(f"mptfx k8s compile {run_id}: {len(written)} objects for {len(plan)} nodes "
          f"in {out_dir}/ (+ pipeline.json, stored at {ir_uri(root, run_id)} on submit)",
          file=out)


def _command_submit(args: argparse.Namespace) -> int:
    from pipelines.console import quiet_tensorflow
    from pipelines.locking import cluster_run_lock
    from pipelines.workspace import new_run_id

    quiet_tensorflow()
    config = load_cluster_config(args, check_model=not args.resume)
    run_id = args.resume or args.run_id or new_run_id()
    if args.driver_job:
        from pipelines.kubernetes.driver_job import create_driver_job, driver_arguments

        forwarded = driver_arguments(args)  # refuses what the pod cannot use, before any call
        return create_driver_job(config, run_id, forwarded, bool(args.resume),
                                 make_clients(args.in_cluster, args.context))
    clients = make_clients(args.in_cluster, args.context)
    # One run of the pipeline at a time on the cluster, whoever starts it (mptfx retrain
    # --runner kubernetes holds the same lock): runs share the pipeline root and champion.
    with cluster_run_lock(config) as lock:
        if not lock.acquired:
            raise UsageError(f"pipeline {config.pipeline.name} is already running on the "
                             f"cluster ({lock.describe_holder()}); run {run_id} not started")
        return drive_run(config, run_id, clients, in_cluster=args.in_cluster,
                         resume=bool(args.resume), data_arg=args.data, log_dir=args.log_dir,
                         follow_logs=args.follow_logs)


def drive_run(config: Config, run_id: str, clients: tuple[Any, Any, Any], *, in_cluster: bool,
              resume: bool = False, data_arg: str | None = None, data: Any = None,
              schema_file: str = "", log_dir: str | None = None, follow_logs: bool = False,
              after_run: Any = None, trigger: dict[str, Any] | None = None) -> int:
    """Compile (or, resuming, reload) the run's IR, run its nodes as Jobs, record it in MLflow.

    The caller holds the cluster run lock. `data` (a DataSelection) and `schema_file` come
    from `mptfx retrain`; `after_run(summary)` runs once the run succeeded and was recorded;
    `trigger` (from `mptfx monitor --retrain-on-drift`) is recorded as summary.json's.
    Returns the exit code.
    """
    from pipelines.console import library_output_to
    from pipelines.k8s_tracking import open_run_for_pods, record_run
    from pipelines.kubernetes.driver import KubernetesRunner
    from pipelines.kubernetes.ir import ir_uri, plan_nodes, store_ir

    namespace = config.kubernetes.namespace
    workspace_root = Path(config.kubernetes.workspace if in_cluster else "workspace")
    logs = Path(log_dir or workspace_root / "runs" / run_id)
    with library_output_to(logs / "driver.log", console_fd=1) as out:
        if resume:
            from pipelines.node_entrypoint import load_ir
            from pipelines.workspace import Workspace

            root = str(Workspace(Path(config.kubernetes.workspace))
                       .pipeline_root(config.pipeline.name))
            location = ir_uri(root, run_id)
            ir = load_ir(location)
            print(f"mptfx k8s submit: resuming run {run_id} ({location})", file=out)
        else:
            _, ir, _ = compile_for_kubernetes(config, run_id, data_arg, data=data,
                                              schema_file=schema_file)
            root = ir.runtime_spec.pipeline_root.field_value.string_value
            location = ir_uri(root, run_id)
            store_ir(ir, location)
            print(f"mptfx k8s submit {run_id}: {len(ir.nodes)} nodes, namespace {namespace}, "
                  f"IR {location}, logs {logs}", file=out)
        opened, trainer_env = open_run_for_pods(config, workspace_root, run_id, out)
        runner = KubernetesRunner(config, *clients, out=out, log_dir=logs / "pods",
                                  follow_logs=follow_logs, trainer_env=trainer_env)
        try:
            report = runner.run(run_id, plan_nodes(ir, config), location)
        except KeyboardInterrupt:
            print(f"mptfx k8s submit: driver stopped; the Jobs keep running. Resume with: "
                  f"mptfx k8s submit --resume {run_id}", file=out)
            return EXIT_INTERRUPTED
        _print_report(report, out)
        summary = record_run(config, ir, report, logs, workspace_root, out, trigger=trigger,
                             opened=opened)
        if after_run is not None and report.succeeded and summary:
            after_run(summary)
    if report.succeeded and summary is not None and summary.status == "failed":
        # Every node succeeded, but the InfraValidator refused the candidate: not pushed.
        print(f"mptfx: error: run {run_id}: {summary.error} (logs: {logs})", file=sys.stderr)
        return EXIT_PIPELINE_FAILED
    if not report.succeeded:
        failed = report.failed_nodes
        print(f"mptfx: error: run {run_id} failed at {', '.join(failed) or 'a node'}: "
              f"{report.nodes[failed[0]].message if failed else ''} (logs: {logs})",
              file=sys.stderr)
        return EXIT_PIPELINE_FAILED
    return EXIT_OK


def _print_report(report: Any, out: Any) -> None:
    print("", file=out)
    width = max(len(n) for n in report.nodes)
    for status in report.nodes.values():
        seconds = "-" if status.seconds is None else f"{status.seconds:.1f}"
        print(f"  {status.node_id:<{width}}  {status.state:<10} {seconds:>8}  "
              f"{status.job or ''}", file=out)
    print(f"\n  run {report.run_id}: {'succeeded' if report.succeeded else 'FAILED'}", file=out)


def _command_status(args: argparse.Namespace) -> int:
    from pipelines.kubernetes.status import run_status

    config = load_cluster_config(args)
    namespace = args.namespace or config.kubernetes.namespace
    batch, _, custom = make_clients(args.in_cluster, args.context)
    rows = run_status(batch, namespace, args.run_id, _tfjob_api(config, custom))
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return EXIT_OK
    width = max(len(row["node"]) for row in rows)
    for row in rows:
        seconds = "-" if row["seconds"] is None else f"{row['seconds']:.1f}"
        retries = f"{row['retries']} retries" if row["retries"] else ""
        print(f"  {row['node']:<{width}}  {row['state']:<11} {seconds:>8}  {row['job']}  "
              f"{retries}")
    return EXIT_OK


def _command_logs(args: argparse.Namespace) -> int:
    from pipelines.kubernetes.status import node_logs

    config = load_cluster_config(args)
    namespace = args.namespace or config.kubernetes.namespace
    batch, core, custom = make_clients(args.in_cluster, args.context)
    for pod, text in node_logs(batch, core, namespace, args.run_id, args.node,
                               _tfjob_api(config, custom)):
        for line in (text or "").splitlines():
            print(f"[{pod}] {line}")
    return EXIT_OK


def _tfjob_api(config: Config, custom: Any) -> Any:
    """CustomObjectsApi when the run's Trainer is a TFJob (listing TFJobs needs the CRD)."""
    trainer = config.kubernetes.trainer
    return custom if trainer.use_tfjob and trainer.workers > 1 else None


def _add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML config (default: configs/local.yaml when present)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="override one config key, e.g. --set kubernetes.trainer.workers=2")


def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument("--in-cluster", action="store_true",
                        help="use the pod's ServiceAccount instead of kubeconfig")


def register(commands: Any) -> None:
    """Add `mptfx k8s compile|submit|status|logs` to the CLI."""
    k8s = commands.add_parser("k8s", help="run the pipeline on Kubernetes (Jobs per component)")
    sub = k8s.add_subparsers(dest="k8s_command", required=True, metavar="K8S_COMMAND")

    compile_ = sub.add_parser("compile", help="write every object a run creates as YAML")
    _add_config_arguments(compile_)
    compile_.add_argument("--out", help="output folder (default k8s-out/<run id>)")
    compile_.add_argument("--engine", choices=["jobs", "kfp"], default="jobs",
                          help="jobs: Kubernetes objects (default); kfp: KFP v2 pipeline spec")
    compile_.add_argument("--run-id", help="run id to compile for (default: a new one)")
    compile_.add_argument("--pipeline-root", metavar="URI",
                          help="--engine kfp: where the steps write their outputs, a gs:// or "
                          "s3:// URI (default: the workspace volume's pipeline root)")
    compile_.add_argument("--data", help="data folder as the pods see it (default data.source)")
    compile_.set_defaults(handler=_command_compile)

    submit = sub.add_parser("submit", help="run the pipeline as Kubernetes Jobs")
    _add_config_arguments(submit)
    _add_cluster_arguments(submit)
    submit.add_argument("--run-id", help="run id (default: a new one)")
    submit.add_argument("--resume", metavar="RUN", help="resume run RUN: finished nodes stay")
    submit.add_argument("--driver-job", action="store_true",
                        help="create the in-cluster driver Job and return")
    submit.add_argument("--data", help="data folder as the pods see it (default data.source)")
    submit.add_argument("--follow-logs", action="store_true",
                        help="echo every pod's log here, prefixed with its node")
    submit.add_argument("--log-dir", help="where the driver log and pod logs go "
                        "(default workspace/runs/<run id>)")
    submit.set_defaults(handler=_command_submit)

    status = sub.add_parser("status", help="per-node state and duration of a run")
    status.add_argument("run_id", metavar="RUN")
    _add_config_arguments(status)
    _add_cluster_arguments(status)
    status.add_argument("--namespace", help="default: kubernetes.namespace")
    status.add_argument("--json", action="store_true", help="print the rows as JSON")
    status.set_defaults(handler=_command_status)

    logs = sub.add_parser("logs", help="the logs of one node's pods")
    logs.add_argument("run_id", metavar="RUN")
    logs.add_argument("node", metavar="NODE")
    _add_config_arguments(logs)
    _add_cluster_arguments(logs)
    logs.add_argument("--namespace", help="default: kubernetes.namespace")
    logs.set_defaults(handler=_command_logs)

"""`mptfx k8s`: run the pipeline on a Kubernetes cluster.

    mptfx k8s compile [--out DIR] [--engine jobs|kfp]   every object a run creates, as YAML
    mptfx k8s submit [--driver-job | --in-cluster] [--resume RUN] [--follow-logs]
    mptfx k8s status RUN
    mptfx k8s logs RUN NODE

`submit` drives the run from here (kubeconfig; the workspace PVC path must be reachable here,
as it is inside the cluster) or, with `--driver-job`, creates the in-cluster driver Job and
returns. Exit codes: 0 the run succeeded, 1 a node failed, 2 usage, configuration or an API
error (403, 404, 409, quota: one line each), 130 interrupted (the Jobs keep running; resume
with `--resume RUN`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from pipelines.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPELINE_FAILED,
    UsageError,
)


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
                         f"{str(error).splitlines()[0] if str(error) else type(error).__name__}"
                         ) from None
    return client.BatchV1Api(), client.CoreV1Api(), client.CustomObjectsApi()


def _load_config(args: argparse.Namespace) -> Any:
    from pipelines.config import ConfigError, load_config

    try:
        config = load_config(args.config, args.set or [])
    except ConfigError as error:
        raise UsageError(str(error)) from None
    trainer, workers = config.trainer, config.kubernetes.trainer.workers
    if workers > 1 and trainer.strategy not in ("auto", "multi_worker"):
        raise UsageError(f"kubernetes.trainer.workers={workers} needs trainer.strategy auto or "
                         f"multi_worker. Received: trainer.strategy={trainer.strategy}")
    return config


def compile_for_kubernetes(config: Any, run_id: str, data_arg: str | None,
                           allow_missing_data: bool = False) -> tuple[Any, Any, str]:
    """Build and compile the pipeline as the pods see it (workspace = kubernetes.workspace).

    Returns (tfx pipeline, IR pointed at the cluster's database, a note). With
    `allow_missing_data`, data that is not reachable here (it lives on the cluster's volume)
    is stood in for by an empty folder: the objects are the same, only the Ingest's input
    fingerprint is not the real one.
    """
    from pipelines.cli import _resolve_data
    from pipelines.kubernetes.ir import prepare_ir
    from pipelines.local_runner import compile_pipeline
    from pipelines.pipeline import create_pipeline
    from pipelines.spans import DataSelection
    from pipelines.workspace import Workspace

    workspace = Workspace(Path(config.kubernetes.workspace))
    note = ""
    try:
        data = _resolve_data(config, workspace, data_arg)
    except (UsageError, OSError) as error:
        if not allow_missing_data:
            raise UsageError(f"{error} (data.source must be reachable where the driver runs; "
                             "in the cluster use mptfx k8s submit --driver-job)") from None
        stand_in = tempfile.mkdtemp(prefix="mptfx-data-stand-in-")
        data = DataSelection(root=stand_in)
        note = (f"data {data_arg or config.data.source} is not reachable here ({error}); "
                "the driver computes the real Ingest fingerprint at submit time")
    pipeline = create_pipeline(config, workspace, data)
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
    from pipelines.cli import _library_output_to, _new_run_id, _quiet_tensorflow

    _quiet_tensorflow()
    config = _load_config(args)
    run_id = args.run_id or _new_run_id()
    out_dir = Path(args.out or f"k8s-out/{run_id}")
    # The libraries' chatter goes to compile.log; our lines to the terminal.
    with _library_output_to(out_dir / "compile.log", console_fd=1) as out:
        pipeline, ir, note = compile_for_kubernetes(config, run_id, args.data,
                                                    allow_missing_data=True)
        if args.engine == "kfp":
            from pipelines.kfp_export import export_kfp

            path = export_kfp(config, pipeline, out_dir)
            print(f"mptfx k8s compile: KFP v2 pipeline spec {path}", file=out)
        else:
            _write_run_objects(config, run_id, ir, out_dir, out)
        if note:
            print(f"  note: {note}", file=out)
    return EXIT_OK


def _write_run_objects(config: Any, run_id: str, ir: Any, out_dir: Path, out: Any) -> None:
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
    from pipelines.cli import _library_output_to, _new_run_id, _quiet_tensorflow
    from pipelines.kubernetes.driver import KubernetesRunner
    from pipelines.kubernetes.ir import ir_uri, plan_nodes, store_ir
    from pipelines.kubernetes.manifests import config_map, driver_job

    _quiet_tensorflow()
    config = _load_config(args)
    run_id = args.resume or args.run_id or _new_run_id()
    batch, core, custom = make_clients(args.in_cluster, args.context)
    namespace = config.kubernetes.namespace
    if args.driver_job:
        import yaml

        runner = KubernetesRunner(config, batch, core, custom)
        runner.create_object(config_map(config, run_id,
                                         yaml.safe_dump(config.model_dump(), sort_keys=False)))
        job = driver_job(config, run_id)
        runner.create_object(job)
        print(f"mptfx k8s submit {run_id}: driver Job {job['metadata']['name']} created in "
              f"namespace {namespace}; watch it with: mptfx k8s status {run_id}")
        return EXIT_OK

    workspace_root = Path(config.kubernetes.workspace if args.in_cluster else "workspace")
    log_dir = Path(args.log_dir or workspace_root / "runs" / run_id)
    with _library_output_to(log_dir / "driver.log", console_fd=1) as out:
        if args.resume:
            from pipelines.node_entrypoint import load_ir
            from pipelines.workspace import Workspace

            root = str(Workspace(Path(config.kubernetes.workspace))
                       .pipeline_root(config.pipeline.name))
            location = ir_uri(root, run_id)
            ir = load_ir(location)
            print(f"mptfx k8s submit: resuming run {run_id} ({location})", file=out)
        else:
            _, ir, _ = compile_for_kubernetes(config, run_id, args.data)
            root = ir.runtime_spec.pipeline_root.field_value.string_value
            location = ir_uri(root, run_id)
            store_ir(ir, location)
            print(f"mptfx k8s submit {run_id}: {len(ir.nodes)} nodes, namespace {namespace}, "
                  f"IR {location}, logs {log_dir}", file=out)
        plan = plan_nodes(ir, config)
        runner = KubernetesRunner(config, batch, core, custom, out=out,
                                  log_dir=log_dir / "pods", follow_logs=args.follow_logs)
        try:
            report = runner.run(run_id, plan, location)
        except KeyboardInterrupt:
            print(f"mptfx k8s submit: driver stopped; the Jobs keep running. Resume with: "
                  f"mptfx k8s submit --resume {run_id}", file=out)
            return EXIT_INTERRUPTED
        _print_report(report, out)
        from pipelines.k8s_tracking import record_run

        record_run(config, ir, report, log_dir, workspace_root, out)
    if not report.succeeded:
        failed = report.failed_nodes
        print(f"mptfx: error: run {run_id} failed at {', '.join(failed) or 'a node'}: "
              f"{report.nodes[failed[0]].message if failed else ''} (logs: {log_dir})",
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

    config = _load_config(args)
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

    config = _load_config(args)
    namespace = args.namespace or config.kubernetes.namespace
    batch, core, custom = make_clients(args.in_cluster, args.context)
    for pod, text in node_logs(batch, core, namespace, args.run_id, args.node,
                               _tfjob_api(config, custom)):
        for line in (text or "").splitlines():
            print(f"[{pod}] {line}")
    return EXIT_OK


def _tfjob_api(config: Any, custom: Any) -> Any:
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

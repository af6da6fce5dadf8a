"""Run one node of a compiled mptfx pipeline: what every pipeline pod executes.

    python -m pipelines.node_entrypoint --ir /mnt/mptfx/tfx/mptfx-digits/_mptfx/RUN/pipeline.json \\
        --node Trainer

The node runs with TFX's own launcher (driver, executor, publisher; `local_runner.launch_node`)
against the ML Metadata database named in the IR, which the Kubernetes runner points at the
shared PostgreSQL or MySQL server; the password comes from the `MPTFX_MLMD_PASSWORD`
environment variable (a Secret in the cluster), never from the IR. A node that already
succeeded in this pipeline run is not run again, and one whose inputs and parameters match
an earlier successful execution is published from TFX's cache.

Multi-worker Trainer: with `--worker-hosts h0:port,h1:port,...` (the Indexed Job's pods, named
through its headless Service) the task index is `JOB_COMPLETION_INDEX` and TF_CONFIG is built
from both; under a Kubeflow TFJob, TF_CONFIG is already set by the Training Operator. The
chief (worker 0) runs the launcher and alone publishes to ML Metadata; every other worker
joins the chief's execution: it reads the chief's input artifacts from ML Metadata, runs the
same executor with scratch outputs, and stops when the chief's execution ends.

Exit codes (components/errors.py): 0 the node succeeded (or was already done), 1 it failed,
2 the IR, the node id, the database or the worker setup is wrong (one line names it).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from components.core.text import one_line
from components.errors import EXIT_OK, EXIT_PIPELINE_FAILED, EXIT_USAGE, UsageError
from components.pod_env import (
    PASSWORD_ENV,
    TFConfigError,
    build_tf_config,
    is_chief,
    read_tf_config,
)
from pipelines.config import Config

# Tests only: "host:port=127.0.0.1:port,..." maps the Service DNS names of the Indexed Job's
# pods to local processes, so two processes on one machine can stand in for two pods.
WORKER_ADDRESS_MAP_ENV = "MPTFX_WORKER_ADDRESS_MAP"
FOLLOW_POLL_SECONDS = 2.0
CONNECT_ATTEMPTS = 4
CONNECT_RETRY_SECONDS = 1.0

_log = logging.getLogger("mptfx.node")


def _say(message: str) -> None:
    """One line for the person reading the pod's log."""
    print(f"mptfx node: {message}", flush=True)


def load_ir(uri: str) -> Any:
    """Read the compiled pipeline (JSON `tfx.orchestration.Pipeline`) from a path, gs:// or s3://.

    A local path (the workspace volume) is read without TensorFlow's file system layer, so
    a node that has nothing to do finishes in a second instead of importing TensorFlow.
    """
    from google.protobuf import json_format
    from ml_metadata.proto import metadata_store_pb2  # noqa: F401 - Any types in the IR
    from tfx.proto.orchestration import (  # noqa: F401 - Any types in the IR
        executable_spec_pb2,
        pipeline_pb2,
        platform_config_pb2,
    )

    try:
        if "://" in uri:
            from tfx.dsl.io import fileio

            with fileio.open(uri, "r") as handle:
                text = handle.read()
        else:
            text = Path(uri).read_text()
    except Exception as error:  # fileio raises NotFoundError, OSError, ... per filesystem
        raise UsageError(f"cannot read the pipeline IR {uri}: {one_line(error)}") from None
    try:
        return json_format.Parse(text, pipeline_pb2.Pipeline())
    except json_format.ParseError as error:
        raise UsageError(f"{uri} is not a compiled mptfx pipeline: {error}") from None


def _deployment(ir: Any) -> Any:
    from tfx.proto.orchestration import pipeline_pb2

    deployment = pipeline_pb2.IntermediateDeploymentConfig()
    if not ir.deployment_config.Unpack(deployment):
        raise UsageError("the pipeline IR has no IntermediateDeploymentConfig")
    return deployment


def connection_config(ir: Any) -> Any:
    """The IR's ML Metadata connection, with the password filled in from the environment."""
    from ml_metadata.proto import metadata_store_pb2

    config = metadata_store_pb2.ConnectionConfig()
    if not _deployment(ir).metadata_connection_config.Unpack(config):
        raise UsageError("the pipeline IR names no ML Metadata database")
    password = os.environ.get(PASSWORD_ENV, "")
    kind = config.WhichOneof("config")
    if kind == "postgresql" and not config.postgresql.password:
        config.postgresql.password = password
    elif kind == "mysql" and not config.mysql.password:
        config.mysql.password = password
    return config


def set_connection_config(ir: Any, config: Config) -> None:
    """Point every node of `ir` at the ML Metadata database `config` (no password stored)."""
    deployment = _deployment(ir)
    deployment.metadata_connection_config.Pack(config)
    ir.deployment_config.Pack(deployment)


def describe_database(config: Config) -> str:
    """`postgresql://user@host:port/db` (never the password), for messages."""
    kind = config.WhichOneof("config")
    if kind == "postgresql":
        pg = config.postgresql
        return f"postgresql://{pg.user}@{pg.host or pg.hostaddr}:{pg.port}/{pg.dbname}"
    if kind == "mysql":
        my = config.mysql
        return f"mysql://{my.user}@{my.host}:{my.port}/{my.database}"
    if kind == "sqlite":
        return f"sqlite:{config.sqlite.filename_uri}"
    return str(kind)


def _node(ir: Any, node_id: str) -> Any:
    for node in ir.nodes:
        if node.pipeline_node.node_info.id == node_id:
            return node.pipeline_node
    known = ", ".join(n.pipeline_node.node_info.id for n in ir.nodes)
    raise UsageError(f"node {node_id!r} is not in pipeline {ir.pipeline_info.id} ({known})")


def _open_store(config: Config, attempts: int = CONNECT_ATTEMPTS) -> Any:
    """Connect to ML Metadata, retrying briefly: pods of one run start together, and MLMD
    creates its database and tables on first contact, which two pods may race for."""
    from ml_metadata.metadata_store import metadata_store

    for attempt in range(1, attempts + 1):
        try:
            return metadata_store.MetadataStore(config)
        except Exception as error:  # MLMD raises its own errors (UnavailableError, ...)
            if attempt == attempts:
                raise UsageError(f"cannot connect to ML Metadata at "
                                 f"{describe_database(config)}: {one_line(error)}") from None
            time.sleep(CONNECT_RETRY_SECONDS * attempt)
    raise AssertionError("unreachable")


def _run_executions(store: Any, node: Any) -> list:
    """Executions of `node` in this pipeline run (its pipeline, run and node contexts)."""
    context_ids = []
    for spec in node.contexts.contexts:
        context = store.get_context_by_type_and_name(
            spec.type.name, spec.name.field_value.string_value
        )
        if context is None:
            return []
        context_ids.append(context.id)
    executions = None
    for context_id in context_ids:
        found = {e.id: e for e in store.get_executions_by_context(context_id)}
        executions = found if executions is None else {
            k: v for k, v in executions.items() if k in found
        }
    return sorted((executions or {}).values(), key=lambda e: e.id)


def _state_name(execution: Any) -> str:
    from ml_metadata.proto import metadata_store_pb2

    return metadata_store_pb2.Execution.State.Name(execution.last_known_state).lower()


def _succeeded(execution: Any) -> bool:
    from ml_metadata.proto import metadata_store_pb2

    return execution.last_known_state in (
        metadata_store_pb2.Execution.COMPLETE, metadata_store_pb2.Execution.CACHED
    )


# ---------------------------------------------------------------------------------------------
# Multi-worker: TF_CONFIG from the Indexed Job's environment


def _worker_tf_config(worker_hosts: list[str], index: int) -> dict[str, Any]:
    """TF_CONFIG for worker `index`, with the test-only address map applied."""
    address_map = _address_map(os.environ.get(WORKER_ADDRESS_MAP_ENV, ""))
    return build_tf_config([address_map.get(host, host) for host in worker_hosts], index)


def _address_map(text: str) -> dict[str, str]:
    mapping = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        name, sep, address = pair.partition("=")
        if not sep:
            raise UsageError(f"{WORKER_ADDRESS_MAP_ENV} expects host:port=address pairs. "
                             f"Received: {pair!r}")
        mapping[name] = address
    return mapping


def _completion_index() -> int:
    raw = os.environ.get("JOB_COMPLETION_INDEX", "")
    if not raw.isdigit():
        raise UsageError("--worker-hosts needs JOB_COMPLETION_INDEX (set by an Indexed Job). "
                         f"Received: {raw!r}")
    return int(raw)


def _follow_chief(ir: Any, node: Any, config: Config, timeout: float) -> int:
    """A non-chief worker: run the executor of the chief's execution with scratch outputs."""
    from tfx.orchestration import data_types_utils, metadata
    from tfx.orchestration.local import runner_utils
    from tfx.orchestration.portable import (
        data_types,
        inputs_utils,
        outputs_utils,
        python_executor_operator,
    )
    from tfx.orchestration.portable.mlmd import execution_lib
    from tfx.utils import path_utils

    node_id = node.node_info.id
    store = _open_store(config)
    execution = _wait_for_chief(store, node, timeout)
    if execution is None:
        return EXIT_OK
    _say(f"{node_id}: joining the chief's execution {execution.id}")
    with metadata.Metadata(config) as handle:
        input_dict = execution_lib.get_input_artifacts(handle, execution.id)
    exec_properties = data_types_utils.build_parsed_value_dict(
        inputs_utils.resolve_parameters_with_schema(node_parameters=node.parameters)
    )
    scratch = tempfile.mkdtemp(prefix=f"mptfx-{node_id}-worker-")
    runtime_spec = type(ir.runtime_spec)()
    runtime_spec.CopyFrom(ir.runtime_spec)
    runtime_spec.pipeline_root.field_value.string_value = scratch
    outputs = outputs_utils.OutputsResolver(node, ir.pipeline_info, runtime_spec)
    output_dict = outputs.generate_output_artifacts(execution.id)
    outputs_utils.make_output_dirs(output_dict)
    # TFX's Trainer executor insists that the serving model exists after run_fn, also on
    # workers that leave the export to the chief; a worker's outputs are scratch anyway.
    for artifact in output_dict.get("model", []):
        os.makedirs(path_utils.serving_model_dir(artifact.uri), exist_ok=True)
    execution_info = data_types.ExecutionInfo(
        execution_id=execution.id,
        input_dict={key: list(value) for key, value in input_dict.items()},
        output_dict=output_dict,
        exec_properties=exec_properties,
        execution_output_uri=outputs.get_executor_output_uri(execution.id),
        stateful_working_dir=os.path.join(scratch, "stateful"),
        tmp_dir=outputs.make_tmp_dir(execution.id),
        pipeline_node=node,
        pipeline_info=ir.pipeline_info,
        pipeline_run_id=ir.runtime_spec.pipeline_run_id.field_value.string_value,
    )
    executor_spec = runner_utils.extract_executor_spec(
        runner_utils.extract_local_deployment_config(ir), node_id
    )
    _watch_chief(config, execution.id, node_id)
    result = python_executor_operator.PythonExecutorOperator(executor_spec).run_executor(
        execution_info
    )
    if result.execution_result.code:
        _say(f"{node_id}: worker failed: {result.execution_result.result_message}")
        return EXIT_PIPELINE_FAILED
    _say(f"{node_id}: worker done; the chief publishes execution {execution.id}")
    return EXIT_OK


def _wait_for_chief(store: Any, node: Any, timeout: float) -> Any:
    """The chief's active execution of `node` in this run; None when it already succeeded."""
    deadline = time.monotonic() + timeout
    while True:
        executions = _run_executions(store, node)
        latest = executions[-1] if executions else None
        if latest is not None and _succeeded(latest):
            _say(f"{node.node_info.id}: the chief's execution {latest.id} is already "
                 f"{_state_name(latest)}; nothing to do")
            return None
        if latest is not None and _state_name(latest) in ("new", "running"):
            return latest
        if time.monotonic() > deadline:
            raise UsageError(f"{node.node_info.id}: no running execution of the chief (worker 0) "
                             f"in ML Metadata after {timeout:.0f} s")
        time.sleep(FOLLOW_POLL_SECONDS)


def _watch_chief(config: Config, execution_id: int, node_id: str) -> None:
    """Exit this worker when the chief's execution ends: a worker never outlives its chief
    (it would wait for it in the next collective forever)."""

    def watch() -> None:
        store = _open_store(config)
        while True:
            time.sleep(FOLLOW_POLL_SECONDS)
            [execution] = store.get_executions_by_id([execution_id])
            state = _state_name(execution)
            if state in ("complete", "cached"):
                _say(f"{node_id}: the chief's execution {execution_id} is {state}; worker done")
                os._exit(EXIT_OK)
            if state in ("failed", "canceled"):
                _say(f"{node_id}: the chief's execution {execution_id} {state}; stopping")
                os._exit(EXIT_PIPELINE_FAILED)

    threading.Thread(target=watch, name="watch-chief", daemon=True).start()


def run_node(ir: Any, node_id: str, worker_hosts: list[str], chief_timeout: float) -> int:
    """Run `node_id` of `ir` once; returns the exit code."""
    node = _node(ir, node_id)
    config = connection_config(ir)
    run_id = ir.runtime_spec.pipeline_run_id.field_value.string_value
    try:
        if worker_hosts:
            os.environ["TF_CONFIG"] = json.dumps(
                _worker_tf_config(worker_hosts, _completion_index()))
        tf_config = read_tf_config()
    except TFConfigError as error:  # a Training Operator or hand-set TF_CONFIG: exit 2
        raise UsageError(str(error)) from None
    if not is_chief(tf_config):
        task = tf_config["task"]
        _say(f"{node_id}: {task['type']} {task['index']} of run {run_id}")
        return _follow_chief(ir, node, config, chief_timeout)

    done = [e for e in _run_executions(_open_store(config), node) if _succeeded(e)]
    if done:
        _say(f"{node_id} already succeeded in run {run_id} (execution {done[-1].id}, "
             f"{_state_name(done[-1])}); nothing to do")
        return EXIT_OK
    _say(f"{node_id}: starting (run {run_id}, metadata {describe_database(config)})")
    started = time.monotonic()
    from pipelines.local_runner import launch_node  # TensorFlow and TFX: only when needed

    local_ir = type(ir)()
    local_ir.CopyFrom(ir)
    set_connection_config(local_ir, config)  # now with the password, in memory only
    try:
        launch_node(local_ir, node_id)
    except Exception as error:
        _log.exception("node %s failed", node_id)
        _say(f"{node_id} failed after {time.monotonic() - started:.1f} s: {one_line(error)}")
        return EXIT_PIPELINE_FAILED
    executions = _run_executions(_open_store(config), node)
    state = _state_name(executions[-1]) if executions else "skipped"
    _say(f"{node_id} {state} in {time.monotonic() - started:.1f} s")
    return EXIT_OK if state in ("complete", "cached", "skipped") else EXIT_PIPELINE_FAILED


def build_parser() -> argparse.ArgumentParser:
    """Arguments of `python -m pipelines.node_entrypoint`."""
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.node_entrypoint",
        description="Run one node of a compiled mptfx pipeline (one Kubernetes Job's work).",
    )
    parser.add_argument("--ir", required=True, help="compiled pipeline JSON (path, gs://, s3://)")
    parser.add_argument("--node", required=True, help="node id, e.g. Trainer")
    parser.add_argument("--worker-hosts", default="",
                        help="multi-worker Trainer: host:port of every worker, worker 0 first; "
                        "the task index is JOB_COMPLETION_INDEX")
    parser.add_argument("--chief-timeout", type=float, default=900.0,
                        help="seconds a worker waits for the chief's execution (default 900)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of every pipeline pod; returns the process exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    hosts = [h.strip() for h in args.worker_hosts.split(",") if h.strip()]
    try:
        return run_node(load_ir(args.ir), args.node, hosts, args.chief_timeout)
    except UsageError as error:
        print(f"mptfx node: error: {error}", file=sys.stderr, flush=True)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())

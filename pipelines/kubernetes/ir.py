"""The plan of a run (which nodes, in which order, on which node pool) and its compiled IR,
pointed at the cluster's ML Metadata database and stored where every pod reads it."""

from __future__ import annotations

import dataclasses
from typing import Any

from components.core.text import one_line
from components.errors import UsageError
from pipelines.config import Config

TRAINER_NODE = "Trainer"
IR_DIR = "_mptfx"

@dataclasses.dataclass(frozen=True)
class NodePlan:
    """One TFX node as the runner schedules it."""

    node_id: str
    upstream: tuple[str, ...]
    pool: str

    @property
    def is_trainer(self) -> bool:
        return self.node_id == TRAINER_NODE


def plan_nodes(ir: Any, config: Config) -> list[NodePlan]:
    """The IR's nodes in topological order with their upstream nodes and node pool."""
    k8s = config.kubernetes
    plan = []
    for node in ir.nodes:
        info = node.pipeline_node
        node_id = info.node_info.id
        plan.append(NodePlan(
            node_id=node_id,
            upstream=tuple(info.upstream_nodes),
            pool=k8s.component_pools.get(node_id, k8s.default_pool),
        ))
    return plan


def prepare_ir(ir: Any, config: Config) -> None:
    """Point the IR at the cluster's ML Metadata database and Beam runner (in place)."""
    from ml_metadata.proto import metadata_store_pb2
    from tfx.proto.orchestration import executable_spec_pb2, pipeline_pb2

    from pipelines.node_entrypoint import set_connection_config

    database = config.kubernetes.metadata
    connection = metadata_store_pb2.ConnectionConfig()
    if database.engine == "postgresql":
        connection.postgresql.host = database.host
        connection.postgresql.port = str(database.port)
        connection.postgresql.dbname = database.database
        connection.postgresql.user = database.user
    else:
        connection.mysql.host = database.host
        connection.mysql.port = database.port
        connection.mysql.database = database.database
        connection.mysql.user = database.user
    set_connection_config(ir, connection)
    beam_args = config.kubernetes.beam_pipeline_args
    if beam_args:
        deployment = pipeline_pb2.IntermediateDeploymentConfig()
        ir.deployment_config.Unpack(deployment)
        for spec in deployment.executor_specs.values():
            beam = executable_spec_pb2.BeamExecutableSpec()
            if spec.Unpack(beam):
                del beam.beam_pipeline_args[:]
                beam.beam_pipeline_args.extend(beam_args)
                spec.Pack(beam)
        ir.deployment_config.Pack(deployment)


def ir_uri(pipeline_root: str, run_id: str) -> str:
    """Where a run's compiled pipeline is stored: inside the pipeline root, beside the outputs."""
    return f"{pipeline_root.rstrip('/')}/{IR_DIR}/{run_id}/pipeline.json"


def store_ir(ir: Any, uri: str) -> None:
    """Write the IR as JSON where every pod reads it (the workspace PVC, gs:// or s3://)."""
    from google.protobuf import json_format
    from tfx.dsl.io import fileio

    try:
        fileio.makedirs(uri.rsplit("/", 1)[0])
        with fileio.open(uri, "w") as handle:
            handle.write(json_format.MessageToJson(ir, sort_keys=True))
    except Exception as error:  # fileio raises per-filesystem errors
        raise UsageError(
            f"cannot write the pipeline IR to {uri}: {one_line(error)}; the workspace "
            "must be reachable where the driver runs (run it in the cluster: mptfx k8s submit "
            "--driver-job)"
        ) from None


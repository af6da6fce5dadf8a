"""Run the pipeline on this machine: TFX IR, TFX's own node launcher, sqlite ML Metadata.

This is LocalDagRunner's loop (compile to IR, then launch each node in topological order
with `tfx.orchestration.portable.launcher.Launcher`: driver, executor, publisher, MLMD
cache) with the two things a person watching the terminal needs: a callback as each
node starts and finishes with its duration, and the name of the node that failed.
LocalDagRunner only reports those through log records, which libraries such as the TF Lite
converter silence by resetting logger levels mid-run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tfx.dsl.compiler import compiler, constants
from tfx.orchestration import metadata
from tfx.orchestration.local import runner_utils
from tfx.orchestration.portable import launcher, runtime_parameter_utils
from tfx.proto.orchestration import pipeline_pb2

if TYPE_CHECKING:  # the public tfx.v1 API costs seconds to import in every node process
    from tfx import v1 as tfx


@dataclass
class ComponentTiming:
    """When one node started and how long it took (None while it runs)."""

    name: str
    started: float
    seconds: float | None = None


@dataclass
class RunProgress:
    """What the run did so far; `failed_component` is set when a node raised."""

    timings: dict[str, ComponentTiming] = field(default_factory=dict)
    failed_component: str | None = None


def compile_pipeline(pipeline: tfx.dsl.Pipeline, run_id: str) -> pipeline_pb2.Pipeline:
    """Compile to TFX IR with the pipeline run id fixed to `run_id` (our summary's key)."""
    ir = compiler.Compiler().compile(pipeline)
    runtime_parameter_utils.substitute_runtime_parameter(
        ir, {constants.PIPELINE_RUN_ID_PARAMETER_NAME: run_id}
    )
    return ir


def launch_node(ir: pipeline_pb2.Pipeline, node_id: str) -> None:
    """Run one node of a compiled pipeline with TFX's launcher against the IR's MLMD.

    A node whose inputs and parameters match a successful earlier execution is not run
    again: the launcher publishes the cached outputs instead.
    """
    deployment_config = runner_utils.extract_local_deployment_config(ir)
    connection_config = getattr(
        deployment_config.metadata_connection_config,
        deployment_config.metadata_connection_config.WhichOneof("connection_config"),
    )
    node = next(n.pipeline_node for n in ir.nodes if n.pipeline_node.node_info.id == node_id)
    launcher.Launcher(
        pipeline_node=node,
        mlmd_connection=metadata.Metadata(connection_config),
        pipeline_info=ir.pipeline_info,
        pipeline_runtime_spec=ir.runtime_spec,
        executor_spec=runner_utils.extract_executor_spec(deployment_config, node_id),
        custom_driver_spec=runner_utils.extract_custom_driver_spec(deployment_config, node_id),
    ).launch()


def run_locally(
    pipeline: tfx.dsl.Pipeline,
    run_id: str,
    on_event: Callable[[str, ComponentTiming], None],
    progress: RunProgress,
) -> None:
    """Run every node in topological order (the IR's order); stop at the first failure,
    recording it in `progress.failed_component`, and re-raise its exception."""
    ir = compile_pipeline(pipeline, run_id)
    root = logging.getLogger()
    for node in ir.nodes:
        node_id = node.pipeline_node.node_info.id
        # Keep the full log at INFO even after a library lowered the levels.
        root.setLevel(logging.INFO)
        logging.getLogger("absl").setLevel(logging.INFO)
        timing = ComponentTiming(node_id, time.monotonic())
        progress.timings[node_id] = timing
        on_event("start", timing)
        try:
            launch_node(ir, node_id)
        except BaseException:
            progress.failed_component = node_id
            raise
        timing.seconds = time.monotonic() - timing.started
        on_event("finish", timing)

"""Run the pipeline on this machine with TFX's LocalDagRunner (sqlite MLMD, Beam DirectRunner).

The runner itself is TFX's; this module adds what a person watching the terminal needs: one
line as each component starts and finishes with its duration (read from the runner's own
log records), the full log in `<workspace>/runs/<run_id>/pipeline.log`, and the name of the
component that failed.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tfx import v1 as tfx
from tfx.dsl.compiler import compiler, constants
from tfx.orchestration.portable import runtime_parameter_utils
from tfx.proto.orchestration import pipeline_pb2

_RUNNING = re.compile(r"^Component (\S+) is running\.$")
_FINISHED = re.compile(r"^Component (\S+) is finished\.$")


@dataclass
class ComponentTiming:
    """When one component started and how long it took (None while running)."""

    name: str
    started: float
    seconds: float | None = None


@dataclass
class RunProgress:
    """What the runner reported so far; `failed_component` is set when a component raised."""

    timings: dict[str, ComponentTiming] = field(default_factory=dict)
    failed_component: str | None = None

    @property
    def running(self) -> str | None:
        for timing in self.timings.values():
            if timing.seconds is None:
                return timing.name
        return None


class _ProgressHandler(logging.Handler):
    """Turns LocalDagRunner's 'Component X is running/finished' records into callbacks."""

    def __init__(self, progress: RunProgress, on_event: Callable[[str, ComponentTiming], None]):
        super().__init__(level=logging.INFO)
        self._progress = progress
        self._on_event = on_event

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if match := _RUNNING.match(message):
            timing = ComponentTiming(match.group(1), time.monotonic())
            self._progress.timings[timing.name] = timing
            self._on_event("start", timing)
        elif (match := _FINISHED.match(message)) and match.group(1) in self._progress.timings:
            timing = self._progress.timings[match.group(1)]
            timing.seconds = time.monotonic() - timing.started
            self._on_event("finish", timing)


def compile_pipeline(pipeline: tfx.dsl.Pipeline, run_id: str) -> pipeline_pb2.Pipeline:
    """Compile to TFX IR with the pipeline run id fixed to `run_id` (our summary's key)."""
    ir = compiler.Compiler().compile(pipeline)
    runtime_parameter_utils.substitute_runtime_parameter(
        ir, {constants.PIPELINE_RUN_ID_PARAMETER_NAME: run_id}
    )
    return ir


def run_locally(
    pipeline: tfx.dsl.Pipeline,
    run_id: str,
    on_event: Callable[[str, ComponentTiming], None],
    progress: RunProgress,
) -> None:
    """Run every component in order; re-raises the failing component's exception after
    recording it in `progress.failed_component`."""
    ir = compile_pipeline(pipeline, run_id)
    absl_logger = logging.getLogger("absl")
    handler = _ProgressHandler(progress, on_event)
    previous_level = absl_logger.level
    absl_logger.setLevel(logging.INFO)
    absl_logger.addHandler(handler)
    try:
        tfx.orchestration.LocalDagRunner().run_with_ir(ir)
    except BaseException:
        progress.failed_component = progress.running
        raise
    finally:
        absl_logger.removeHandler(handler)
        absl_logger.setLevel(previous_level)

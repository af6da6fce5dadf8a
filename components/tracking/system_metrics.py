"""MLflow's own system metrics (`mlflow.system_metrics.SystemMetricsMonitor`) while the
Trainer runs, logged to the pipeline run's MLflow run.

The run is opened when the pipeline starts (`components/tracking/live_run.py`) and handed to
the Trainer the way MLflow hands a run to a child process: `MLFLOW_RUN_ID` and
`MLFLOW_TRACKING_URI` in its environment (set around the in-process Trainer by
`pipelines/api.py`, in the pod's spec by the Kubernetes driver), with MLflow's own
`MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL`. Nothing of it is an exec property, so TFX's cache
key of the Trainer does not change from run to run.

MLflow samples CPU, memory, disk and network everywhere, and GPU utilisation, memory and
power where NVML answers (`pynvml`, from nvidia-ml-py); without a GPU the Trainer's log says
so in one line. Under multi-worker training each worker logs with its task as MLflow's
node id: `system/worker-1/cpu_utilization_percentage`.

Monitoring never fails training: no run handed over is one log line, a server that goes
away stops the sampling thread (MLflow logs a warning), and stopping waits at most
`STOP_TIMEOUT_SECONDS` for a last flush.

    with monitoring(node_id=None):
        ...  # train
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping

from components.redact import redact, redact_text, with_credentials

ENV_RUN_ID = "MLFLOW_RUN_ID"
ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"
ENV_SAMPLING_INTERVAL = "MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL"
DEFAULT_INTERVAL_SECONDS = 10.0  # MLflow's own default
# A last flush to a slow server must not hold the Trainer up for MLflow's HTTP retries.
STOP_TIMEOUT_SECONDS = 15.0

_log = logging.getLogger("mptfx.system_metrics")


@contextlib.contextmanager
def monitoring(node_id: str | None = None,
               environ: Mapping[str, str] | None = None) -> Iterator[object | None]:
    """Runs MLflow's SystemMetricsMonitor on the handed-over run for the `with` block.

    Args:
        node_id: MLflow's node id (the task under multi-worker training), None for one
            process.
        environ: where the handed-over run is read (default os.environ).

    Yields:
        the monitor, or None when none runs.
    """
    environ = os.environ if environ is None else environ
    monitor = _start(environ, node_id)
    try:
        yield monitor
    finally:
        if monitor is not None:
            _stop(monitor)


def _start(environ: Mapping[str, str], node_id: str | None) -> object | None:
    run_id, uri = environ.get(ENV_RUN_ID, ""), environ.get(ENV_TRACKING_URI, "")
    if not run_id or not uri:
        _log.info("system metrics: not logged (no MLflow run handed to this process: "
                  "%s unset)", ENV_RUN_ID if not run_id else ENV_TRACKING_URI)
        return None
    try:
        from mlflow.system_metrics.metrics.gpu_monitor import GPUMonitor
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        for name in ("mlflow", "alembic"):
            logging.getLogger(name).setLevel(logging.WARNING)
        # MLflow reads its interval variable from os.environ; `environ` may be another map.
        interval = float(environ.get(ENV_SAMPLING_INTERVAL) or DEFAULT_INTERVAL_SECONDS)
        # Not resume_logging: it asks the server for the run here, in the Trainer's thread,
        # where a server that does not answer would hold training up for MLflow's retries.
        monitor = SystemMetricsMonitor(run_id, sampling_interval=interval, node_id=node_id,
                                       tracking_uri=with_credentials(uri, environ))
        monitor.start()
    except Exception as error:  # monitoring never fails training
        _log.warning("system metrics: not logged: %s", redact_text(str(error))[:300])
        return None
    gpus = [m for m in monitor.monitors if isinstance(m, GPUMonitor)]
    _log.info("system metrics: MLflow run %s at %s every %s s%s: CPU, memory, disk, "
              "network%s", run_id, redact(uri), monitor.sampling_interval,
              f" as node {node_id}" if node_id else "",
              f", {gpus[0].num_gpus} GPU(s)" if gpus else "")
    if not gpus:
        _log.info("system metrics: no GPU metrics: NVML found no NVIDIA GPU (%s)",
                  _nvml_reason())
    return monitor


def _stop(monitor: object) -> None:
    """MLflow's `finish()` (join, then flush) in a thread of its own, waited on for at most
    STOP_TIMEOUT_SECONDS; the daemon thread dies with the process if the server hangs."""
    finisher = threading.Thread(target=monitor.finish, name="mptfx-system-metrics-stop",
                                daemon=True)
    finisher.start()
    finisher.join(STOP_TIMEOUT_SECONDS)
    if finisher.is_alive():
        _log.warning("system metrics: the last samples were not flushed within %.0f s",
                     STOP_TIMEOUT_SECONDS)


def _nvml_reason() -> str:
    try:
        import pynvml
    except ImportError:
        return "pynvml is not installed: pip install nvidia-ml-py"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        return str(error)
    try:
        return f"{pynvml.nvmlDeviceGetCount()} devices"
    finally:
        pynvml.nvmlShutdown()

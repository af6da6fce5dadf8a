"""`tracking`: where MLflow records each pipeline run (components/tracking/store.py reads it).

pipelines/config.py composes it into the one `Config`. Importing this module is cheap
(pydantic only).

    TrackingSection().register_model   # True
"""

from __future__ import annotations

from pydantic import Field

from components.core.sections import StrictSection


class TrackingSection(StrictSection):
    """Where MLflow records each pipeline run (see components/tracking/)."""

    # "" = $MLFLOW_TRACKING_URI when set, else sqlite:///<workspace>/mlflow.db (no server).
    uri: str = ""
    # true: an unreachable server is an error (exit 2) before training; false: warn once,
    # record the run in <workspace>/mlflow.db and print the `mptfx tracking sync` command.
    required: bool = False
    # "" = pipeline.name.
    experiment: str = ""
    # Register the pushed model (alias champion) or an unblessed one (alias challenger)
    # under pusher.model_name.
    register_model: bool = True
    # How long to wait for the server's /health before treating it as unreachable.
    connect_timeout_seconds: float = Field(5.0, gt=0)
    # MLflow's own system metrics (CPU, memory, disk, network; GPU through NVML) while the
    # Trainer runs, logged to the run's MLflow run, which then opens when the pipeline starts.
    system_metrics: bool = True
    # Seconds between two samples (MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL in the Trainer).
    system_metrics_interval_seconds: float = Field(2.0, gt=0)

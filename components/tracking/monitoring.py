"""`mptfx monitor`'s record in MLflow: metrics on the run that trained each served version.

    runs = record_monitoring(store, "digits", verdicts, until, report_path)   # {3: "a1b2..."}

The run is found through the registry (the version whose `serving_version` tag is the
served version, registry.py) or, without a registry entry, by the run's
`mptfx.pushed_version` tag. Metrics (step = the window's end, seconds since the epoch):

    monitor/images                 logged images of the version in the window
    monitor/drifted                1 when its traffic moved (drift or skew), else 0
    monitor/drift/<feature>        TFDV's drift measure against the eval split
    monitor/skew/<feature>         TFDV's skew measure against the training data

and tags `mptfx.monitor.status`, `mptfx.monitor.moved`, `mptfx.monitor.report`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from components.tracking.recorder import log_in_batches
from components.tracking.store import TrackingStore, mlflow_client

SERVING_VERSION_TAG = "serving_version"
PUSHED_VERSION_TAG = "mptfx.pushed_version"


def find_serving_run(client: Any, experiment: str, model_name: str, version: int) -> str | None:
    """The MLflow run id that trained TF Serving version `version` of `model_name`."""
    from mlflow.exceptions import MlflowException

    try:
        registered = client.search_model_versions(f"name = '{model_name}'")
    except MlflowException:
        registered = []
    for entry in registered:
        if (entry.tags or {}).get(SERVING_VERSION_TAG) == str(version) and entry.run_id:
            return entry.run_id
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    runs = client.search_runs([found.experiment_id],
                              filter_string=f"tags.`{PUSHED_VERSION_TAG}` = '{version}'",
                              order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0].info.run_id if runs else None


def record_monitoring(store: TrackingStore, model_name: str, verdicts: Sequence[Any],
                      until: dt.datetime, report_path: str) -> dict[int, str | None]:
    """Log each verdict's metrics on its version's run; version -> run id (None: no run)."""
    from mlflow.entities import Metric

    client = mlflow_client(store.uri)
    step = int(until.timestamp())
    when = step * 1000
    runs: dict[int, str | None] = {}
    for verdict in verdicts:
        if not verdict.version:
            continue
        run_id = find_serving_run(client, store.experiment, model_name, verdict.version)
        runs[verdict.version] = run_id
        if run_id is None:
            continue
        metrics = [Metric("monitor/images", float(verdict.images), when, step)]
        if verdict.comparison is not None:
            metrics.append(Metric("monitor/drifted", float(bool(verdict.moved())), when, step))
            metrics += [Metric(f"monitor/{m.comparison}/{m.feature}", m.value, when, step)
                        for m in verdict.comparison.measurements]
        tags = {"mptfx.monitor.status": verdict.status,
                "mptfx.monitor.moved": ",".join(verdict.moved()) or "-",
                "mptfx.monitor.report": report_path}
        log_in_batches(client, run_id, metrics=metrics, tags=tags)
    return runs

"""Record one finished pipeline run as one MLflow run, read back from summary.json.

    section = record_pipeline_run(store, summary)   # summary.mlflow == section
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from components.redact import redact
from components.run_summary import SUMMARY_FILE, TRAINING_SUMMARY_FILE, RunSummary
from components.tracking import content, registry
from components.tracking import report as report_lib
from components.tracking.model_card import render_model_card
from components.tracking.store import (
    SYNC_TO_TAG,
    TrackingStore,
    ensure_experiment,
    is_local_uri,
    mlflow_client,
)

_RUN_STATUS = {"completed": "FINISHED", "failed": "FAILED", "skipped": "FINISHED"}
# MLflow's per-request limits for log_batch.
_BATCH_PARAMS, _BATCH_TAGS, _BATCH_METRICS = 100, 100, 1000


def read_tfma_metrics(evaluation_uri: str | None) -> dict[str, float]:
    """Overall-slice TFMA metrics of the candidate (`name`) and baseline (`baseline/name`)."""
    if not evaluation_uri or not os.path.isdir(evaluation_uri):
        return {}
    try:
        import tensorflow_model_analysis as tfma

        results = tfma.load_metrics(evaluation_uri)
    except Exception:  # an unreadable report leaves the other metrics intact
        return {}
    metrics: dict[str, float] = {}
    for slice_metrics in results:
        if slice_metrics.slice_key.single_slice_keys:
            continue
        for entry in slice_metrics.metric_keys_and_values:
            key = entry.key
            if key.is_diff or not entry.value.HasField("double_value"):
                continue
            prefix = "baseline/" if key.model_name == "baseline" else ""
            metrics[prefix + key.name] = entry.value.double_value.value
    return metrics


def log_in_batches(
    client: Any,
    run_id: str,
    params: Mapping[str, str] | None = None,
    metrics: list | None = None,
    tags: Mapping[str, str] | None = None,
) -> None:
    """`log_batch` within MLflow's per-request limits (100 params, 100 tags, 1000 metrics)."""
    from mlflow.entities import Param, RunTag

    param_list = [Param(k, v) for k, v in (params or {}).items()]
    tag_list = [RunTag(k, v) for k, v in (tags or {}).items()]
    metric_list = list(metrics or [])
    for start in range(0, len(param_list), _BATCH_PARAMS):
        client.log_batch(run_id, params=param_list[start:start + _BATCH_PARAMS])
    for start in range(0, len(tag_list), _BATCH_TAGS):
        client.log_batch(run_id, tags=tag_list[start:start + _BATCH_TAGS])
    for start in range(0, len(metric_list), _BATCH_METRICS):
        client.log_batch(run_id, metrics=metric_list[start:start + _BATCH_METRICS])


def _metric_entities(summary: RunSummary, training: Mapping[str, Any],
                     tfma_metrics: Mapping[str, float]) -> list:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    entities = [
        Metric(name, value, now, epoch)
        for name, points in content.epoch_metrics(training).items()
        for epoch, value in points
    ]
    entities += [Metric(name, value, now, 0)
                 for name, value in content.final_metrics(summary, tfma_metrics).items()]
    return entities


def system_series(client: Any, run_id: str) -> dict[str, list[tuple[float, float]]]:
    """MLflow's system metrics the Trainer logged to the run, as (seconds since the first
    sample, value) per metric."""
    series = {}
    for name in report_lib.SYSTEM_SERIES:
        history = sorted(client.get_metric_history(run_id, name), key=lambda m: m.timestamp)
        if history:
            first = history[0].timestamp
            series[name] = [((m.timestamp - first) / 1000.0, m.value) for m in history]
    return series


def write_report_quietly(summary: RunSummary, training: Mapping[str, Any],
                         series: Mapping[str, Any] | None = None) -> report_lib.Report | None:
    """The run report, or None with a warning in the log: a report never fails recording."""
    try:
        return report_lib.write_report(summary, training, series)
    except Exception:
        logging.getLogger("mptfx").warning("the run report could not be written",
                                           exc_info=True)
        return None


def _log_artifacts(client: Any, run_id: str, summary: RunSummary,
                   training: Mapping[str, Any], tfma_metrics: Mapping[str, float],
                   report: report_lib.Report | None) -> None:
    if report is not None:  # the figures, and the page that holds them all
        with tempfile.TemporaryDirectory(prefix="mptfx-report-") as folder:
            for name, png in report.figures.items():
                (Path(folder) / name).write_bytes(png)
            shutil.copy(report.path, Path(folder) / report_lib.REPORT_FILE)
            client.log_artifacts(run_id, folder, report_lib.ARTIFACT_DIR)
    with tempfile.TemporaryDirectory(prefix="mptfx-mlflow-") as folder:
        staged = Path(folder)
        (staged / SUMMARY_FILE).write_text(summary.to_json())
        (staged / "model_card.md").write_text(render_model_card(summary, training))
        if training:
            (staged / TRAINING_SUMMARY_FILE).write_text(json.dumps(training, indent=2))
        if summary.eval.present():
            report = staged / "evaluation"
            report.mkdir()
            (report / "report.json").write_text(json.dumps(
                content.evaluation_report(summary, tfma_metrics), indent=2, default=str))
        client.log_artifacts(run_id, str(staged))
    tfma_dir = summary.eval.evaluation_uri
    if tfma_dir and os.path.isdir(tfma_dir):
        client.log_artifacts(run_id, tfma_dir, "evaluation/tfma")


def _run_url(store: TrackingStore, experiment_id: str, run_id: str) -> str | None:
    if is_local_uri(store.uri):
        return None
    return redact(f"{store.uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}")


def record_pipeline_run(store: TrackingStore, summary: RunSummary,
                        opened_run_id: str | None = None) -> dict[str, Any]:
    """Log everything about `summary` into the MLflow run opened when the pipeline started
    (`opened_run_id`, live_run.py: it holds the Trainer's system metrics), else into a new
    one, and end it; return the `mlflow` section (also set on `summary` before summary.json
    is logged)."""
    client = mlflow_client(store.uri)
    experiment_id = ensure_experiment(client, store.experiment, store.artifact_location)
    training = content.read_training_summary(summary)
    tfma_metrics = read_tfma_metrics(summary.eval.evaluation_uri)
    tags = content.run_tags(summary, content.git_commit(), content.package_versions())
    if store.is_fallback:
        # Without the password: `mptfx tracking sync` takes it from MLFLOW_TRACKING_PASSWORD.
        tags[SYNC_TO_TAG] = redact(store.requested_uri)
    if opened_run_id is not None:
        run = client.get_run(opened_run_id)
        log_in_batches(client, opened_run_id, tags=tags)
    else:
        # The MLflow run spans the pipeline run, so its duration in the UI is the wall time.
        started = time.time() - float(summary.wall_seconds or 0)
        run = client.create_run(experiment_id, start_time=int(started * 1000),
                                run_name=str(summary.run_id), tags=tags)
    run_id = run.info.run_id
    section: dict[str, Any] = {
        "run_id": run_id,
        "experiment": store.experiment,
        "experiment_id": experiment_id,
        "tracking_uri": redact(store.uri),
        "artifact_uri": redact(run.info.artifact_uri),
        "run_url": _run_url(store, experiment_id, run_id),
        "registered_model": None,
    }
    if store.is_fallback:
        section.update(pending_sync_to=redact(store.requested_uri), sync_command=store.sync_command,
                       unreachable_reason=store.unreachable_reason)
    summary.mlflow = section
    try:
        log_in_batches(client, run_id, params=content.run_params(summary, training),
                       metrics=_metric_entities(summary, training, tfma_metrics))
        if store.register_model:
            section["registered_model"] = registry.register_run_model(
                client, run, summary, store.model_name)
            summary.mlflow = section
        client.set_tag(run_id, "mlflow.note.content", render_model_card(summary, training))
        report = write_report_quietly(summary, training, system_series(client, run_id))
        _log_artifacts(client, run_id, summary, training, tfma_metrics, report)
    except BaseException:
        _terminate_quietly(client, run_id, "FAILED")
        raise
    client.set_terminated(run_id, _RUN_STATUS.get(summary.status, "FAILED"))
    return section


def _terminate_quietly(client: Any, run_id: str, status: str) -> None:
    try:
        client.set_terminated(run_id, status)
    except Exception:  # the original error is the one to report
        pass

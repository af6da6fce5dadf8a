"""What one pipeline run puts into MLflow: params, per-epoch and final metrics, tags.

Everything is read from summary.json and the Trainer's training_summary.json after the run,
so a run whose Trainer ran in another process (or pod, or was cached) is recorded the same
way. Pure functions: no MLflow here.

Metric names (step = Keras epoch index, 0-based like the TensorBoard logs):
    per epoch   loss, accuracy, val_loss, val_accuracy, images_per_sec, loss_scale,
                input_wait_share, steps_per_sec, ...
    final       train/images_per_sec, train/input_wait_share, train/model_steps_per_sec,
                eval/accuracy, eval/blessed, eval/recall_<class>,
                tfma/<metric>, size/saved_model_bytes, tflite/<variant>_bytes|_agreement|...,
                distill/teacher_accuracy|student_accuracy|teacher_latency_ms|...,
                seconds/<Component>, seconds/train, seconds/wall, data/images, ...
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from components.run_summary import TRAINING_SUMMARY_FILE, RunSummary

# MLflow's limits for one param value and one tag value.
# The run's summary.json (its folder holds pipeline.log and report.html): `mptfx compare`
# links the report through it.
SUMMARY_PATH_TAG = "mptfx.summary_path"
_MAX_PARAM_LENGTH = 6000
_MAX_TAG_LENGTH = 5000
_VERSIONED_PACKAGES = {"tfx": "tfx", "tensorflow": "tensorflow", "mptfx": "mptfx",
                       "mlflow": "mlflow"}
_TFLITE_FIELDS = ("bytes", "agreement", "accuracy", "accuracy_delta", "latency_ms")
# trainer.distill (training_summary.json `distill`): settings as params, results as metrics.
_DISTILL_PARAMS = ("teacher", "teacher_model", "temperature", "alpha", "teacher_precision")
_DISTILL_METRICS = ("teacher_accuracy", "student_accuracy", "teacher_parameters",
                    "student_parameters", "parameter_ratio", "teacher_saved_model_bytes",
                    "teacher_latency_ms")


def read_training_summary(summary: RunSummary) -> dict[str, Any]:
    """The Trainer's training_summary.json (with its per-epoch `history`), or {}.

    It lives in the Trainer's model_run artifact, the parent of the TensorBoard log folder.
    """
    logs = summary.trainer.tensorboard_logs
    if not logs:
        return {}
    try:
        return json.loads((Path(logs).parent / TRAINING_SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return {}


def epoch_metrics(training: Mapping[str, Any]) -> dict[str, list[tuple[int, float]]]:
    """Per-epoch series as (epoch, value): Keras' history plus the Trainer's images/sec and
    loss scale lists. Epochs without a value (e.g. no loss scale in float32) are left out."""
    series = {key: list(values) for key, values in (training.get("history") or {}).items()
              if isinstance(values, list)}
    for name in ("images_per_sec", "loss_scale"):
        listed = training.get(f"{name}_per_epoch")
        if name not in series and isinstance(listed, list):
            series[name] = listed
    points = {key: [(epoch, float(value)) for epoch, value in enumerate(values)
                    if _is_number(value) and math.isfinite(value)]
              for key, values in series.items()}
    return {key: values for key, values in points.items() if values}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _flatten(prefix: str, value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        flat: dict[str, Any] = {}
        for key, inner in value.items():
            flat.update(_flatten(f"{prefix}.{key}", inner))
        return flat
    return {prefix: value}


def _text(value: Any, limit: int) -> str:
    if isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, (list, dict)):
        text = json.dumps(value, sort_keys=True)
    else:
        text = str(value)
    return text[:limit]


def describe_host() -> str:
    """`CPU: <model name> (<n> cores)` for the machine this process runs on."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU: {name} ({os.cpu_count()} cores)"


def _device(training: Mapping[str, Any]) -> str:
    for key in ("device", "devices", "device_description"):
        value = training.get(key)
        if isinstance(value, list) and value:
            return ", ".join(
                f"{d.get('kind', '?')} {d.get('name', '')}".strip() if isinstance(d, Mapping)
                else str(d) for d in value
            )
        if value:
            return str(value)
    return describe_host() + " [host that recorded the run]"


def run_params(summary: RunSummary, training: Mapping[str, Any]) -> dict[str, str]:
    """The run's settings: the Trainer's resolved choices first, then every config key as
    `config.<section>.<key>` (so a sweep's `--set` keys can be compared)."""
    trainer = {**training, **summary.trainer.to_dict()}
    config = summary.config
    requested = config.get("trainer") or {}
    input_size = trainer.get("input_size")
    accumulation = next((trainer[k] for k in ("grad_accum_steps", "gradient_accumulation_steps")
                         if trainer.get(k) is not None),
                        requested.get("grad_accum_steps", 1))
    loss_scale = _mapping(trainer.get("loss_scale"))
    schedule = _mapping(trainer.get("lr_schedule"))
    start = _mapping(trainer.get("start_weights"))
    params: dict[str, Any] = {
        "model": trainer.get("model") or (config.get("model") or {}).get("name"),
        "model_reason": trainer.get("model_reason"),
        "input_size": "x".join(str(v) for v in input_size) if input_size else None,
        "input_size_reason": trainer.get("input_size_reason"),
        "start_weights": start.get("source"),
        "lr_schedule": schedule.get("schedule"),
        "warmup_epochs": schedule.get("warmup_epochs"),
        "label_smoothing": trainer.get("label_smoothing"),
        "channels": trainer.get("channels"),
        "precision": trainer.get("precision"),
        "precision_reason": trainer.get("precision_reason"),
        "precision_requested": requested.get("precision"),
        "strategy": trainer.get("strategy"),
        "replicas": trainer.get("replicas"),
        "xla": _on_off(trainer.get("xla")),
        "xla_reason": trainer.get("xla_reason"),
        "xla_requested": requested.get("xla"),
        "batch_size_per_replica": trainer.get("batch_size"),
        "global_batch_size": trainer.get("global_batch_size"),
        "gradient_accumulation_steps": accumulation,
        "effective_batch_size": trainer.get("effective_batch_size"),
        "loss_scale_dynamic": loss_scale.get("dynamic"),
        "loss_scale_initial": loss_scale.get("initial"),
        "task": trainer.get("task"),
        "warm_started_from": trainer.get("warm_started_from"),
        "learning_rate": trainer.get("learning_rate"),
        "epochs": trainer.get("epochs"),
        "device": _device(trainer),
        "train_examples": trainer.get("train_examples"),
        "eval_examples": trainer.get("eval_examples"),
        "data_root": summary.data_root,
        "autotune": _mapping(trainer.get("autotune")).get("status"),
        "autotune_candidates": ", ".join(_mapping(trainer.get("autotune")).get("candidates")
                                         or []) or None,
        "batch_size_reason": trainer.get("batch_size_reason"),
        # A user's model file (model.module_file): which file and which exact content.
        "model_file": os.path.basename(trainer["model_file"]) if trainer.get("model_file")
        else None,
        "model_file_sha256": trainer.get("model_file_sha256"),
        **{f"distill_{key}": value for key, value in _mapping(trainer.get("distill")).items()
           if key in _DISTILL_PARAMS},
    }
    params.update(_flatten("config", config))
    return {key: _text(value, _MAX_PARAM_LENGTH) for key, value in params.items()
            if value is not None and value != ""}


def _on_off(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return "on" if value else "off"


def final_metrics(summary: RunSummary, tfma_metrics: Mapping[str, float]) -> dict:
    """Single-value results of the run: throughput, TFMA evaluation, sizes, timings."""
    trainer = summary.trainer.to_dict()
    evaluation, data = summary.eval, summary.data
    metrics: dict[str, Any] = {
        "train/images_per_sec": trainer.get("images_per_sec"),
        "seconds/train": trainer.get("train_seconds"),
        "train/skipped_steps": trainer.get("skipped_steps"),
        "train/final_loss_scale": _mapping(trainer.get("loss_scale")).get("final"),
        "seconds/wall": summary.wall_seconds,
        "data/images": data.images,
        "data/quarantined": data.quarantined,
        "eval/accuracy": evaluation.accuracy,
        "eval/baseline_accuracy": evaluation.baseline_accuracy,
    }
    input_bound = _mapping(trainer.get("input_bound"))
    metrics["train/input_wait_share"] = input_bound.get("wait_share")
    metrics["train/steps_per_sec"] = input_bound.get("steps_per_sec")
    metrics["train/model_steps_per_sec"] = input_bound.get("model_steps_per_sec")
    metrics["train/speedup_without_input_wait"] = input_bound.get("speedup_without_wait")
    if evaluation.present():
        metrics["eval/blessed"] = 1.0 if evaluation.blessed else 0.0
    labels = trainer.get("label_names") or []
    for label, recall in (evaluation.recall_per_class or {}).items():
        index = int(label) if str(label).isdigit() else None
        name = labels[index] if index is not None and index < len(labels) else label
        metrics[f"eval/recall_{name}"] = recall
    for name, value in tfma_metrics.items():
        metrics[f"tfma/{name}"] = value
    # autotune's measured table: one throughput per cell, and what measuring cost.
    tuning = _mapping(trainer.get("autotune"))
    metrics["autotune/probe_seconds"] = tuning.get("probe_seconds")
    for row in tuning.get("table") or []:
        cell = f"{row.get('precision')}_xla_{'on' if row.get('xla') else 'off'}"
        metrics[f"autotune/{cell}_images_per_sec"] = row.get("images_per_sec")
    for name, info in summary.components.items():
        metrics[f"seconds/{name}"] = info.seconds
    metrics["size/saved_model_bytes"] = saved_model_bytes(summary)
    for variant, info in summary.tflite.items():
        if isinstance(info, str):  # "skipped": why
            continue
        fields = info.to_dict()
        for field in _TFLITE_FIELDS:
            metrics[f"tflite/{variant}_{field}"] = fields.get(field)
        metrics[f"tflite/{variant}_published"] = 1.0 if info.published else 0.0
    distill = _mapping(trainer.get("distill"))
    for field in _DISTILL_METRICS:
        metrics[f"distill/{field}"] = distill.get(field)
    version = summary.pushed_version
    if version is not None and str(version).isdigit():
        metrics["pushed/version"] = int(version)
    return {key: float(value) for key, value in metrics.items()
            if _is_number(value) and math.isfinite(value)}


def serving_model_dir(summary: RunSummary) -> str | None:
    """The SavedModel folder TF Serving loads: the pushed version, else the Trainer's."""
    pushed = summary.pushed
    if pushed.pushed and pushed.path:
        return str(pushed.path)
    model_uri = summary.trainer.model_uri
    return os.path.join(model_uri, "Format-Serving") if model_uri else None


def saved_model_bytes(summary: RunSummary) -> int | None:
    """Total size of the serving SavedModel's files, None when it is not on this machine."""
    folder = serving_model_dir(summary)
    if not folder or not os.path.isdir(folder):
        return None
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, files in os.walk(folder) for name in files
    )


def git_commit(cwd: str | None = None) -> str | None:
    """`git rev-parse HEAD` in `cwd`, or None outside a repository (or without git)."""
    try:
        completed = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                                   text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = completed.stdout.strip()
    return commit if completed.returncode == 0 and len(commit) == 40 else None


def package_versions() -> dict[str, str]:
    """Installed versions of TFX, TensorFlow, mptfx and MLflow ("unknown" when missing)."""
    versions = {}
    for label, package in _VERSIONED_PACKAGES.items():
        try:
            versions[label] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[label] = "unknown"
    return versions


def run_tags(
    summary: RunSummary, commit: str | None, versions: Mapping[str, str]
) -> dict[str, str]:
    """Lineage tags: the TFX run id, each component's MLMD execution id and state, the git
    commit, library versions and the TensorBoard log folder."""
    evaluation, pushed = summary.eval, summary.pushed
    logs = summary.trainer.tensorboard_logs
    tags: dict[str, Any] = {
        "mptfx.tfx_run_id": summary.run_id,
        "mptfx.pipeline": summary.pipeline,
        "mptfx.status": summary.status,
        "mptfx.workspace": summary.workspace,
        SUMMARY_PATH_TAG: summary.summary_path,
        "mptfx.log_path": summary.log_path,
        "mptfx.error": summary.error,
        "mptfx.blessed": evaluation.blessed if evaluation.present() else None,
        "mptfx.pushed_version": summary.pushed_version,
        "mptfx.pushed_path": pushed.path if pushed.pushed else None,
        "tensorboard_logs": logs,
        "tensorboard_command": f"tensorboard --logdir {logs}" if logs else None,
        "mptfx.orchestrator": summary.orchestrator or "local",
        # Why the run was started (mptfx monitor --retrain-on-drift: drift).
        "mptfx.trigger": summary.trigger.kind,
        "mptfx.trigger.features": ",".join(summary.trigger.features or []),
        "mptfx.trigger.report": summary.trigger.report,
        "mlflow.source.name": ("mptfx k8s submit" if summary.orchestrator == "kubernetes"
                               else "mptfx run"),
    }
    for name, info in summary.components.items():
        tags[f"mlmd.execution_id.{name}"] = info.execution_id
        tags[f"tfx.component_status.{name}"] = info.status
    if commit:
        tags["mlflow.source.git.commit"] = commit
        tags["git_commit"] = commit
    for label, version in versions.items():
        tags[f"version.{label}"] = version
    return {key: _text(value, _MAX_TAG_LENGTH) for key, value in tags.items()
            if value is not None and value != ""}


def evaluation_report(
    summary: RunSummary, tfma_metrics: Mapping[str, float]
) -> dict[str, Any]:
    """The Evaluator's verdict in one JSON document: blessing, reasons, thresholds, metrics."""
    evaluation = summary.eval.to_dict()
    thresholds = summary.config.get("evaluator") or {}
    return {
        "blessed": evaluation.pop("blessed", None),
        "accuracy": evaluation.pop("accuracy", None),
        "baseline_accuracy": evaluation.pop("baseline_accuracy", None),
        "why_not_blessed": evaluation.pop("why_not_blessed", []),
        "thresholds": thresholds,
        "recall_per_class": evaluation.pop("recall_per_class", {}),
        "tfma_metrics": dict(tfma_metrics),
        **evaluation,
    }

"""summary.json: what one pipeline run did, read back from ML Metadata and the artifacts.

Everything here is read after the run from the records TFX itself wrote (executions,
artifacts, TFMA results), so the summary of a cached component is as complete as that of
one that ran.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ml_metadata.proto import metadata_store_pb2
from tfx.orchestration import metadata

from components.run_summary import (
    QUARANTINE_FILE,
    TFLITE_REPORT_FILE,
    TRAINING_SUMMARY_FILE,
    RunSummary,
)

_STATE_NAMES = {
    metadata_store_pb2.Execution.COMPLETE: "completed",
    metadata_store_pb2.Execution.CACHED: "cached",
    metadata_store_pb2.Execution.FAILED: "failed",
    metadata_store_pb2.Execution.RUNNING: "running",
    metadata_store_pb2.Execution.NEW: "new",
    metadata_store_pb2.Execution.CANCELED: "canceled",
}


# TFMA metric name → summary key: classifiers gate on accuracy, segmentation on Dice.
_GATED_METRICS = {"sparse_categorical_accuracy": "accuracy", "dice": "dice"}


def _custom(artifact: metadata_store_pb2.Artifact, key: str) -> Any:
    if key not in artifact.custom_properties:
        return None
    value = artifact.custom_properties[key]
    kind = value.WhichOneof("value")
    if kind == "struct_value":
        from google.protobuf import json_format

        return json_format.MessageToDict(value.struct_value)
    return getattr(value, kind)


def _read_json(path: str) -> Any:
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def collect_outputs(
    connection_config: metadata_store_pb2.ConnectionConfig, pipeline_name: str, run_id: str
) -> dict[str, dict[str, Any]]:
    """Map node id → {"state": str, "outputs": {output key: [artifact protos]}} for one run."""
    nodes: dict[str, dict[str, Any]] = {}
    with metadata.Metadata(connection_config) as handle:
        store = handle.store
        run_context = store.get_context_by_type_and_name("pipeline_run", run_id)
        if run_context is None:
            return nodes
        executions = store.get_executions_by_context(run_context.id)
        prefix = f"{pipeline_name}."
        for execution in executions:
            node_id = next(
                (c.name[len(prefix):] for c in store.get_contexts_by_execution(execution.id)
                 if c.type == "node" or c.name.startswith(prefix)),
                str(execution.id),
            )
            outputs: dict[str, list] = {}
            events = store.get_events_by_execution_ids([execution.id])
            output_events = [e for e in events if e.type in (
                metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT)]
            artifacts = {a.id: a for a in store.get_artifacts_by_id(
                [e.artifact_id for e in output_events])}
            for event in output_events:
                key = event.path.steps[0].key if event.path.steps else "output"
                outputs.setdefault(key, []).append(artifacts[event.artifact_id])
            nodes[node_id] = {
                "state": _STATE_NAMES.get(execution.last_known_state, "unknown"),
                "execution_id": execution.id,
                "outputs": outputs,
            }
    return nodes


def _first(nodes: dict, node: str, key: str) -> metadata_store_pb2.Artifact | None:
    artifacts = nodes.get(node, {}).get("outputs", {}).get(key, [])
    return artifacts[0] if artifacts else None


def _data_section(nodes: dict) -> dict[str, Any]:
    section: dict[str, Any] = {}
    examples = _first(nodes, "Ingest", "examples")
    if examples is not None:
        section["examples_uri"] = examples.uri
        section["span"] = _custom(examples, "span")
    schema = _first(nodes, "SchemaGen", "schema") or _first(nodes, "ImportSchemaGen", "schema")
    if schema is not None:
        section["schema_uri"] = schema.uri
    report = _first(nodes, "Ingest", "quarantine")
    if report is not None:
        quarantine = _read_json(os.path.join(report.uri, QUARANTINE_FILE)) or {}
        section["images"] = quarantine.get("total")
        section["quarantined"] = quarantine.get("bad")
        section["ignored"] = len(quarantine.get("ignored", []))
        section["split_counts"] = quarantine.get("split_counts")
        section["quarantine_report"] = os.path.join(report.uri, QUARANTINE_FILE)
    return section


def _trainer_section(nodes: dict) -> dict[str, Any]:
    model_run = _first(nodes, "Trainer", "model_run")
    if model_run is None:
        return {}
    training = _read_json(os.path.join(model_run.uri, TRAINING_SUMMARY_FILE)) or {}
    training.pop("history", None)
    training["model_uri"] = getattr(_first(nodes, "Trainer", "model"), "uri", None)
    training["tensorboard_logs"] = os.path.join(model_run.uri, "logs")
    return training


def _eval_section(nodes: dict) -> dict[str, Any]:
    evaluation = _first(nodes, "Evaluator", "evaluation")
    blessing = _first(nodes, "Evaluator", "blessing")
    if evaluation is None:
        return {}
    import tensorflow_model_analysis as tfma

    section: dict[str, Any] = {"blessed": bool(blessing and _custom(blessing, "blessed"))}
    section["evaluation_uri"] = evaluation.uri
    per_class: dict[str, float] = {}
    for slice_metrics in tfma.load_metrics(evaluation.uri):
        slice_key = slice_metrics.slice_key
        for entry in slice_metrics.metric_keys_and_values:
            key = entry.key
            metric = _GATED_METRICS.get(key.name)
            if metric is None or key.is_diff:
                continue
            if key.model_name == "baseline":
                if not slice_metrics.slice_key.single_slice_keys:
                    section[f"baseline_{metric}"] = round(entry.value.double_value.value, 4)
                continue
            value = entry.value.double_value.value
            if not slice_key.single_slice_keys:
                section[metric] = round(value, 4)
            elif metric == "dice":
                continue
            else:
                label = slice_key.single_slice_keys[0].int64_value
                per_class[str(label)] = round(value, 4)
    if per_class:
        section["recall_per_class"] = dict(sorted(per_class.items(), key=lambda kv: int(kv[0])))
    validation = tfma.load_validation_result(evaluation.uri)
    failures = [
        _describe_failure(failure)
        for per_slice in validation.metric_validations_per_slice
        for failure in per_slice.failures
    ]
    if not section["blessed"]:
        section["why_not_blessed"] = failures or ["the Evaluator did not bless the model"]
    return section


def _describe_failure(failure: Any) -> str:
    """One TFMA validation failure as a sentence naming the metric, value and threshold."""
    name = failure.metric_key.name
    value = failure.metric_value.double_value.value
    threshold = failure.metric_threshold
    if failure.metric_key.is_diff:
        allowed = threshold.change_threshold.absolute.value
        return (f"{name} changed by {value:+.4f} against the latest blessed model, "
                f"more than evaluator.max_regression {-allowed:g} allows")
    bound = threshold.value_threshold.lower_bound.value
    key = "evaluator.min_dice" if name == "dice" else "evaluator.min_accuracy"
    return f"{name} {value:.4f} is below {key} {bound:g}"


_INFRA_KEYS = ("reason", "server", "start_seconds", "load_seconds", "requests", "p50_ms",
               "p99_ms", "peak_rss_mb", "memory_limit")


def _infra_section(nodes: dict) -> dict[str, Any]:
    """The InfraValidator's verdict, from its InfraBlessing's custom properties."""
    blessing = _first(nodes, "InfraValidator", "blessing")
    if blessing is None:
        return {}
    section: dict[str, Any] = {"blessed": bool(_custom(blessing, "blessed")),
                               "checked": bool(_custom(blessing, "checked")),
                               "blessing_uri": blessing.uri}
    for key in _INFRA_KEYS:
        value = _custom(blessing, key)
        if value not in (None, ""):
            section[key] = round(value, 3) if isinstance(value, float) else value
    signatures = _custom(blessing, "signatures")
    if signatures:
        section["signatures"] = signatures.split(",")
    return section


def infra_refusal(summary: RunSummary) -> str | None:
    """The run's error when the InfraValidator refused the candidate, else None: a
    candidate TF Serving cannot serve is a failed run (exit 1), not a quiet "not pushed"."""
    if summary.status != "completed" or not summary.infra.refused():
        return None
    return f"InfraValidator: not pushed: {summary.infra.reason}"


def _pushed_section(nodes: dict) -> dict[str, Any]:
    pushed = _first(nodes, "Pusher", "pushed_model")
    if pushed is None:
        return {}
    if not _custom(pushed, "pushed"):
        return {"pushed": False}
    return {
        "pushed": True,
        "path": _custom(pushed, "pushed_destination"),
        "version": _custom(pushed, "pushed_version"),
        "label": _custom(pushed, "serving_label") or "stable",  # models.config label
    }


def _tflite_section(nodes: dict) -> dict[str, Any]:
    models = _first(nodes, "TFLite", "tflite_models")
    if models is None:
        return {}
    return _read_json(os.path.join(models.uri, TFLITE_REPORT_FILE)) or {}


def build_summary(
    nodes: dict[str, dict[str, Any]],
    timings: dict[str, float | None],
    base: dict[str, Any],
    model_name: str | None = None,
) -> RunSummary:
    """Assemble summary.json from the collected run outputs and per-component timings.

    `base`: the run's own keys (status, run_id, paths, config, error); `model_name`: the
    configured model, recorded when the Trainer wrote no summary of its own.
    """
    components = {}
    for name in list(timings) + [node for node in nodes if node not in timings]:
        state = nodes.get(name, {}).get("state", "not run")
        seconds = timings.get(name)
        components[name] = {
            "status": state,
            "seconds": None if seconds is None else round(seconds, 2),
            "execution_id": nodes.get(name, {}).get("execution_id"),
        }
    summary = dict(base)
    summary["components"] = components
    summary["data"] = _data_section(nodes)
    summary["trainer"] = _trainer_section(nodes)
    summary["eval"] = _eval_section(nodes)
    summary["infra"] = _infra_section(nodes)
    summary["pushed"] = _pushed_section(nodes)
    summary["tflite"] = _tflite_section(nodes)
    if model_name:
        summary["trainer"].setdefault("model", model_name)
    parsed = RunSummary.parse(summary)
    refusal = infra_refusal(parsed)
    if refusal:
        parsed.status, parsed.failed_component, parsed.error = "failed", "InfraValidator", refusal
    return parsed

"""A short model card (markdown) for one pipeline run: data, metrics, precision, intended use.

    text = render_model_card(summary, training_summary)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.run_summary import RunSummary


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _data_lines(summary: RunSummary) -> list[str]:
    data = summary.data
    config = summary.config.get("data") or {}
    splits = data.split_counts or {}
    quarantined = data.quarantined if "quarantined" in data.model_fields_set else 0
    lines = [
        f"- Source: `{config.get('source', 'n/a')}` (read from `{summary.data_root}`)",
        f"- Images: {_fmt(data.images)}, quarantined (undecodable): {_fmt(quarantined)}",
    ]
    if splits:
        lines.append("- Splits: " + ", ".join(f"{k} {v}" for k, v in splits.items()))
    return lines


def _training_lines(trainer: Mapping[str, Any]) -> list[str]:
    size = trainer.get("input_size") or []
    xla = trainer.get("xla")
    xla_text = xla if isinstance(xla, str) else ("on" if xla else "off")
    return [
        f"- Model: `{trainer.get('model')}`, input {'x'.join(map(str, size)) or 'n/a'} "
        f"with {_fmt(trainer.get('channels'))} channel(s), "
        f"{len(trainer.get('label_names') or [])} classes",
        f"- Precision: **{trainer.get('precision')}** ({trainer.get('precision_reason')})",
        f"- XLA: {xla_text} ({trainer.get('xla_reason', 'n/a')}); strategy "
        f"{trainer.get('strategy')} on {_fmt(trainer.get('replicas'))} replica(s)",
        f"- Batch: {_fmt(trainer.get('batch_size'))} per replica, "
        f"{_fmt(trainer.get('global_batch_size'))} global; learning rate "
        f"{_fmt(trainer.get('learning_rate'))}; {_fmt(trainer.get('epochs'))} epochs",
        f"- Throughput: {_fmt(trainer.get('images_per_sec'), 5)} images/sec",
    ]


def _metric_lines(summary: RunSummary) -> list[str]:
    evaluation = summary.eval
    if not evaluation.present():
        return ["- Not evaluated."]
    verdict = "BLESSED" if evaluation.blessed else (
        "not blessed: " + "; ".join(evaluation.why_not_blessed or []))
    lines = [f"- Eval accuracy (TFMA): **{_fmt(evaluation.accuracy)}** — {verdict}"]
    if evaluation.baseline_accuracy is not None:
        lines.append(f"- Baseline (latest blessed model): {evaluation.baseline_accuracy}")
    recall = evaluation.recall_per_class or {}
    if recall:
        worst = min(recall, key=recall.get)
        lines.append(f"- Per-class recall: lowest {recall[worst]} (class {worst}); "
                     + ", ".join(f"{k}: {v}" for k, v in recall.items()))
    for variant, info in summary.tflite.items():
        if not isinstance(info, str):  # "skipped": why
            lines.append(f"- TF Lite {variant}: {_fmt(info.bytes)} bytes, top-1 agreement "
                         f"{_fmt(info.agreement)} with the SavedModel, published: "
                         f"{'yes' if info.published else 'no'}")
    return lines


def _distillation_lines(summary: RunSummary, distill: Mapping[str, Any]) -> list[str]:
    """Teacher and student side by side: the settings, accuracy on the same eval split,
    and the student's TF Lite variants beside the teacher's SavedModel."""
    lines = [
        "",
        "## Distillation",
        f"- Teacher: `{distill.get('teacher')}` ({distill.get('teacher_model')}, "
        f"{_fmt(distill.get('teacher_parameters'))} parameters, "
        f"{distill.get('teacher_precision')}); the student has "
        f"{_fmt(distill.get('student_parameters'))} parameters "
        f"({_fmt(distill.get('parameter_ratio'), 3)} of the teacher's)",
        f"- Temperature {_fmt(distill.get('temperature'))}, alpha "
        f"{_fmt(distill.get('alpha'))} (the weight of the true labels)",
        f"- Accuracy on the same {_fmt(distill.get('eval_examples'))} eval images: teacher "
        f"**{_fmt(distill.get('teacher_accuracy'))}**, student "
        f"**{_fmt(distill.get('student_accuracy'))}**",
        "",
        "| model | format | bytes | latency ms (one image) |",
        "|---|---|---:|---:|",
        f"| teacher | SavedModel | {_fmt(distill.get('teacher_saved_model_bytes'))} | "
        f"{_fmt(distill.get('teacher_latency_ms'), 3)} |",
    ]
    for variant, info in summary.tflite.items():
        if not isinstance(info, str):
            lines.append(f"| student | TF Lite {variant} | {_fmt(info.bytes)} | "
                         f"{_fmt(info.to_dict().get('latency_ms'), 3)} |")
    return lines


def render_model_card(summary: RunSummary, training: Mapping[str, Any]) -> str:
    """Markdown describing the model this run produced."""
    trainer = {**training, **summary.trainer.to_dict()}
    trainer.pop("history", None)
    pushed = summary.pushed
    labels = trainer.get("label_names") or []
    model_name = (summary.config.get("pusher") or {}).get("model_name", "model")
    serving = (f"TF Serving version {pushed.version} at `{pushed.path}`"
               if pushed.pushed else "not pushed to serving")
    logs = trainer.get("tensorboard_logs")
    sections = [
        f"# Model card: {model_name} (run {summary.run_id})",
        "",
        "## Intended use",
        f"Classifies single images into one of {len(labels)} classes "
        f"({', '.join(labels[:12])}{', ...' if len(labels) > 12 else ''}). Inputs are resized "
        "to the training size in the serving graph. Use on images like the training data; "
        "it was not evaluated on other distributions, and it is not meant for decisions "
        "about people.",
        "",
        "## Data",
        *_data_lines(summary),
        "",
        "## Training",
        *_training_lines(trainer),
        "",
        "## Metrics",
        *_metric_lines(summary),
        *(_distillation_lines(summary, trainer["distill"]) if trainer.get("distill") else []),
        "",
        "## Lineage",
        f"- Pipeline `{summary.pipeline}`, TFX run `{summary.run_id}`, "
        f"status {summary.status}",
        f"- Serving: {serving}",
        f"- TensorBoard: `tensorboard --logdir {logs}`" if logs else "- TensorBoard: n/a",
        f"- summary.json: `{summary.summary_path}`",
    ]
    return "\n".join(sections) + "\n"

"""The run report: one self-contained `runs/<run_id>/report.html` with its figures inlined
(data: URIs: it opens from disk with no server), and the same PNGs for MLflow.

What it shows, read after the run like everything MLflow records (summary.json, the
Trainer's training_summary.json, the Evaluator's TFMA output): training curves per epoch,
the confusion matrix and per-class recall, the autotune candidates with their measured
speed, the input-bound share, the TF Lite variants, the infra check's latency, and, when
the Trainer logged them, MLflow's system metrics.

    report = write_report(summary, training, system_series)
    report.path, report.figures["confusion_matrix.png"]
"""

from __future__ import annotations

import base64
import dataclasses
import html
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from components.run_summary import REPORT_FILE, RunSummary
from components.tracking import report_figures as figures

__all__ = ["ARTIFACT_DIR", "REPORT_FILE", "Report", "inlined_figures", "read_confusion_matrix",
           "write_report"]
ARTIFACT_DIR = "report"  # the MLflow artifact folder of the PNGs and report.html
SYSTEM_SERIES = ("system/cpu_utilization_percentage", "system/system_memory_usage_megabytes",
                 "system/gpu_0_utilization_percentage", "system/gpu_0_memory_usage_megabytes")
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem;
       color: #222; padding: 0 1rem; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2rem;
       border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5rem 0; }
td, th { border: 1px solid #ddd; padding: 0.2rem 0.6rem; text-align: left; }
figure { margin: 1rem 0; } img { max-width: 100%; height: auto; }
figcaption, .note { color: #555; font-size: 0.9rem; }
.warning { background: #fff4e5; border-left: 4px solid #dd8452; padding: 0.5rem 1rem; }
"""


@dataclasses.dataclass
class Report:
    """The written report.html and its figures (file name -> PNG bytes)."""

    path: Path
    figures: dict[str, bytes]


@dataclasses.dataclass
class _Part:
    title: str
    figure: str | None = None   # a key of the figures
    caption: str = ""
    body: str = ""               # HTML: tables, notes


def write_report(summary: RunSummary, training: Mapping[str, Any],
                 system_series: Mapping[str, Sequence[tuple[float, float]]] | None = None
                 ) -> Report:
    """Draws every figure the run has data for and writes report.html beside summary.json;
    sets `summary.report_path`."""
    pngs: dict[str, bytes] = {}
    parts = [_training(training, pngs), _evaluation(summary, training, pngs),
             _autotune(training, pngs), _input(training, pngs), _tflite(summary, pngs),
             _infra(summary, pngs), _system(system_series or {}, pngs)]
    path = Path(summary.summary_path).parent / REPORT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    summary.report_path = str(path)
    path.write_text(_page(summary, [part for part in parts if part], pngs))
    return Report(path, pngs)


def _training(training: Mapping[str, Any], pngs: dict[str, bytes]) -> _Part:
    history = training.get("history") or {}
    if not history:
        return _Part("Training", body=_note("The Trainer recorded no epochs in this run "
                                            "(cached or not run)."))
    pngs["training_curves.png"] = figures.training_curves(
        history, str(training.get("metric") or ("dice" if "dice" in training else "accuracy")))
    return _Part("Training", "training_curves.png",
                 f"Per epoch: {training.get('model')} at {training.get('precision')}, "
                 f"batch {training.get('global_batch_size')}, {len(history.get('loss') or [])} "
                 f"epochs.")


def read_confusion_matrix(evaluation_uri: str | None, classes: int) -> list[list[float]] | None:
    """The candidate's overall confusion matrix from TFMA's MultiClassConfusionMatrixPlot,
    or None when the evaluation has none."""
    if not evaluation_uri or not os.path.isdir(evaluation_uri) or classes < 1:
        return None
    try:
        import tensorflow_model_analysis as tfma

        plots = list(tfma.load_plots(evaluation_uri))
    except Exception:  # no plots written: the report says so
        return None
    for plot in plots:
        if plot.slice_key.single_slice_keys:
            continue
        for entry in plot.plot_keys_and_values:
            if entry.key.model_name == "baseline":
                continue
            matrices = entry.value.multi_class_confusion_matrix_at_thresholds.matrices
            if matrices:
                matrix = [[0.0] * classes for _ in range(classes)]
                for cell in matrices[0].entries:
                    if cell.actual_class_id < classes and cell.predicted_class_id < classes:
                        matrix[cell.actual_class_id][cell.predicted_class_id] += \
                            cell.num_weighted_examples
                return matrix
    return None


def _evaluation(summary: RunSummary, training: Mapping[str, Any],
                pngs: dict[str, bytes]) -> _Part:
    labels = [str(name) for name in training.get("label_names")
              or summary.trainer.to_dict().get("label_names") or []]
    matrix = read_confusion_matrix(summary.eval.evaluation_uri, len(labels))
    if not summary.eval.present():
        return _Part("Evaluation", body=_note("No Evaluator output in this run."))
    metric, value = summary.eval.headline()
    verdict = "blessed" if summary.eval.blessed else "not blessed: " + "; ".join(
        summary.eval.why_not_blessed or [])
    body = _note(f"{metric} {value} on the eval split; {verdict}.")
    if matrix is None:
        body += _note("No confusion matrix (a segmentation model, or no TFMA plot).")
        sliced = summary.eval.recall_per_class or {}
        if not sliced:
            return _Part("Evaluation", body=body)
        pngs["per_class_recall.png"] = figures.per_class_recall(
            {_label(key, labels): value for key, value in sliced.items()})
        return _Part("Evaluation", "per_class_recall.png",
                     "Per-class recall: TFMA's accuracy on each label's slice.", body)
    pngs["confusion_matrix.png"] = figures.confusion_matrix(matrix, labels)
    recall = {label: (row[i] / sum(row) if sum(row) else 0.0)
              for i, (label, row) in enumerate(zip(labels, matrix, strict=True))}
    pngs["per_class_recall.png"] = figures.per_class_recall(recall)
    return _Part("Evaluation", body=body + _img(
        "confusion_matrix.png", pngs, "TFMA's MultiClassConfusionMatrixPlot of the candidate.")
        + _img("per_class_recall.png", pngs,
               "Per-class recall: the diagonal over each true class's examples."))


def _label(key: str, labels: list[str]) -> str:
    """A class id's name (TFMA slices by the label's index)."""
    return labels[int(key)] if key.isdigit() and int(key) < len(labels) else key


def _autotune(training: Mapping[str, Any], pngs: dict[str, bytes]) -> _Part:
    tuning = training.get("autotune") or {}
    rows, choice = tuning.get("table") or [], tuning.get("choice") or {}
    reason = _note(f"Autotune: {tuning.get('status', 'not recorded')}. Precision "
                   f"{training.get('precision')}: {training.get('precision_reason', '')}; XLA "
                   f"{'on' if training.get('xla') else 'off'}: {training.get('xla_reason')}.")
    if not rows:
        return _Part("Precision and XLA", body=reason + _note(
            f"Candidates: {', '.join(tuning.get('candidates') or []) or 'none'}; nothing "
            f"timed."))
    pngs["autotune.png"] = figures.autotune(rows, choice)
    table = _table(["candidate", "batch", "images/s", "ms/step", "note"], [
        [f"{r.get('precision')} xla {'on' if r.get('xla') else 'off'}", r.get("batch_size"),
         _num(r.get("images_per_sec")), _num(r.get("step_ms"), 2), r.get("note") or ""]
        for r in rows])
    return _Part("Precision and XLA", "autotune.png",
                 f"Probe: {tuning.get('probe_seconds')} s.", reason + table)


def _input(training: Mapping[str, Any], pngs: dict[str, bytes]) -> _Part:
    record = training.get("input_bound") or {}
    if record.get("wait_share") is None:
        return _Part("Input pipeline", body=_note("Input waits not recorded in this run."))
    pngs["input_bound.png"] = figures.input_bound(record)
    sentence = (f'<p class="warning">{html.escape(record["advice"])}</p>' if record.get("advice")
                else _note(f"{100 * record['wait_share']:.0f} % of the step waited for input "
                           f"(input-bound from {100 * record['threshold']:.0f} %)."))
    return _Part("Input pipeline", "input_bound.png",
                 f"Model alone: {record.get('model_steps_source')}.", sentence)


def _tflite(summary: RunSummary, pngs: dict[str, bytes]) -> _Part:
    variants = {name: info.to_dict() for name, info in summary.tflite.items()
                if not isinstance(info, str)}
    skipped = [f"{name}: {info}" for name, info in summary.tflite.items() if isinstance(info, str)]
    if not variants:
        return _Part("TF Lite", body=_note("; ".join(skipped) or "No TF Lite variants."))
    pngs["tflite.png"] = figures.tflite(variants)
    table = _table(["variant", "bytes", "agreement", "accuracy", "latency ms", "published"], [
        [name, _num(v.get("bytes")), _num(v.get("agreement"), 4), _num(v.get("accuracy"), 4),
         _num(v.get("latency_ms"), 3), v.get("path") or v.get("reason") or "no"]
        for name, v in variants.items()])
    return _Part("TF Lite", "tflite.png", "Agreement: top-1 against the SavedModel.", table)


def _infra(summary: RunSummary, pngs: dict[str, bytes]) -> _Part:
    infra = summary.infra
    if infra.p50_ms is None or infra.p99_ms is None:
        return _Part("Infra check", body=_note(infra.reason or "Not checked in this run."))
    pngs["infra_latency.png"] = figures.infra_latency(infra.p50_ms, infra.p99_ms,
                                                      infra.load_seconds)
    verdict = "blessed" if infra.blessed else f"not blessed: {infra.reason}"
    return _Part("Infra check", "infra_latency.png",
                 f"{infra.requests} requests to the {infra.server}; {verdict}; peak RSS "
                 f"{_num(infra.peak_rss_mb)} MiB of {infra.memory_limit}.")


def _system(series: Mapping[str, Sequence[tuple[float, float]]],
            pngs: dict[str, bytes]) -> _Part | None:
    drawn = {name: points for name, points in series.items() if len(points) > 1}
    if not drawn:
        return None
    pngs["system_metrics.png"] = figures.system_metrics(drawn)
    return _Part("System metrics", "system_metrics.png",
                 "Sampled by MLflow's SystemMetricsMonitor while the Trainer ran.")


def _page(summary: RunSummary, parts: list[_Part], pngs: dict[str, bytes]) -> str:
    trainer = summary.trainer
    mlflow = summary.mlflow
    facts = [["run", f"{summary.run_id} ({summary.status}, {_num(summary.wall_seconds, 1)} s)"],
             ["pipeline", summary.pipeline], ["model", trainer.model],
             ["precision", trainer.precision], ["images/s", _num(trainer.images_per_sec)],
             ["eval", "{} {}, {}".format(*summary.eval.headline(), "blessed" if
                                          summary.eval.blessed else "not blessed")
              if summary.eval.present() else "-"],
             ["pushed", summary.pushed_version or "no"],
             ["MLflow run", f"{mlflow.run_id} in {mlflow.experiment}" if mlflow.run_id else "-"]]
    if summary.error:
        facts.append(["error", summary.error])
    sections = "".join(
        f"<section><h2>{html.escape(part.title)}</h2>{part.body}"
        + (_img(part.figure, pngs, part.caption) if part.figure else "") + "</section>"
        for part in parts)
    title = html.escape(f"mptfx run {summary.run_id}")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<link rel="icon" href="data:,"><title>{title}</title><style>{_STYLE}</style>'
            f"</head><body><h1>{title}</h1>{_table(['', ''], facts, header=False)}"
            f"{sections}</body></html>\n")


def inlined_figures(page: str) -> dict[str, bytes]:
    """The PNGs a report.html holds, by file name (what its MLflow run holds under
    `report/`)."""
    return {name: base64.b64decode(data) for data, name in re.findall(
        r'src="data:image/png;base64,([A-Za-z0-9+/=]+)" alt="[^"]*" data-file="([^"]+)"',
        page)}


def _img(name: str, pngs: dict[str, bytes], caption: str) -> str:
    data = base64.b64encode(pngs[name]).decode("ascii")
    alt = html.escape(name.removesuffix(".png").replace("_", " "))
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{alt}" '
            f'data-file="{html.escape(name)}"><figcaption>{html.escape(caption)}</figcaption>'
            f"</figure>")


def _table(head: list[str], rows: list[list[Any]], header: bool = True) -> str:
    cells = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                    for row in rows)
    top = "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>" if header else ""
    return f"<table>{top}{cells}</table>"


def _note(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


def _num(value: Any, digits: int = 0) -> str:
    return "-" if not isinstance(value, (int, float)) else f"{value:,.{digits}f}"

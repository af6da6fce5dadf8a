"""Side-by-side comparison of pipeline runs recorded in MLflow: a table and a PNG.

    rows = load_rows(client, run_refs=[], experiment="mptfx-digits", last=5)
    print(format_rows(rows, "table"))
    plot_runs(rows, Path("workspace/compare/compare.png"))

Rows are plain dicts (one per run, the columns below), so the formatting and the choice of
the best value per column are plain functions of them.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.run_summary import REPORT_FILE
from components.tracking.content import SUMMARY_PATH_TAG
from components.tracking.reader import TFX_RUN_ID_TAG, RunRecord, StoreReader
from components.tracking.registry import REGISTERED_MODEL_TAG, REGISTERED_VERSION_TAG

CURVE_METRICS = ("val_accuracy", "loss")
FORMATS = ("table", "csv", "json", "markdown")
_RUN_ID = re.compile(r"^[0-9a-f]{32}$")


@dataclass(frozen=True)
class Column:
    """One column of the comparison: its key in a row, header, and which value is best."""

    key: str
    header: str
    better: str | None = None  # "max", "min" or None (not ranked)
    digits: int = 0


COLUMNS = (
    Column("run", "run"),
    Column("precision", "precision"),
    Column("xla", "xla"),
    Column("strategy", "strategy"),
    Column("replicas", "replicas"),
    Column("global_batch_size", "batch"),
    Column("epochs", "epochs"),
    Column("images_per_sec", "images/s", "max", 0),
    Column("accuracy", "accuracy", "max", 4),
    Column("val_accuracy", "val_acc", "max", 4),
    Column("saved_model_mb", "SavedModel MB", "min", 2),
    Column("tflite_kb", "TFLite KB", "min", 1),
    Column("wall_seconds", "wall s", "min", 1),
    Column("blessed", "blessed"),
    Column("registered", "registered"),
    Column("alias", "alias now"),
)


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _integer(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None else None


def _smallest_tflite(metrics: dict[str, float]) -> tuple[float | None, str | None]:
    sizes = {key[len("tflite/"):-len("_bytes")]: value for key, value in metrics.items()
             if key.startswith("tflite/") and key.endswith("_bytes")
             and metrics.get(key.replace("_bytes", "_published"), 1.0) > 0}
    if not sizes:
        return None, None
    variant = min(sizes, key=sizes.get)
    return sizes[variant] / 1024, variant


def row_from_run(run: RunRecord) -> dict[str, Any]:
    """One comparison row from an MLflow run that `mptfx run` recorded."""
    params, metrics, tags = run.params, run.metrics, run.tags
    saved_model = metrics.get("size/saved_model_bytes")
    tflite_kb, tflite_variant = _smallest_tflite(metrics)
    blessed = tags.get("mptfx.blessed")
    return {
        "run": run.run_name or tags.get(TFX_RUN_ID_TAG) or run.run_id[:8],
        "mlflow_run_id": run.run_id,
        "status": run.status,
        "precision": params.get("precision"),
        "xla": params.get("xla"),
        "strategy": params.get("strategy"),
        "replicas": _integer(params.get("replicas")),
        "global_batch_size": _integer(params.get("global_batch_size")),
        "epochs": _integer(params.get("epochs")),
        "images_per_sec": metrics.get("train/images_per_sec"),
        "accuracy": metrics.get("eval/accuracy"),
        "val_accuracy": metrics.get("val_accuracy"),
        "saved_model_mb": saved_model / 1e6 if saved_model is not None else None,
        "tflite_kb": tflite_kb,
        "tflite_variant": tflite_variant,
        "wall_seconds": metrics.get("seconds/wall"),
        "blessed": None if blessed is None else blessed == "true",
        "registered": (f"{tags[REGISTERED_MODEL_TAG]} v{tags[REGISTERED_VERSION_TAG]}"
                       if REGISTERED_VERSION_TAG in tags else None),
        "alias": None,  # filled in by load_rows from the registry: aliases move
        "model": params.get("model"),
        "learning_rate": _number(params.get("learning_rate")),
        "curves": {},
    }


def best_runs(rows: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    """Column key → the `run` names holding the best value. A column is ranked only when at
    least two runs have a value and the values differ (marking every row says nothing)."""
    best: dict[str, list[str]] = {}
    for column in COLUMNS:
        if column.better is None:
            continue
        values = [(row["run"], row[column.key]) for row in rows if row.get(column.key) is not None]
        distinct = {round(value, 9) for _, value in values}
        if len(values) < 2 or len(distinct) < 2:
            continue
        pick: Callable = max if column.better == "max" else min
        target = pick(value for _, value in values)
        best[column.key] = [name for name, value in values if value == target]
    return best


def _cell(row: dict[str, Any], column: Column) -> str:
    value = row.get(column.key)
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.{column.digits}f}" if column.digits == 0 else f"{value:.{column.digits}f}"
    return str(value)


def format_table(rows: Sequence[dict[str, Any]], best: dict[str, list[str]]) -> str:
    """An aligned terminal table; the best value of each ranked column carries a `*`; then
    each run's report page, when any run has one."""
    header = [column.header for column in COLUMNS]
    body = []
    for row in rows:
        cells = []
        for column in COLUMNS:
            mark = "*" if row["run"] in best.get(column.key, []) else " "
            cells.append(_cell(row, column) + mark if column.better else _cell(row, column))
        body.append(cells)
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(COLUMNS))]
    numeric = {i for i, column in enumerate(COLUMNS) if column.better or column.key in (
        "replicas", "global_batch_size", "epochs")}

    def line(cells: list[str]) -> str:
        return "  ".join(cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
                         for i, cell in enumerate(cells)).rstrip()

    lines = [line(header), line(["-" * w for w in widths])] + [line(cells) for cells in body]
    if best:
        lines.append("* best in column")
    return "\n".join(lines + _report_lines(rows))


def _report_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Under the table, each run's report page (when any run has one)."""
    if not any(row.get("report") for row in rows):
        return []
    width = max(len(row["run"]) for row in rows)
    return ["", "reports:"] + [f"  {row['run']:<{width}}  {row.get('report') or '-'}"
                               for row in rows]


def format_markdown(rows: Sequence[dict[str, Any]], best: dict[str, list[str]]) -> str:
    """A GitHub markdown table; the best value of each ranked column is bold; a run's name
    links its report page when it has one."""
    lines = ["| " + " | ".join(column.header for column in COLUMNS) + " |",
             "|" + "|".join("---:" if column.better else "---" for column in COLUMNS) + "|"]
    for row in rows:
        cells = [f"**{_cell(row, c)}**" if row["run"] in best.get(c.key, []) else _cell(row, c)
                 for c in COLUMNS]
        if row.get("report"):  # the run's name links its report page
            cells[0] = f"[{cells[0]}]({row['report']})"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in row.items() if key != "curves"}


def format_csv(rows: Sequence[dict[str, Any]]) -> str:
    """Every row field as CSV (unrounded numbers, no marks), for scripts."""
    if not rows:
        return ""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(_plain(rows[0])), lineterminator="\n")
    writer.writeheader()
    writer.writerows(_plain(row) for row in rows)
    return buffer.getvalue().rstrip("\n")


def format_json(rows: Sequence[dict[str, Any]], best: dict[str, list[str]],
                extra: dict[str, Any]) -> str:
    """{"runs": [...], "best": {column: [run, ...]}, ...extra} as indented JSON."""
    return json.dumps({**extra, "runs": [_plain(row) for row in rows], "best": best},
                      indent=2, default=str)


def format_rows(rows: Sequence[dict[str, Any]], fmt: str, extra: dict | None = None) -> str:
    """The comparison in one of FORMATS."""
    best = best_runs(rows)
    if fmt == "csv":
        return format_csv(rows)
    if fmt == "json":
        return format_json(rows, best, extra or {})
    if fmt == "markdown":
        return format_markdown(rows, best)
    return format_table(rows, best)


def resolve_runs(reader: StoreReader, run_refs: Sequence[str], experiment: str | None,
                 last: int) -> list[RunRecord]:
    """MLflow runs to compare, oldest first: the given refs (MLflow run ids or TFX run ids),
    else the `last` runs of `experiment` (default: the experiment of the newest mptfx run).

    Raises LookupError naming what was not found.
    """
    if run_refs:
        return [_find_run(reader, ref) for ref in run_refs]
    if experiment:
        found = reader.experiment_id(experiment)
        if found is None:
            names = ", ".join(reader.experiment_names()) or "none"
            raise LookupError(f"no MLflow experiment {experiment!r} (experiments: {names})")
        experiment_ids = [found]
    else:
        newest = reader.newest_mptfx_runs(None, 1)
        if not newest:
            raise LookupError("no mptfx runs recorded in this MLflow store yet")
        experiment_ids = [newest[0].experiment_id]
    return list(reversed(reader.newest_mptfx_runs(experiment_ids, last)))


def _find_run(reader: StoreReader, ref: str) -> RunRecord:
    found = reader.run(ref) if _RUN_ID.match(ref) else None
    found = found or reader.run_by_tfx_id(ref)
    if found is None:
        raise LookupError(f"no MLflow run {ref!r} (give an MLflow run id or a TFX run id)")
    return found


def report_of(run: RunRecord, workspace: Path) -> str | None:
    """The run's report page as a file:// URL, when it exists: `report.html` beside its
    summary.json (the folder its summary_path tag names), else in
    `<workspace>/runs/<TFX run id>/`."""
    folders = []
    if run.tags.get(SUMMARY_PATH_TAG):
        folders.append(Path(run.tags[SUMMARY_PATH_TAG]).parent)
    if run.tags.get(TFX_RUN_ID_TAG):
        folders.append(workspace / "runs" / run.tags[TFX_RUN_ID_TAG])
    for folder in folders:
        page = folder / REPORT_FILE
        if page.is_file():
            return page.resolve().as_uri()
    return None


def load_rows(reader: StoreReader, runs: Sequence[RunRecord],
              workspace: Path) -> list[dict[str, Any]]:
    """Comparison rows for `runs`, each with its per-epoch curves (CURVE_METRICS), the
    aliases its model version holds now and its report page (`report`, or None)."""
    rows = []
    models = {run.tags.get(REGISTERED_MODEL_TAG) for run in runs} - {None}
    aliases: dict[str, list[str]] = {}
    for name in sorted(models):
        for alias, version in reader.model_aliases(name).items():
            aliases.setdefault(f"{name} v{version}", []).append(alias)
    for run in runs:
        row = row_from_run(run)
        row["alias"] = ",".join(sorted(aliases.get(row["registered"], []))) or None
        row["report"] = report_of(run, workspace)
        for key in CURVE_METRICS:
            row["curves"][key] = reader.metric_history(run.run_id, key)
        rows.append(row)
    return rows


def _label(row: dict[str, Any]) -> str:
    return f"{row['run']} ({row.get('precision')}, xla {row.get('xla')})"


def plot_runs(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Write a PNG: training curves per run, and throughput against accuracy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    path.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(1, 3, figsize=(17, 5))
    for key, axis in zip(CURVE_METRICS, axes[:2], strict=True):
        for row in rows:
            points = row["curves"].get(key) or []
            if points:
                axis.plot([s for s, _ in points], [v for _, v in points], marker=".",
                          label=_label(row))
        axis.set(title=f"{key} per epoch", xlabel="epoch", ylabel=key)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    scatter = axes[2]
    for row in rows:
        speed, accuracy = row.get("images_per_sec"), row.get("accuracy")
        if accuracy is None:
            accuracy = row.get("val_accuracy")
        if speed is not None and accuracy is not None:
            scatter.scatter(speed, accuracy, s=40)
            scatter.annotate(_label(row), (speed, accuracy), fontsize=7,
                             xytext=(4, 4), textcoords="offset points")
    scatter.set(title="throughput vs accuracy", xlabel="training images/sec",
                ylabel="eval accuracy")
    scatter.margins(x=0.35, y=0.2)  # room for the labels next to the points
    scatter.set_xlim(left=0)
    scatter.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path

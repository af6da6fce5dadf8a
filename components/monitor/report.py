"""The monitor's report: report.md for people, report.json for programs, one PNG.

    paths = write_report(judgement, Path("workspace/monitor/20261202T030000Z"))
    paths["markdown"], paths["json"], paths["plot"]

The plot shows, for the version whose traffic moved furthest, the distributions of up to
four features that moved most: the eval-split reference against the served window, read
from the same TFDV statistics the comparators measured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from components.monitor.compare import DRIFT, SKEW
from components.monitor.features import CATEGORICAL_FEATURES
from components.monitor.judge import Judgement, VersionVerdict

REPORT_FILE = "report.md"
REPORT_JSON = "report.json"
PLOT_FILE = "distributions.png"
PLOTTED_FEATURES = 4


def to_dict(judgement: Judgement) -> dict[str, Any]:
    """The judgement as report.json holds it."""
    def version(v: VersionVerdict) -> dict[str, Any]:
        entry: dict[str, Any] = {"version": v.version, "status": v.status, "images": v.images,
                                 "moved": v.moved()}
        if v.reason:
            entry["reason"] = v.reason
        if v.unreadable_logs:
            entry["unreadable_logs"] = v.unreadable_logs
        if v.reference is not None:
            entry["reference"] = {"path": v.reference.path, "images": v.reference.counts}
        if v.comparison is not None:
            entry["measurements"] = {
                kind: {feature: {"measure": m.measure, "value": m.value,
                                 "threshold": m.threshold, "moved": m.moved}
                       for feature, m in v.comparison.of(kind).items()}
                for kind in (DRIFT, SKEW)}
        return entry

    return {"model": judgement.model_name, "since": judgement.since.isoformat(),
            "until": judgement.until.isoformat(), "log_dir": str(judgement.log_dir),
            "files": len(judgement.files), "problems": judgement.problems,
            "drifted": judgement.drifted, "moved": judgement.moved(),
            "versions": [version(v) for v in judgement.verdicts]}


def _markdown(judgement: Judgement, plot: Path | None) -> str:
    lines = [f"# Served traffic of {judgement.model_name}: "
             f"{'DRIFT' if judgement.drifted else 'no drift'}", "",
             f"Window {judgement.since:%Y-%m-%d %H:%M} to {judgement.until:%Y-%m-%d %H:%M} UTC, "
             f"{len(judgement.files)} log files in {judgement.log_dir}, "
             f"{judgement.logged_images} logged images.", ""]
    for problem in judgement.problems:
        lines.append(f"- skipped: {problem}")
    for verdict in judgement.verdicts:
        lines += ["", f"## Version {verdict.version}: {verdict.status}", ""]
        if verdict.reason:
            lines += [verdict.reason, ""]
        if verdict.comparison is None:
            continue
        drift, skew = verdict.comparison.of(DRIFT), verdict.comparison.of(SKEW)
        counts = verdict.reference.counts
        lines += [f"{verdict.images} logged images; reference: {counts.get('eval')} eval and "
                  f"{counts.get('train')} train images ({verdict.reference.path})", "",
                  "| feature | drift (vs eval split) | skew (vs training data) | measure |",
                  "|---|---|---|---|"]
        for feature in verdict.comparison.furthest(len(drift) or len(skew)):
            cells = []
            for measured in (drift.get(feature), skew.get(feature)):
                if measured is None:
                    cells.append("-")
                else:
                    mark = " **moved**" if measured.moved else ""
                    cells.append(f"{measured.value:.3f} (threshold {measured.threshold:g}){mark}")
            measure = (drift.get(feature) or skew.get(feature)).measure
            lines.append(f"| {feature} | {cells[0]} | {cells[1]} | {measure} |")
    if plot is not None:
        lines += ["", f"![distributions that moved most]({plot.name})"]
    return "\n".join(lines) + "\n"


def _distribution(statistics: Any, feature: str) -> tuple[list[Any], list[float]]:
    """(bucket labels or edges, shares) of one feature in a DatasetFeatureStatisticsList."""
    import tensorflow_data_validation as tfdv
    from tensorflow_metadata.proto.v0 import statistics_pb2

    stats = tfdv.get_feature_stats(statistics.datasets[0], tfdv.FeaturePath([feature]))
    if feature in CATEGORICAL_FEATURES:
        values = [(v.value, v.frequency) for v in stats.string_stats.top_values]
        total = sum(f for _, f in values) or 1.0
        return [v for v, _ in values], [f / total for _, f in values]
    standard = statistics_pb2.Histogram.HistogramType.STANDARD
    [histogram] = [h for h in stats.num_stats.histograms if h.type == standard] or [None]
    if histogram is None:
        return [], []
    total = sum(b.sample_count for b in histogram.buckets) or 1.0
    edges = [(b.low_value, b.high_value) for b in histogram.buckets]
    return edges, [b.sample_count / total for b in histogram.buckets]


_SHORT_MEASURES = {"jensen_shannon_divergence": "JSD", "l_infinity": "L-inf"}


def _draw_numeric(axis: Any, series: list[tuple[str, str, list, list[float]]]) -> None:
    """Histograms as bars; a bucket of one value (a constant such as the height of every
    image) gets a visible width of 3 % of the axis."""
    edges = [edge for _, _, buckets, _ in series for bucket in buckets for edge in bucket]
    span = (max(edges) - min(edges)) if edges else 0.0
    narrowest = span * 0.03 if span else 1.0
    for label, color, buckets, shares in series:
        for index, ((low, high), share) in enumerate(zip(buckets, shares, strict=True)):
            width = max(high - low, narrowest)
            axis.bar((low + high) / 2, share, width=width, alpha=0.5, color=color,
                     label=label if index == 0 else None)


def _plot(verdict: VersionVerdict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display in a CronJob's pod
    from matplotlib import pyplot as plt

    features = verdict.comparison.furthest(PLOTTED_FEATURES)
    figure, axes = plt.subplots(1, len(features), figsize=(4 * len(features), 3.2),
                                squeeze=False)
    drift = verdict.comparison.of(DRIFT)
    for axis, feature in zip(axes[0], features, strict=True):
        series = [(label, color, *_distribution(statistics, feature))
                  for statistics, label, color in (
                      (verdict.reference.eval_statistics, "eval split", "tab:blue"),
                      (verdict.served_statistics, "served", "tab:orange"))]
        if feature in CATEGORICAL_FEATURES:
            for label, color, values, shares in series:
                axis.bar([str(v) for v in values], shares, alpha=0.5, label=label, color=color)
        else:
            _draw_numeric(axis, series)
        measured = drift.get(feature)
        axis.set_title(feature if measured is None else
                       f"{feature}: drift {_SHORT_MEASURES.get(measured.measure, '')} "
                       f"{measured.value:.2f}", fontsize=9)
        axis.set_ylabel("share")
        axis.legend(fontsize=7)
    figure.suptitle(f"version {verdict.version}: eval split vs served traffic", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def write_report(judgement: Judgement, folder: Path) -> dict[str, Path]:
    """Write report.md, report.json and (when a version was compared) the PNG."""
    folder.mkdir(parents=True, exist_ok=True)
    compared = [v for v in judgement.verdicts if v.comparison is not None]
    plot = None
    if compared:
        furthest = max(compared, key=lambda v: max((m.ratio for m in v.comparison.measurements),
                                                   default=0.0))
        plot = _plot(furthest, folder / PLOT_FILE)
    paths = {"markdown": folder / REPORT_FILE, "json": folder / REPORT_JSON}
    paths["markdown"].write_text(_markdown(judgement, plot))
    paths["json"].write_text(json.dumps(to_dict(judgement), indent=2))
    if plot is not None:
        paths["plot"] = plot
    return paths

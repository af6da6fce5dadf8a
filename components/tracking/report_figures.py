"""The run report's figures, each a PNG (matplotlib's Agg canvas, no pyplot state), from
plain values: the report (report.py) reads the run and calls these.

    png = training_curves({"loss": [0.9, 0.5], "val_loss": [1.0, 0.6], ...}, "accuracy")
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

_BLUE, _ORANGE, _GREY, _RED = "#4c72b0", "#dd8452", "#8c8c8c", "#c44e52"
# Title, the series drawn (train first, then validation) and the y axis, per panel.
_CURVES = (
    ("Loss", ("loss", "val_loss"), "loss"),
    ("{metric}", ("{metric}", "val_{metric}"), "{metric}"),
    ("Learning rate", ("learning_rate",), "learning rate"),
    ("Loss scale", ("loss_scale",), "loss scale"),
    ("Gradient norm", ("gradient_norm",), "global L2 norm"),
    ("Training throughput", ("images_per_sec",), "images / s"),
)


def _figure(width: float, height: float, panels: tuple[int, int] = (1, 1)) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    axes = figure.subplots(*panels, squeeze=False)
    return figure, axes


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _epoch_axis(axis: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_xlabel("epoch")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))


def _empty(axis: Any, text: str) -> None:
    axis.text(0.5, 0.5, text, ha="center", va="center", color=_GREY, wrap=True,
              transform=axis.transAxes)
    axis.set_xticks([])
    axis.set_yticks([])


def training_curves(history: Mapping[str, Sequence[Any]], metric: str) -> bytes:
    """Six panels per epoch: loss, the headline metric, learning rate, loss scale,
    gradient norm, images/s; a series the run did not record says so in its panel."""
    figure, axes = _figure(12, 6.5, (2, 3))
    for axis, (title, keys, label) in zip(axes.flat, _CURVES, strict=True):
        axis.set_title(title.format(metric=metric.capitalize()))
        drawn = False
        for key, color in zip((k.format(metric=metric) for k in keys), (_BLUE, _ORANGE),
                              strict=False):
            points = [(epoch + 1, float(v)) for epoch, v in enumerate(history.get(key) or [])
                      if isinstance(v, (int, float))]
            if points:
                epochs, values = zip(*points, strict=True)
                axis.plot(epochs, values, marker="o", color=color,
                          label="validation" if key.startswith("val_") else "train")
                drawn = True
        if not drawn:
            _empty(axis, "not recorded" + (" (no loss scaling at this precision)"
                                           if keys[0] == "loss_scale" else ""))
            continue
        _epoch_axis(axis)
        axis.set_ylabel(label.format(metric=metric))
        if len(keys) > 1:
            axis.legend()
    return _png(figure)


def confusion_matrix(matrix: Sequence[Sequence[float]], labels: Sequence[str]) -> bytes:
    """Counts of the eval split's examples, true class by row, predicted by column."""
    figure, axes = _figure(max(5.0, 0.55 * len(labels) + 2.5), max(4.5, 0.5 * len(labels) + 2))
    axis = axes[0][0]
    image = axis.imshow(matrix, cmap="Blues")
    figure.colorbar(image, ax=axis, label="examples")
    ticks = range(len(labels))
    axis.set_xticks(ticks, labels, rotation=45, ha="right")
    axis.set_yticks(ticks, labels)
    axis.set_xlabel("predicted class")
    axis.set_ylabel("true class")
    axis.set_title("Confusion matrix (eval split)")
    peak = max((max(row) for row in matrix), default=0) or 1
    for i, row in enumerate(matrix):
        for j, count in enumerate(row):
            if count:
                axis.text(j, i, f"{count:g}", ha="center", va="center", fontsize=8,
                          color="white" if count > peak / 2 else "black")
    return _png(figure)


def per_class_recall(recall: Mapping[str, float]) -> bytes:
    """One bar per class: the share of its eval examples predicted as it."""
    figure, axes = _figure(max(6.0, 0.5 * len(recall) + 2), 3.6)
    axis = axes[0][0]
    names, values = list(recall), [float(v) for v in recall.values()]
    axis.bar(names, values, color=[_BLUE if v >= 0.5 else _RED for v in values])
    axis.set_ylim(0, 1.05)
    axis.set_ylabel("recall")
    axis.set_title("Per-class recall (eval split)")
    axis.tick_params(axis="x", rotation=45)
    return _png(figure)


def autotune(rows: Sequence[Mapping[str, Any]], choice: Mapping[str, Any]) -> bytes:
    """The precision/XLA candidates the probe timed, the chosen one highlighted; an unsafe
    cell is a labelled gap."""
    figure, axes = _figure(7, 3.2)
    axis = axes[0][0]
    labels, values, colors = [], [], []
    for row in rows:
        labels.append(f"{row.get('precision')}\nxla {'on' if row.get('xla') else 'off'}")
        values.append(float(row.get("images_per_sec") or 0.0))
        chosen = (row.get("precision"), bool(row.get("xla"))) == (
            choice.get("precision"), bool(choice.get("xla")))
        colors.append(_ORANGE if chosen else _BLUE)
    bars = axis.bar(labels, values, color=colors)
    for bar, row in zip(bars, rows, strict=True):
        axis.annotate("unsafe" if not row.get("images_per_sec") else
                      f"{row['images_per_sec']:,.0f}", (bar.get_x() + bar.get_width() / 2,
                                                        bar.get_height()),
                      ha="center", va="bottom", fontsize=9)
    axis.set_ylabel("images / s (probe)")
    axis.set_title("Autotune: measured candidates (chosen in orange)")
    return _png(figure)


def input_bound(record: Mapping[str, Any]) -> bytes:
    """Per epoch, the share of the step spent waiting for input (the threshold dashed);
    beside it the model alone on cached batches against the training's steps/s."""
    figure, axes = _figure(10, 3.4, (1, 2))
    shares = record.get("wait_share_per_epoch") or []
    left, right = axes[0]
    left.bar(range(1, len(shares) + 1), [100 * s for s in shares], color=_BLUE)
    left.axhline(100 * float(record.get("threshold") or 0), color=_RED, linestyle="--",
                 label="input-bound above")
    left.set_ylim(0, 100)
    _epoch_axis(left)
    left.set_ylabel("% of step time waiting for input")
    left.set_title("Input wait per epoch")
    left.legend()
    speeds = {"training": record.get("steps_per_sec"),
              "model alone\n(cached batch)": record.get("model_steps_per_sec")}
    known = {k: float(v) for k, v in speeds.items() if v}
    if known:
        right.bar(list(known), list(known.values()), color=[_BLUE, _ORANGE][:len(known)])
        right.set_ylabel("steps / s")
        right.set_title("Steps per second")
    else:
        _empty(right, "steps/s not measured")
    return _png(figure)


def tflite(variants: Mapping[str, Mapping[str, Any]]) -> bytes:
    """Each TF Lite variant's size, top-1 agreement with the SavedModel and latency."""
    figure, axes = _figure(11, 3.2, (1, 3))
    names = list(variants)
    for axis, (key, label, scale) in zip(axes[0], (
            ("bytes", "size (MB)", 1e-6), ("agreement", "top-1 agreement", 1.0),
            ("latency_ms", "latency per image (ms)", 1.0)), strict=True):
        values = [float(variants[n].get(key) or 0.0) * scale for n in names]
        axis.bar(names, values, color=[_BLUE if variants[n].get("published") else _GREY
                                       for n in names])
        axis.set_title(label)
    axes[0][1].set_ylim(0, 1.05)
    figure.suptitle("TF Lite variants (grey: not published)")
    return _png(figure)


def infra_latency(p50_ms: float, p99_ms: float, load_seconds: float | None) -> bytes:
    """The infra check's request latency, p50 and p99."""
    figure, axes = _figure(5, 3)
    axis = axes[0][0]
    axis.bar(["p50", "p99"], [p50_ms, p99_ms], color=[_BLUE, _ORANGE])
    axis.set_ylabel("ms per request")
    loaded = f"; model loaded in {load_seconds:.2f} s" if load_seconds is not None else ""
    axis.set_title(f"Infra check latency{loaded}", fontsize=10)
    return _png(figure)


def system_metrics(series: Mapping[str, Sequence[tuple[float, float]]]) -> bytes:
    """MLflow's system metrics over the Trainer's time: one panel per metric."""
    figure, axes = _figure(10, 3.2, (1, max(1, len(series))))
    for axis, (name, points) in zip(axes[0], series.items(), strict=False):
        seconds, values = zip(*points, strict=True)
        axis.plot(seconds, values, marker=".", color=_BLUE)
        axis.set_title(name.removeprefix("system/"), fontsize=9)
        axis.set_xlabel("seconds since the Trainer's first sample")
        if name.endswith("_percentage"):
            axis.set_ylim(0, 105)
    return _png(figure)

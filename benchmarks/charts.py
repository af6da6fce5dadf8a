"""PNG charts of the throughput matrix: throughput and peak memory by precision and XLA.

One panel per model (models differ by orders of magnitude), precisions on the x axis, one
bar per XLA setting. Failed or timed-out cells are left out of the bars and named in the
panel.

Example:

    write_charts(json.load(open("workspace/bench/results.json")), Path("workspace/bench"))
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

THROUGHPUT_PNG = "throughput.png"
MEMORY_PNG = "memory.png"
_XLA_COLORS = {False: "#4c72b0", True: "#dd8452"}


def write_charts(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Writes throughput.png and memory.png when the run has throughput cells."""
    rows = results.get("throughput") or []
    if not rows:
        return []
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    title = _title(results)
    written = []
    for file_name, value_key, label, heading in (
        (THROUGHPUT_PNG, "samples_per_sec", "samples / s", "Training throughput"),
        (MEMORY_PNG, "training_memory_mb", "MB above the idle process",
         "Peak memory added by training"),
    ):
        path = out_dir / file_name
        _bar_chart(rows, value_key, label, f"{heading} — {title}", path)
        written.append(path)
    return written


def _short_number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _title(results: dict[str, Any]) -> str:
    host = results.get("host") or {}
    device = host.get("device", "?")
    if device == "GPU":
        names = [d["name"] for d in host.get("devices", []) if d["kind"] == "GPU"]
        return f"GPU {names[0] if names else ''}"
    return f"CPU {(host.get('cpu') or {}).get('model_name', '')}"


def _bar_chart(
    rows: list[dict[str, Any]], value_key: str, label: str, title: str, path: Path
) -> None:
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(row["model"] for row in rows))
    precisions = list(dict.fromkeys(row["precision"] for row in rows))
    xla_settings = sorted({row["xla"] for row in rows})
    figure, axes = plt.subplots(
        1, len(models), figsize=(4.6 * len(models), 4.0), squeeze=False
    )
    width = 0.8 / len(xla_settings)
    for axis, model in zip(axes[0], models, strict=True):
        cells = {(r["precision"], r["xla"]): r for r in rows if r["model"] == model}
        missing = []
        for offset, xla in enumerate(xla_settings):
            for index, precision in enumerate(precisions):
                row = cells.get((precision, xla))
                if row is None or row["status"] != "ok":
                    if row is not None:
                        name = precision.replace("mixed_", "") + ("+XLA" if xla else "")
                        missing.append(f"{name} {row['status']}")
                    continue
                x = index + (offset - (len(xla_settings) - 1) / 2) * width
                legend = f"XLA {'on' if xla else 'off'}"
                known = legend in axis.get_legend_handles_labels()[1]
                bars = axis.bar(x, row[value_key], width, color=_XLA_COLORS[xla],
                                label=None if known else legend)
                # Values differ by orders of magnitude (float16 on a CPU): print them.
                axis.bar_label(bars, labels=[_short_number(row[value_key])], fontsize=6)
        any_row = next(iter(cells.values()))
        axis.set_title(f"{model} {'×'.join(map(str, any_row['input_shape']))}, "
                       f"batch {any_row['batch_size']}", fontsize=9)
        axis.set_xticks(range(len(precisions)))
        axis.set_xticklabels(precisions, fontsize=8)
        axis.set_ylabel(label.replace("samples", any_row.get("unit", "samples")), fontsize=8)
        if missing:
            axis.set_xlabel(textwrap.fill("not measured: " + ", ".join(missing), 60), fontsize=6)
        handles, labels = axis.get_legend_handles_labels()
        if handles:
            axis.legend(fontsize=7)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)

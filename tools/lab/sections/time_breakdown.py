"""`time_breakdown`: where the MFU-target cell's step time goes; results.md only.

Nothing runs for it: the MFU cell (tools/lab/sections/mfu.py) of the seed model in float32
without XLA is measured with `profile_steps`, and its row then holds each counted pass
timed alone (tools/lab/kernels.py) and the profiler's top ops (tools/lab/profile.py).
This section renders those after the MFU table.
"""

from __future__ import annotations

from typing import Any

from benchmarks.sections.base import Section, xla
from benchmarks.sections.context import Context


class TimeBreakdown(Section):
    name = "time_breakdown"
    selectable = False

    def wanted(self, ctx: Context) -> bool:
        return False  # measured by the mfu section's profiled cell

    def table(self, results: dict[str, Any]) -> list[str]:
        lines: list[str] = []
        for row in results.get("mfu") or []:
            if row["status"] != "ok" or not (row.get("profile") or row.get("kernels")):
                continue
            title = f"{row['model']} {row['precision']} XLA {xla(row['xla'])}"
            if row.get("kernels"):
                lines += _kernel_lines(row, title)
            if row.get("profile"):
                lines += [
                    f"Top ops of {title} (TensorFlow profiler; ops overlap on the inter-op "
                    "threads, so shares are of the summed op time):",
                    "",
                    "| layer | op | kernel | ms/step | share of op time |",
                    "|---|---|---|---:|---:|",
                ]
                for op in row["profile"]:
                    lines.append(f"| {op['layer'] or '(optimizer, loss, metrics)'} | "
                                 f"{op['op']} | {op['kernel']} | {op['ms_per_step']:.2f} | "
                                 f"{op['share']:.0%} |")
                lines.append("")
        return lines


def _kernel_lines(row: dict[str, Any], title: str) -> list[str]:
    kernels = row["kernels"]
    lines = [
        f"### Why MFU is what it is: {title}, each counted pass timed alone",
        "",
        "| layer | pass | GFLOP/step | ms | GFLOP/s | of the matmul ceiling |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for kernel in kernels:
        lines.append(
            f"| {kernel['layer']} | {kernel['pass']} | {kernel['gflop']:.3f} | "
            f"{kernel['ms']:.2f} | {kernel['gflops']:.0f} | {kernel['of_ceiling']:.0%} |"
        )
    kernel_ms = sum(kernel["ms"] for kernel in kernels)
    counted_gflop = sum(kernel["gflop"] for kernel in kernels)
    ceiling = row["ceiling_gflops"]
    text = (f"The counted passes take {kernel_ms:.1f} ms when run alone "
            f"({counted_gflop / kernel_ms * 1000 / ceiling:.0%} of the ceiling on "
            f"average), {kernel_ms / row['step_ms']:.0%} of the measured "
            f"{row['step_ms']:.1f} ms step")
    optimizer_ms = row.get("optimizer_update_ms")
    if optimizer_ms is not None:
        text += (f"; the optimizer update alone takes {optimizer_ms:.1f} ms "
                 f"({optimizer_ms / row['step_ms']:.0%})")
    text += (". The rest of the step is work MFU does not count: pooling, "
             "activations, bias and their gradients, loss, metrics, framework.")
    return lines + ["", text, ""]


SECTION = TimeBreakdown()

"""The per-epoch throughput samples of the Trainer-overhead runs.

Shared by the measurement (tools/lab/overhead.py, its pooled median) and the overhead
section's table and verdict (tools/lab/sections/overhead.py, their ranges and spread).
"""

from __future__ import annotations

from typing import Any


def epoch_rates(run_list: list[dict[str, Any]] | None) -> list[float]:
    """Every epoch's images/sec but each run's first (the pooled median's sample)."""
    return [rate for run in run_list or [] for rate in
            (run.get("images_per_sec_per_epoch") or [])[1:]]

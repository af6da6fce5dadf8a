"""The autotune decision, typed: what `autotune.tune` decided and why, as the Trainer, the
input-bound meter and distillation read it. `to_dict()` is the form the decision cache and
training_summary.json's `autotune` hold (keys in docs/INTERFACES.md).

    record = autotune.tune(request)
    record.choice.precision, record.reason, record.to_dict()["status"]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class CellChoice:
    """The cell chosen: a dtype policy, XLA on or off, and the per-replica batch."""

    precision: str
    xla: bool
    batch_size: int

    def to_dict(self) -> dict[str, Any]:
        """The `choice` of the record's JSON form."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class TuningRecord:
    """One autotune decision (`status`: "off", "one candidate", "static (multi-worker)",
    "cached" or "measured").

    Attributes:
        candidates: the labels of the cells that were plausible on the devices found.
        table: one row per measured cell (autotune.measure_cells), empty when nothing was
            measured.
        probe_seconds: what deciding cost this run (0-ish when static or cached).
        key, cache_file: the decision cache's key and file (None when not cached).
        measured_probe_seconds: a cached decision's probe time when it was measured.
    """

    status: str
    choice: CellChoice
    reason: str
    xla_reason: str
    candidates: tuple[str, ...] = ()
    table: tuple[Mapping[str, Any], ...] = ()
    probe_seconds: float = 0.0
    key: str | None = None
    cache_file: str | None = None
    measured_probe_seconds: float | None = None

    def chosen_row(self) -> Mapping[str, Any] | None:
        """The table's row of the chosen cell, or None when it was not measured."""
        for row in self.table:
            if (row.get("precision"), bool(row.get("xla"))) == (
                    self.choice.precision, bool(self.choice.xla)):
                return row
        return None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (decision cache, training_summary.json's `autotune`)."""
        content: dict[str, Any] = {
            "status": self.status, "candidates": list(self.candidates),
            "table": [dict(row) for row in self.table], "probe_seconds": self.probe_seconds,
            "key": self.key, "cache_file": self.cache_file, "reason": self.reason,
            "xla_reason": self.xla_reason, "choice": self.choice.to_dict(),
        }
        if self.status == "cached":
            content["measured_probe_seconds"] = self.measured_probe_seconds
        return content


"""Judge a window of the request log: per served version, did the traffic move?

    judgement = judge_traffic(log_dir, serving_dir, "digits", since, until, config.monitor)
    judgement.drifted, judgement.moved(), [v.status for v in judgement.verdicts]

Each version's logged images are compared with that version's own reference (its
assets.extra, reference.py). A version with fewer than `monitor.min_images` logged images
is "not enough traffic", never drift; one without a reference is reported and left out.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.monitor.compare import Comparison, compare, statistics_of
from components.monitor.config import MonitorSection
from components.monitor.reference import Reference, ReferenceMissing, read_reference
from components.monitor.request_log import read_window
from components.monitor.traffic import group_by_version, rows_of_logs

DRIFTED = "drift"
STEADY = "no drift"
NOT_ENOUGH_TRAFFIC = "not enough traffic"
NO_REFERENCE = "no reference"


@dataclass
class VersionVerdict:
    """What the window says about one served version."""

    version: int
    images: int
    status: str
    reason: str = ""
    unreadable_logs: int = 0
    comparison: Comparison | None = None
    served_statistics: Any = None
    reference: Reference | None = None

    def moved(self) -> list[str]:
        """The features that moved (drift or skew), furthest first."""
        return self.comparison.moved() if self.comparison else []


@dataclass
class Judgement:
    """One window of one model's request log, judged."""

    model_name: str
    since: dt.datetime
    until: dt.datetime
    log_dir: Path
    files: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    verdicts: list[VersionVerdict] = field(default_factory=list)

    @property
    def drifted(self) -> bool:
        """Whether any version's traffic moved from its reference."""
        return any(v.status == DRIFTED for v in self.verdicts)

    @property
    def logged_images(self) -> int:
        return sum(v.images for v in self.verdicts)

    def moved(self) -> list[str]:
        """Every feature that moved in some version, furthest first."""
        return list(dict.fromkeys(f for v in self.verdicts for f in v.moved()))


def judge_version(version: int, logs: list[Any], serving_dir: Path, model_name: str,
                  monitor: MonitorSection) -> VersionVerdict:
    """The verdict on one version's logged predictions."""
    if version == 0:
        return VersionVerdict(0, 0, NO_REFERENCE, "the request logger could not tell which "
                              f"version answered {len(logs)} logged requests")
    try:
        reference = read_reference(serving_dir / model_name / str(version))
    except ReferenceMissing as missing:
        return VersionVerdict(version, 0, NO_REFERENCE, str(missing))
    rows, unreadable = rows_of_logs(logs, reference.label_names)
    verdict = VersionVerdict(version, len(rows), STEADY, unreadable_logs=unreadable,
                             reference=reference)
    if len(rows) < monitor.min_images:
        verdict.status = NOT_ENOUGH_TRAFFIC
        verdict.reason = (f"{len(rows)} logged images < monitor.min_images "
                          f"{monitor.min_images}")
        return verdict
    verdict.served_statistics = statistics_of(rows)
    verdict.comparison = compare(verdict.served_statistics, reference.eval_statistics,
                                 reference.train_statistics, monitor)
    if verdict.comparison.moved():
        verdict.status = DRIFTED
    return verdict


def judge_traffic(log_dir: str | Path, serving_dir: str | Path, model_name: str,
                  since: dt.datetime, until: dt.datetime,
                  monitor: MonitorSection) -> Judgement:
    """Read the window [since, until) of `model_name`'s request log and judge each version."""
    window = read_window(log_dir, model_name, since, until)
    judgement = Judgement(model_name, since, until, Path(log_dir), window.files,
                          window.problems)
    for version, logs in sorted(group_by_version(window.records).items()):
        judgement.verdicts.append(judge_version(version, logs, Path(serving_dir),
                                                model_name, monitor))
    return judgement

"""The monitor's configuration: `serving.request_log` and `monitor`, typed.

`pipelines/config.py` composes both sections into the one `Config` (the request log under
`serving`); `configs/local.yaml` documents every key with its default. Cheap to import
(pydantic only): every command loads it.

    config.serving.request_log.sampling_rate   # 0.05: one predict request in 20 is logged
    config.monitor.drift.jensen_shannon          # 0.2
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from components.core.sections import StrictSection
from components.monitor.features import CATEGORICAL_FEATURES, FEATURES


def _not_blank(key: str, value: str) -> str:
    # "" means "the default folder"; only spaces is a typo that would make a folder "  ".
    if value and not value.strip():
        raise ValueError(f"{key} is blank; leave it \"\" for the default or name a folder")
    return value


class RequestLogSection(StrictSection):
    """`serving.request_log`: what the request logger in front of TF Serving keeps."""

    # The share of predict requests logged (each with every image in it), 0 = none, 1 = all.
    sampling_rate: float = Field(0.05, ge=0.0, le=1.0)
    # "" = <workspace>/request_log; PredictionLog TFRecords in <dir>/<model>/<YYYY-MM-DD>/.
    dir: str = ""

    @field_validator("dir")
    @classmethod
    def _dir_not_blank(cls, value: str) -> str:
        return _not_blank("serving.request_log.dir", value)

    def folder(self, workspace_root: str | Path) -> Path:
        """Where the request log is: `dir`, else `<workspace>/request_log`."""
        return Path(self.dir) if self.dir else Path(workspace_root) / "request_log"


class ComparatorSection(StrictSection):
    """Thresholds of TFDV's comparators for one comparison (drift or skew)."""

    # Jensen-Shannon divergence (0 same .. 1 disjoint) above which a numeric feature moved.
    jensen_shannon: float = Field(0.2, gt=0.0, le=1.0)
    # L-infinity distance (the largest change of one value's share) for categorical ones.
    l_infinity: float = Field(0.2, gt=0.0, le=1.0)
    # Per-feature thresholds replacing the two above, e.g. {brightness: 0.4}; 1 = never.
    features: dict[str, float] = Field(default_factory=dict)

    @field_validator("features")
    @classmethod
    def _known_features(cls, features: dict[str, float]) -> dict[str, float]:
        for name, threshold in features.items():
            if name not in FEATURES:
                raise ValueError(f"unknown feature {name!r}; the compared features are "
                                 f"{', '.join(FEATURES)}")
            if not 0.0 < threshold <= 1.0:
                raise ValueError(f"the threshold of {name!r} must be in (0, 1]. "
                                 f"Received: {threshold}")
        return features

    def threshold(self, feature: str) -> float:
        """The threshold that applies to `feature`."""
        if feature in self.features:
            return self.features[feature]
        return self.l_infinity if feature in CATEGORICAL_FEATURES else self.jensen_shannon


class MonitorSection(StrictSection):
    """`monitor`: how `mptfx monitor` judges the logged traffic."""

    # Fewer logged images than this for a version is "not enough traffic", never drift.
    min_images: int = Field(100, ge=1)
    # Served traffic against the eval split of the version that served it.
    drift: ComparatorSection = Field(default_factory=ComparatorSection)
    # Served traffic against that version's training data.
    skew: ComparatorSection = Field(default_factory=lambda: ComparatorSection(
        jensen_shannon=0.3, l_infinity=0.3))
    # --retrain-on-drift without a new span: false = report and alert only; true = retrain
    # on the data already trained on.
    retrain_without_new_data: bool = False
    # "" = <workspace>/monitor; one folder per judgement with report.md and the plot.
    report_dir: str = ""

    @field_validator("report_dir")
    @classmethod
    def _report_dir_not_blank(cls, value: str) -> str:
        return _not_blank("monitor.report_dir", value)

    def reports_folder(self, workspace_root: str | Path) -> Path:
        """Where the reports go: `report_dir`, else `<workspace>/monitor`."""
        return Path(self.report_dir) if self.report_dir else Path(workspace_root) / "monitor"

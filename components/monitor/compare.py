"""TFDV statistics of the features, and TFDV's drift and skew comparators over them.

    stats = statistics_of(rows)                      # DatasetFeatureStatisticsList
    result = compare(served, reference.eval_statistics, reference.train_statistics,
                     config.monitor)
    result.moved()                                   # ["brightness", "height", ...]

Drift: the served traffic against the eval split of the version that served it
(`validate_statistics(served, schema, previous_statistics=eval)`); skew: the version's
training data against the served traffic (`validate_statistics(train, schema,
serving_statistics=served)`). The schema declares each feature with a comparator and
nothing else: Jensen-Shannon divergence for the numeric features, L-infinity distance for
the categorical ones (encoding, predicted_class), thresholds from `monitor.drift` and
`monitor.skew`. TFDV decides what moved; its measurements go into the report and MLflow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from components.monitor.config import ComparatorSection, MonitorSection
from components.monitor.features import CATEGORICAL_FEATURES, FEATURES

DRIFT, SKEW = "drift", "skew"


def statistics_of(rows: Sequence[Mapping[str, Any]]) -> Any:
    """TFDV statistics of feature rows (a missing value, e.g. of an undecodable image, is
    counted missing). Every numeric feature is FLOAT, so a batch whose values all went
    missing keeps the type the reference has."""
    import pandas as pd
    import tensorflow_data_validation as tfdv

    columns = {}
    for name in FEATURES:
        values = [row.get(name) for row in rows]
        if name in CATEGORICAL_FEATURES:
            columns[name] = pd.Series(values, dtype=object)
        else:
            columns[name] = pd.Series([float("nan") if v is None else float(v) for v in values],
                                      dtype="float64")
    return tfdv.generate_statistics_from_dataframe(pd.DataFrame(columns))


def comparison_schema(drift: ComparatorSection, skew: ComparatorSection) -> Any:
    """The features with only their comparators: no domain or presence constraint, so the
    only anomalies TFDV can report are distributions that moved."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = schema_pb2.Schema()
    for name in FEATURES:
        feature = schema.feature.add(name=name)
        feature.presence.min_count = 0
        if name in CATEGORICAL_FEATURES:
            feature.type = schema_pb2.BYTES
            feature.drift_comparator.infinity_norm.threshold = drift.threshold(name)
            feature.skew_comparator.infinity_norm.threshold = skew.threshold(name)
        else:
            feature.type = schema_pb2.FLOAT
            feature.drift_comparator.jensen_shannon_divergence.threshold = drift.threshold(name)
            feature.skew_comparator.jensen_shannon_divergence.threshold = skew.threshold(name)
    return schema


@dataclass(frozen=True)
class Measurement:
    """One comparator's verdict on one feature."""

    feature: str
    comparison: str  # drift | skew
    measure: str     # jensen_shannon_divergence | l_infinity
    value: float
    threshold: float
    moved: bool

    @property
    def ratio(self) -> float:
        """How far over (> 1) or under its threshold the measured value is."""
        return self.value / self.threshold if self.threshold else 0.0


@dataclass
class Comparison:
    """Drift and skew of one version's traffic, feature by feature."""

    measurements: list[Measurement] = field(default_factory=list)

    def of(self, comparison: str) -> dict[str, Measurement]:
        """feature -> its measurement in `comparison` (drift or skew)."""
        return {m.feature: m for m in self.measurements if m.comparison == comparison}

    def moved(self, comparison: str | None = None) -> list[str]:
        """The features that moved (in `comparison`, or in either), furthest first."""
        moved = sorted((m for m in self.measurements if m.moved
                        and comparison in (None, m.comparison)), key=lambda m: -m.ratio)
        return list(dict.fromkeys(m.feature for m in moved))

    def furthest(self, count: int) -> list[str]:
        """The `count` features furthest from the reference (moved or not), for the plot."""
        ranked = sorted(self.measurements, key=lambda m: (-m.moved, -m.ratio))
        return list(dict.fromkeys(m.feature for m in ranked))[:count]


_MEASURE_NAMES = {"L_INFTY": "l_infinity",
                  "JENSEN_SHANNON_DIVERGENCE": "jensen_shannon_divergence"}


def _measurements(anomalies: Any, comparison: str) -> list[Measurement]:
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    type_names = anomalies_pb2.DriftSkewInfo.Measurement.Type
    flagged = set(anomalies.anomaly_info)
    found = []
    for info in anomalies.drift_skew_info:
        feature = ".".join(info.path.step)
        listed = info.drift_measurements if comparison == DRIFT else info.skew_measurements
        for measurement in listed:
            # Rounded before the comparison, so the verdict is the one the report's number
            # shows (a divergence of 1.0000001 is 1, and a threshold of 1 means never).
            value = round(float(measurement.value), 4)
            found.append(Measurement(
                feature=feature, comparison=comparison,
                measure=_MEASURE_NAMES.get(type_names.Name(measurement.type),
                                           type_names.Name(measurement.type).lower()),
                value=value, threshold=float(measurement.threshold),
                moved=feature in flagged and value > measurement.threshold))
    return found


def compare(served: Any, eval_statistics: Any, train_statistics: Any,
            monitor: MonitorSection) -> Comparison:
    """Drift (served vs the eval split) and skew (training data vs served) of one version."""
    import tensorflow_data_validation as tfdv

    schema = comparison_schema(monitor.drift, monitor.skew)
    drift = tfdv.validate_statistics(served, schema, previous_statistics=eval_statistics)
    skew = tfdv.validate_statistics(train_statistics, schema, serving_statistics=served)
    return Comparison(_measurements(drift, DRIFT) + _measurements(skew, SKEW))

"""DataValidationGate: turn ExampleValidator's anomalies into a stop before the Trainer.

TFX's ExampleValidator records anomalies (and a `blessed` flag per split) but lets the
pipeline go on. A bad data drop must never reach training or production, so this component
fails the run with a one-line message naming each anomalous feature.
"""


import os

from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx.dsl.component.experimental.annotations import InputArtifact
from tfx.dsl.component.experimental.decorators import component
from tfx.types import artifact_utils, standard_artifacts

_SCHEMA_DIFF_FILE = "SchemaDiff.pb"  # ExampleValidator's file name, one per split


class DataAnomalyError(RuntimeError):
    """ExampleValidator found anomalies in the data; the message names them."""


def read_anomalies(anomalies_uri: str, split: str) -> list[str]:
    """Return `feature: description` lines for the anomalies found in one split."""
    path = os.path.join(anomalies_uri, f"Split-{split}", _SCHEMA_DIFF_FILE)
    anomalies = anomalies_pb2.Anomalies()
    with open(path, "rb") as handle:
        anomalies.ParseFromString(handle.read())
    found = [
        f"{feature}: {info.short_description or info.description}"
        for feature, info in sorted(anomalies.anomaly_info.items())
    ]
    if anomalies.HasField("dataset_anomaly_info"):
        info = anomalies.dataset_anomaly_info
        found.append(f"(dataset): {info.short_description or info.description}")
    return found


@component
def DataValidationGate(anomalies: InputArtifact[standard_artifacts.ExampleAnomalies]) -> None:
    """Raise DataAnomalyError when any split has anomalies; otherwise pass silently."""
    problems = []
    for split in artifact_utils.decode_split_names(anomalies.split_names):
        problems += [f"{split} split, {line}" for line in read_anomalies(anomalies.uri, split)]
    if problems:
        raise DataAnomalyError(
            f"ExampleValidator found {len(problems)} data anomal"
            f"{'y' if len(problems) == 1 else 'ies'}, training stopped: " + "; ".join(problems)
        )

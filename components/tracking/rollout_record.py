"""One MLflow run per `mptfx serve rollout`: every check's numbers as they come, the outcome.

The run is in the pipeline's experiment, named `rollout <model> v<canary>`, tagged
`mptfx.kind=rollout`; its params are the `serving.analysis` settings, each check is one step
of the metrics (canary_weight, canary_requests, success_rate, p99_latency_ms,
class_distance, confidence_drop, failed_checks), and `rollout.json` holds the whole report.
The canary's registered model version gets the tag `mptfx.rollout` = the outcome.

    recorder = RolloutRun.start(client, "mptfx-digits", "digits", canary=2, stable=1,
                                settings=settings, artifact_location=None)
    recorder.check({...}); recorder.finish(report)
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from components.serving.config import AnalysisSection
from components.tracking.registry import serving_version_of
from components.tracking.store import ensure_experiment

ROLLOUT_KIND_TAG = "mptfx.kind"
ROLLOUT_OUTCOME_TAG = "mptfx.rollout"
REPORT_FILE = "rollout.json"
# check record key -> MLflow metric name
_METRICS = {"weight": "canary_weight", "requests": "canary_requests",
            "success_rate": "success_rate", "p99_latency_ms": "p99_latency_ms",
            "class_distance": "class_distance", "confidence_drop": "confidence_drop",
            "failed_checks": "failed_checks"}
_RUN_STATUS = {"promoted": "FINISHED", "aborted": "FAILED", "inconclusive": "KILLED"}


class RolloutRun:
    """The MLflow run of one rollout (`client`: an MlflowClient)."""

    def __init__(self, client: Any, run_id: str, model_name: str, canary: int) -> None:
        self.client = client
        self.run_id = run_id
        self.model_name = model_name
        self.canary = canary

    @classmethod
    def start(cls, client: Any, experiment: str, model_name: str, canary: int, stable: int,
              settings: AnalysisSection, artifact_location: str | None) -> RolloutRun:
        """Create the run and log the settings it judges with."""
        experiment_id = ensure_experiment(client, experiment, artifact_location)
        run = client.create_run(experiment_id, run_name=f"rollout {model_name} v{canary}",
                                tags={ROLLOUT_KIND_TAG: "rollout", "model_name": model_name,
                                      "canary_version": str(canary),
                                      "stable_version": str(stable)})
        recorder = cls(client, run.info.run_id, model_name, canary)
        for key, value in settings.model_dump().items():
            client.log_param(recorder.run_id, f"analysis.{key}", json.dumps(value))
        return recorder

    def check(self, record: dict[str, Any]) -> None:
        """Log one check's numbers at step = its number."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(name, float(record[key]), now, int(record["check"]))
                   for key, name in _METRICS.items() if record.get(key) is not None]
        self.client.log_batch(self.run_id, metrics=metrics)
        self.client.set_tag(self.run_id, f"check.{record['check']}",
                            f"{record['outcome']}: {'; '.join(record['reasons'])}"[:5000])

    def finish(self, report: Any) -> None:
        """Tag the outcome on the run and on the canary's registered version; log
        rollout.json; end the run (FINISHED promoted, FAILED aborted, KILLED gave up)."""
        self.client.set_tag(self.run_id, ROLLOUT_OUTCOME_TAG, report.outcome)
        if report.reason:
            self.client.set_tag(self.run_id, "reason", report.reason[:5000])
        with tempfile.TemporaryDirectory(prefix="mptfx-rollout-") as folder:
            path = Path(folder) / REPORT_FILE
            path.write_text(json.dumps(report.to_dict(), indent=2))
            self.client.log_artifact(self.run_id, str(path))
        version = self._registered_canary()
        if version is not None:
            self.client.set_model_version_tag(self.model_name, version.version,
                                              ROLLOUT_OUTCOME_TAG, report.outcome)
        self.client.set_terminated(self.run_id, _RUN_STATUS[report.outcome])

    def _registered_canary(self) -> Any | None:
        from mlflow.exceptions import MlflowException

        try:
            versions = self.client.search_model_versions(f"name = '{self.model_name}'")
        except MlflowException:
            return None
        matching = [v for v in versions if serving_version_of(v) == self.canary]
        return max(matching, key=lambda v: int(v.version)) if matching else None

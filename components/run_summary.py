"""summary.json, typed: what one pipeline run did, the file every reader reads.

    summary = RunSummary.read(path)             # one-line SummaryError on a bad file
    summary.eval.blessed, summary.trainer.model_uri, summary.tflite["fp32"].agreement
    summary.write()                             # to summary.summary_path
    summary.to_dict()                           # what `mptfx run --json` prints

`pipelines/metadata_summary.py` builds it from ML Metadata after a run (local or
Kubernetes), the run command writes it, MLflow tracking adds the `mlflow` section, and
retrain, the bench and the tests read it back through this module. A section's keys are
declared here; the trainer's section also carries the keys of training_summary.json
(`components/trainer/training_summary.py` owns those), and the mlflow section those of
`components/tracking/recorder.py`. Keys a run did not produce stay out of the file
(`to_dict` drops what was never set), so a cached or failed run's summary is as short as
before.

A leaf: imports pydantic only, so tracking, the bench and the tests can read a summary
without TensorFlow.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"                      # the run report, beside summary.json
TRAINING_SUMMARY_FILE = "training_summary.json"  # in the Trainer's model_run folder
QUARANTINE_FILE = "quarantine.json"              # in the Ingest's quarantine artifact
TFLITE_REPORT_FILE = "report.json"               # in the TFLite component's artifact


class SummaryError(ValueError):
    """A summary.json that cannot be read: the message names the file and the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def present(self) -> bool:
        """Whether the run wrote anything in this section (an empty one is `{}`)."""
        return bool(self.model_fields_set or self.model_extra)

    def to_dict(self) -> dict[str, Any]:
        """The section as it is in the file: the keys the run set, nothing else."""
        return self.model_dump(mode="json", exclude_unset=True)


class _OpenSection(_Section):
    """A section whose extra keys belong to another module's contract."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)


class ComponentRecord(_Section):
    status: str
    seconds: float | None = None
    execution_id: int | None = None


class DataSection(_Section):
    examples_uri: str | None = None
    span: int | None = None
    schema_uri: str | None = None
    images: int | None = None
    quarantined: int | None = None
    ignored: int | None = None
    split_counts: dict[str, int] | None = None
    quarantine_report: str | None = None


class TrainerSection(_OpenSection):
    """training_summary.json without its history, plus where the model and logs are."""

    model: str | None = None
    task: str | None = None
    precision: str | None = None
    precision_reason: str | None = None
    strategy: str | None = None
    xla: bool | None = None
    epochs: int | None = None
    batch_size: int | None = None
    images_per_sec: float | None = None
    autotune_probe_seconds: float | None = None
    # components/trainer/input_bound.py: wait_share, model_steps_per_sec, advice, ...
    input_bound: dict[str, Any] | None = None
    model_uri: str | None = None
    tensorboard_logs: str | None = None
    # trainer.distill: the teacher, temperature, alpha, teacher vs student accuracy on the
    # eval split, the teacher's SavedModel size and latency (components/trainer/distill_run.py)
    distill: dict[str, Any] | None = None


class EvalSection(_Section):
    blessed: bool = False
    evaluation_uri: str | None = None
    accuracy: float | None = None
    baseline_accuracy: float | None = None
    dice: float | None = None
    baseline_dice: float | None = None
    recall_per_class: dict[str, float] | None = None
    why_not_blessed: list[str] | None = None

    def headline(self) -> tuple[str, float | None]:
        """The gated metric's name and value: Dice for segmentation, else accuracy."""
        if "dice" in self.model_fields_set:
            return "dice", self.dice
        return "accuracy", self.accuracy


class InfraSection(_Section):
    """The InfraValidator's verdict (components/infra/): `checked` false when the Evaluator
    did not bless the candidate; `reason` says why it is not blessed."""

    blessed: bool = False
    checked: bool | None = None
    reason: str | None = None
    server: str | None = None              # "model process" | "tf serving"
    start_seconds: float | None = None
    load_seconds: float | None = None
    requests: int | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    peak_rss_mb: float | None = None
    memory_limit: str | None = None
    signatures: list[str] | None = None
    blessing_uri: str | None = None

    def refused(self) -> bool:
        """Checked and not blessed: the run did not do what it was asked (exit 1)."""
        return bool(self.checked) and not self.blessed


class PushedSection(_Section):
    pushed: bool = False
    path: str | None = None
    version: str | None = None
    label: str | None = None


class TFLiteVariant(_OpenSection):
    """One TF Lite variant from the component's report.json."""

    path: str | None = None
    bytes: int | None = None
    agreement: float | None = None
    published: bool | None = None
    reason: str | None = None


class MlflowSection(_OpenSection):
    """What tracking recorded (run_id, experiment, tracking_uri, registered_model, ...) or
    the `error` it hit."""

    run_id: str | None = None
    experiment: str | None = None
    tracking_uri: str | None = None
    run_url: str | None = None
    registered_model: dict[str, Any] | None = None
    error: str | None = None


class TriggerSection(_Section):
    """Why the run was started, when a command other than the data's arrival decided it:
    `mptfx monitor --retrain-on-drift` sets kind `drift`, the features that moved, the
    served versions they moved in and the monitor's report."""

    kind: str | None = None
    features: list[str] | None = None
    versions: list[int] | None = None
    report: str | None = None


class RunSummary(_Section):
    status: str
    run_id: str
    pipeline: str | None = None
    orchestrator: str | None = None        # "kubernetes" for a cluster run
    workspace: str | None = None
    data_root: str | None = None
    spans: list[int] = Field(default_factory=list)
    summary_path: str
    log_path: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    reason: str | None = None              # a skipped run: why
    failed_component: str | None = None
    error: str | None = None
    components: dict[str, ComponentRecord] = Field(default_factory=dict)
    data: DataSection = Field(default_factory=DataSection)
    trainer: TrainerSection = Field(default_factory=TrainerSection)
    eval: EvalSection = Field(default_factory=EvalSection)        # {}: no Evaluator output
    infra: InfraSection = Field(default_factory=InfraSection)     # {}: no InfraValidator
    pushed: PushedSection = Field(default_factory=PushedSection)  # {}: no Pusher output
    # variant -> its report; "skipped" -> why no variant was converted
    tflite: dict[str, TFLiteVariant | str] = Field(default_factory=dict)
    schema_frozen: str | None = None       # retrain froze this run's schema
    trigger: TriggerSection = Field(default_factory=TriggerSection)  # {}: new data or by hand
    wall_seconds: float | None = None
    report_path: str | None = None         # runs/<run_id>/report.html (tracking/report.py)
    mlflow: MlflowSection = Field(default_factory=MlflowSection)  # set by tracking

    @classmethod
    def parse(cls, content: Any, source: str = "summary.json") -> RunSummary:
        """Validate a summary's content; SummaryError names `source` and the first bad key."""
        try:
            return cls.model_validate(content)
        except ValidationError as error:
            first = error.errors()[0]
            key = ".".join(str(part) for part in first["loc"]) or "(top level)"
            raise SummaryError(f"{source}: {key}: {first['msg']}") from None

    @classmethod
    def read(cls, path: str | Path) -> RunSummary:
        try:
            content = json.loads(Path(path).read_text())
        except OSError as error:
            raise SummaryError(f"{path}: cannot read: {error.strerror or error}") from None
        except ValueError as error:
            raise SummaryError(f"{path}: not JSON: {error}") from None
        return cls.parse(content, str(path))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)

    def write(self, path: str | Path | None = None) -> Path:
        """Writes the summary to `path` (default: its own summary_path); returns the path."""
        target = Path(path or self.summary_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.to_json())
        return target

    @property
    def pushed_version(self) -> str | None:
        return self.pushed.version if self.pushed.pushed else None

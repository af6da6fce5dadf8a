"""The typed pipeline configuration: one pydantic section per concern, each refusing unknown
keys and coercing nothing, so `trainer.epoch=3` fails naming the key instead of being silently
ignored. The defaults are the embedded local setup; `configs/local.yaml` spells out the same
values for people to copy. The sections the Trainer reads (model, trainer, export and
data.channels) are its own schema, components/trainer/config.py, which run_fn validates its
custom_config with; they are composed here.

A leaf every layer may import: components take the sections they read as typed values, and
pipelines/config.py reads a YAML file and `--set` overrides into a `Config`.

    config = Config()                      # every default
    config.trainer.epochs                  # 15
    config.pusher.model_name               # "digits"
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator

# The InfraValidator owns its section too (components/infra/config.py).
from components.infra.config import InfraSection

# The monitor owns its sections (`serving.request_log`, `monitor`), as the Trainer its own.
from components.monitor.config import MonitorSection, RequestLogSection

# The canary analysis owns its section (components/serving/config.py), as the Trainer does.
from components.serving.config import AnalysisSection

# The Trainer owns the sections it reads; they are composed here, and run_fn validates its
# custom_config with the same classes (components/trainer/config.py).
from components.trainer.config import DataSection as TrainerDataSection
from components.trainer.config import (
    ExportSection,
    ModelSection,
    StrictSection,
    TrainerConfig,
    TrainerSection,
)

BUILTIN_DIGITS = "builtin:digits"
# Small 3D volumes (a cube or a sphere in noise) with voxel masks, for segmentation models.
SYNTHETIC_VOLUMES = "synthetic:volumes"
# Every stored image is this size when data.image_size is set: 8192x8192x3 uint8 is 200 MB
# per image before the batch multiplies it.
MAX_IMAGE_SIDE = 8192
# What pipeline.name and pusher.model_name must match: an MLflow experiment, a TF Serving
# model name and a Kubernetes label value alike (63 characters at most).
NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$"
# The built-in data sets' names: (pipeline.name, pusher.model_name).
BUILTIN_NAMES = {BUILTIN_DIGITS: ("mptfx-digits", "digits"),
                 SYNTHETIC_VOLUMES: ("mptfx-volumes", "volumes")}


def names_for_data(source: str) -> tuple[str, str] | None:
    """(pipeline.name, pusher.model_name) for a run on `source` when the config names
    neither: the built-in data sets' own names, else the data folder's name made valid
    (`/data/My Flowers/` -> `My-Flowers`; a `{SPAN}` pattern's folder without it: `drop-{SPAN}`
    -> `drop`). None when the folder's name has no letter or digit to keep (`/`).
    """
    if source in BUILTIN_NAMES:
        return BUILTIN_NAMES[source]
    folder = os.path.basename(os.path.normpath(source.replace("{SPAN}", "")))
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", folder)[:63].strip("-_.")
    return (name, name) if name else None


# Every section rejects unknown keys and coerces nothing (see StrictSection).
_Section = StrictSection


class PipelineSection(_Section):
    # null in a config file: named after the data (`names_for_data`), said in the run's first line.
    name: str = Field("mptfx-digits", pattern=NAME_PATTERN)
    enable_cache: bool = True
    # Beam options of StatisticsGen, the Evaluator and the other Beam components, e.g.
    # [--runner=FlinkRunner, --flink_master=host:8081]; [] = Beam's DirectRunner in process.
    beam_pipeline_args: list[str] = Field(default_factory=list)


class SpansSection(_Section):
    # Train on the last `window` span folders (span-<N> or a {SPAN} pattern in data.source).
    window: int = Field(1, ge=1)


class DataSection(TrainerDataSection):
    """`data`: the Trainer's part (`channels`) and the Ingest's."""

    # A folder with one sub-folder per class, a folder of TFRecord files, builtin:digits,
    # synthetic:volumes, or a folder of span-<N> drops (or a pattern such as /data/drop-{SPAN}).
    source: str = BUILTIN_DIGITS
    spans: SpansSection = Field(default_factory=SpansSection)
    # "" = infer with SchemaGen each run; a schema.pbtxt path = validate against it
    # (mptfx retrain freezes the first trained span's schema in <workspace>/schema/).
    schema_file: str = ""
    # builtin:digits: export at most this many images per class (0 = all 1,797);
    # synthetic:volumes: this many volumes per class (0 = 100 cubes and 100 spheres).
    builtin_per_class: int = Field(0, ge=0)
    splits: dict[str, float] = Field(default_factory=lambda: {"train": 0.8, "eval": 0.2})
    # null keeps each image's own size (the Trainer resizes); [H, W] resizes at ingest.
    image_size: list[int] | None = None
    resize_method: Literal["stretch", "pad"] = "stretch"
    max_bad_fraction: float = Field(0.01, ge=0.0, le=1.0)
    # Header-first limits: a larger image is quarantined with the reason, never decoded.
    # The default is Pillow's decompression-bomb threshold.
    max_pixels: int = Field(89_478_485, ge=1)
    max_file_mb: float = Field(100.0, gt=0)
    # Each file's own bytes are stored; only an image whose pixels change (image_size, alpha,
    # RGB stored as gray) is re-encoded: JPEG at this quality for JPEG files, PNG otherwise.
    jpeg_quality: int = Field(95, ge=1, le=100)
    # Each split is written as GZIP TFRecord shards of about this many MB (TFX's ExampleGen
    # shards too): parallel reads, and a multi-worker Trainer gives each worker its own files.
    shard_mb: float = Field(128.0, gt=0)
    # local: the Ingest in its own process (tf.data decodes on every core of it); beam: a Beam
    # pipeline on pipeline.beam_pipeline_args (in process: one DirectRunner worker per core),
    # so a cluster runner spreads the decode over machines. Same Examples either way.
    ingest_engine: Literal["local", "beam"] = "local"

    @field_validator("source")
    @classmethod
    def _not_empty(cls, source: str) -> str:
        if not source.strip():
            raise ValueError("data.source must name a folder, builtin:digits or "
                             "synthetic:volumes (an empty value would ingest the current folder)")
        return source

    @field_validator("splits")
    @classmethod
    def _train_and_eval(cls, splits: dict[str, float]) -> dict[str, float]:
        if set(splits) != {"train", "eval"}:
            raise ValueError(f"splits must name exactly 'train' and 'eval'. Received: {splits}")
        if any(ratio <= 0 for ratio in splits.values()) or abs(sum(splits.values()) - 1) > 1e-6:
            raise ValueError(f"split ratios must be > 0 and sum to 1. Received: {splits}")
        return splits

    @field_validator("image_size")
    @classmethod
    def _two_positive_ints(cls, size: list[int] | None) -> list[int] | None:
        if size is not None and (len(size) != 2 or min(size) < 1):
            raise ValueError(f"image_size must be [height, width] or null. Received: {size}")
        if size is not None and max(size) > MAX_IMAGE_SIDE:
            raise ValueError(f"image_size sides must be at most {MAX_IMAGE_SIDE}. "
                             f"Received: {size}")
        return size


class EvaluatorSection(_Section):
    min_accuracy: float = Field(0.9, ge=0.0, le=1.0)
    # Segmentation models (unet3d) are gated on Dice over all eval voxels instead.
    min_dice: float = Field(0.8, ge=0.0, le=1.0)
    # How much accuracy (or Dice) may drop against the latest blessed model (absolute, e.g.
    # 0.01 = 1 point).
    max_regression: float = Field(0.01, ge=0.0, le=1.0)


class PusherSection(_Section):
    # null in a config file: named after the data, as pipeline.name is.
    model_name: str = Field("digits", pattern=NAME_PATTERN)
    # Empty = <workspace>/serving. TF Serving's --model_base_path is <serving_dir>/<model_name>.
    serving_dir: str = ""
    # At least 2: TF Serving polls models.config, so the version it still serves must
    # outlive the push of the next one. Labelled versions are never pruned.
    keep_versions: int = Field(5, ge=2)
    # direct: a blessed version becomes `stable`; canary: it becomes `canary`, stable stays.
    rollout: Literal["direct", "canary"] = "direct"


class TFLiteSection(_Section):
    variants: list[Literal["fp32", "fp16", "dynamic_int8", "int8"]] = Field(
        default_factory=lambda: ["fp32", "fp16", "dynamic_int8", "int8"]
    )
    uint8_io: bool = False
    representative_samples: int = Field(200, ge=1)
    # 0 = the whole eval split.
    parity_limit: int = Field(0, ge=0)


class NodePoolSection(_Section):
    """Where and with what one group of pipeline pods runs (see `kubernetes.pools`)."""

    # Pods of this pool schedule only on nodes with these labels.
    node_selector: dict[str, str] = Field(default_factory=dict)
    # Extra tolerations (Kubernetes Toleration objects); `gpus > 0` adds nvidia.com/gpu itself.
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    # nvidia.com/gpu limit per pod; > 0 also tolerates the nvidia.com/gpu:NoSchedule taint.
    gpus: int = Field(0, ge=0)
    # GKE accelerator name (e.g. nvidia-l4); the KFP export turns it into NVIDIA_L4.
    accelerator: str = ""
    requests: dict[str, str] = Field(
        default_factory=lambda: {"cpu": "1", "memory": "4Gi", "ephemeral-storage": "1Gi"})
    limits: dict[str, str] = Field(
        default_factory=lambda: {"cpu": "2", "memory": "8Gi", "ephemeral-storage": "4Gi"})


def _default_pools() -> dict[str, NodePoolSection]:
    return {
        "cpu": NodePoolSection(),
        "gpu": NodePoolSection(
            node_selector={"cloud.google.com/gke-accelerator": "nvidia-l4"},
            gpus=1,
            accelerator="nvidia-l4",
            requests={"cpu": "4", "memory": "16Gi", "ephemeral-storage": "1Gi"},
            limits={"cpu": "8", "memory": "32Gi", "ephemeral-storage": "4Gi"},
        ),
    }


class MetadataDatabaseSection(_Section):
    """The shared ML Metadata database every node pod writes to (the in-cluster PostgreSQL)."""

    engine: Literal["postgresql", "mysql"] = "postgresql"
    host: str = "mptfx-postgres"
    port: int = Field(5432, ge=1, le=65535)
    database: str = "mlmd"
    user: str = "mptfx"
    # The password is never in the config: pods read it from this Secret's key.
    password_secret: str = "mptfx-postgres"
    password_key: str = "password"


class KubernetesTrainerSection(_Section):
    # > 1: the Trainer is an Indexed Job of this many pods (MultiWorkerMirroredStrategy).
    workers: int = Field(1, ge=1)
    # Emit a Kubeflow TFJob (kubeflow.org/v1, Training Operator) instead of the Indexed Job.
    use_tfjob: bool = False
    port: int = Field(2222, ge=1, le=65535)


class KubernetesSection(_Section):
    """How `mptfx k8s` runs the pipeline: one batch/v1 Job per node, in node pools."""

    namespace: str = Field("mptfx", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    image: str = "mptfx:0.1.0"
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    # Node pods talk to no API server; the driver's account may manage Jobs, Services, Pods.
    service_account: str = "mptfx-pipeline"
    driver_service_account: str = "mptfx-runner"
    # The PVC mounted in every pod at `workspace`: pipeline root, serving and TF Lite output.
    workspace: str = "/mnt/mptfx"
    workspace_claim: str = "mptfx-workspace"
    metadata: MetadataDatabaseSection = Field(default_factory=MetadataDatabaseSection)
    pools: dict[str, NodePoolSection] = Field(default_factory=_default_pools)
    # Component id -> pool; every other component runs in `default_pool`.
    component_pools: dict[str, str] = Field(default_factory=lambda: {"Trainer": "gpu"})
    default_pool: str = "cpu"
    trainer: KubernetesTrainerSection = Field(default_factory=KubernetesTrainerSection)
    # Beam options for the pods' Beam components; [] = pipeline.beam_pipeline_args.
    beam_pipeline_args: list[str] = Field(default_factory=list)
    # MLflow server of the cluster (k8s/base/mlflow.yaml's Service): MLFLOW_TRACKING_URI of
    # the driver and every pod. tracking_secret: a Secret with keys `username` and
    # `password` for MLFLOW_TRACKING_USERNAME/PASSWORD ("" = the server needs no login).
    tracking_uri: str = "http://mptfx-mlflow:5000"
    tracking_secret: str = ""
    backoff_limit: int = Field(2, ge=0)
    active_deadline_seconds: int = Field(86400, ge=1)
    ttl_seconds_after_finished: int = Field(604800, ge=0)
    poll_seconds: float = Field(5.0, gt=0)

    @field_validator("pools", mode="before")
    @classmethod
    def _over_the_default_pools(cls, value: Any) -> Any:
        # `--set kubernetes.pools.gpu.node_selector=...` changes that key of the default gpu
        # pool; it does not replace the pool (and drop its `gpus: 1`).
        if not isinstance(value, dict):
            return value
        merged = {name: pool.model_dump() for name, pool in _default_pools().items()}
        for name, pool in value.items():
            if isinstance(pool, dict) and name in merged:
                merged[name] = {**merged[name], **pool}
            else:
                merged[name] = pool
        return merged

    @field_validator("component_pools", "default_pool")
    @classmethod
    def _pools_exist(cls, value: dict[str, str] | str, info: ValidationInfo) -> Any:
        known = info.data.get("pools") or {}
        wanted = value.values() if isinstance(value, dict) else [value]
        for pool in wanted:
            if pool not in known:
                raise ValueError(f"pool {pool!r} is not one of kubernetes.pools "
                                 f"({', '.join(sorted(known))})")
        return value


class TrackingSection(_Section):
    """Where MLflow records each pipeline run (see components/tracking/)."""

    # "" = $MLFLOW_TRACKING_URI when set, else sqlite:///<workspace>/mlflow.db (no server).
    uri: str = ""
    # true: an unreachable server is an error (exit 2) before training; false: warn once,
    # record the run in <workspace>/mlflow.db and print the `mptfx tracking sync` command.
    required: bool = False
    # "" = pipeline.name.
    experiment: str = ""
    # Register the pushed model (alias champion) or an unblessed one (alias challenger)
    # under pusher.model_name.
    register_model: bool = True
    # How long to wait for the server's /health before treating it as unreachable.
    connect_timeout_seconds: float = Field(5.0, gt=0)
    # MLflow's own system metrics (CPU, memory, disk, network; GPU through NVML) while the
    # Trainer runs, logged to the run's MLflow run, which then opens when the pipeline starts.
    system_metrics: bool = True
    # Seconds between two samples (MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL in the Trainer).
    system_metrics_interval_seconds: float = Field(2.0, gt=0)


class ServingSection(_Section):
    """Traffic split and monitoring around TF Serving (`mptfx serve`, components/serving/)."""

    # The Gateway API Gateway the rendered HTTPRoute attaches to ("" namespace = the route's).
    gateway: str = "mptfx-gateway"
    gateway_namespace: str = ""
    # `mptfx serve canary VERSION` without --weight: this percentage of predict requests.
    canary_weight: int = Field(10, ge=0, le=100)
    # PrometheusRule alerts: p99 request latency above this, error ratio above max_error_rate.
    p99_latency_budget_ms: float = Field(250.0, gt=0)
    max_error_rate: float = Field(0.01, gt=0, le=1)
    # `mptfx serve rollout`: the automatic canary analysis (components/serving/config.py).
    analysis: AnalysisSection = Field(default_factory=AnalysisSection)
    # What the request logger in the serving pod keeps for `mptfx monitor`.
    request_log: RequestLogSection = Field(default_factory=RequestLogSection)


class Config(_Section):
    """The whole pipeline configuration; see `configs/local.yaml` for every key."""

    pipeline: PipelineSection = Field(default_factory=PipelineSection)
    data: DataSection = Field(default_factory=DataSection)
    model: ModelSection = Field(default_factory=ModelSection)
    trainer: TrainerSection = Field(default_factory=TrainerSection)
    evaluator: EvaluatorSection = Field(default_factory=EvaluatorSection)
    infra: InfraSection = Field(default_factory=InfraSection)
    pusher: PusherSection = Field(default_factory=PusherSection)
    export: ExportSection = Field(default_factory=ExportSection)
    tflite: TFLiteSection = Field(default_factory=TFLiteSection)
    tracking: TrackingSection = Field(default_factory=TrackingSection)
    serving: ServingSection = Field(default_factory=ServingSection)
    monitor: MonitorSection = Field(default_factory=MonitorSection)
    kubernetes: KubernetesSection = Field(default_factory=KubernetesSection)
    # The data pipeline.name and pusher.model_name were named after, when the config file
    # and --set gave neither (pipelines/config.py load_config); None when they were given.
    _named_after: str | None = PrivateAttr(default=None)

    @property
    def named_after(self) -> str | None:
        """The data source the pipeline and model were named after, or None."""
        return self._named_after

    def name_after(self, source: str) -> None:
        """Record that the names came from `source` (load_config does it)."""
        self._named_after = source

    def trainer_custom_config(self) -> dict[str, Any]:
        """The JSON-able dict the Trainer's run_fn receives as `custom_config`: each section
        of `TrainerConfig` with the keys that section declares (of `data`, the Trainer's)."""
        return {
            name: getattr(self, name).model_dump(include=set(field.annotation.model_fields))
            for name, field in TrainerConfig.model_fields.items()
        }

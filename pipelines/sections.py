"""The sections only the runner reads (`pipeline`, `kubernetes`), the naming of a run (after
its data; a distilled student's `-student`), and the two sections composed of several
packages' keys (`data`, `serving`).

The component packages own the sections they read (components/<pkg>/config.py);
pipelines/config.py composes everything into the one `Config`. Importing this module is
cheap (pydantic only).

    KubernetesSection().pools["gpu"].gpus   # 1
    names_for_data("/data/My Flowers/")     # ("My-Flowers", "My-Flowers")
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from components.core.sections import NAME_PATTERN, StrictSection
from components.ingest.config import BUILTIN_DIGITS, SYNTHETIC_VOLUMES, IngestDataSection
from components.monitor.config import RequestLogSection
from components.serving.config import ServingSection as ServingKeys
from components.trainer.config import DataSection as TrainerDataSection

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

# A distilled run's model and pipeline names end with this (pipelines/distill.py).
STUDENT_SUFFIX = "-student"


def name_the_student(tree: dict[str, Any]) -> None:
    """In a config tree whose names are filled in: `-student` on the run's model and
    pipeline names when the teacher's model name is the run's own, so that the teacher
    keeps serving (pipelines/distill.py says why)."""
    sections = [tree.get(name) for name in ("trainer", "pusher", "pipeline")]
    if not all(isinstance(section, dict) for section in sections):
        return  # validation names the section that is not a mapping
    trainer, pusher, pipeline = sections
    distill = trainer.get("distill")
    if not isinstance(distill, dict) or not distill.get("teacher"):
        return
    own_name = pusher.get("model_name")
    teacher_name = distill.get("teacher_model_name") or own_name
    if not isinstance(own_name, str) or teacher_name != own_name:
        return
    trainer["distill"] = {**distill, "teacher_model_name": teacher_name}
    tree["pusher"] = {**pusher, "model_name": f"{own_name}{STUDENT_SUFFIX}"}
    if isinstance(pipeline.get("name"), str):
        tree["pipeline"] = {**pipeline, "name": f"{pipeline['name']}{STUDENT_SUFFIX}"}


class PipelineSection(StrictSection):
    # null in a config file: named after the data (`names_for_data`), said in the run's first line.
    name: str = Field("mptfx-digits", pattern=NAME_PATTERN)
    enable_cache: bool = True
    # Beam options of StatisticsGen, the Evaluator and the other Beam components, e.g.
    # [--runner=FlinkRunner, --flink_master=host:8081]; [] = Beam's DirectRunner in process.
    beam_pipeline_args: list[str] = Field(default_factory=list)

class DataSection(IngestDataSection, TrainerDataSection):
    """`data`: the Trainer's part (`channels`) and the Ingest's."""


class ServingSection(ServingKeys):
    """`serving`: the serving package's keys and what the monitor's request logger keeps."""

    # What the request logger in the serving pod keeps for `mptfx monitor`.
    request_log: RequestLogSection = Field(default_factory=RequestLogSection)


class NodePoolSection(StrictSection):
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


class MetadataDatabaseSection(StrictSection):
    """The shared ML Metadata database every node pod writes to (the in-cluster PostgreSQL)."""

    engine: Literal["postgresql", "mysql"] = "postgresql"
    host: str = "mptfx-postgres"
    port: int = Field(5432, ge=1, le=65535)
    database: str = "mlmd"
    user: str = "mptfx"
    # The password is never in the config: pods read it from this Secret's key.
    password_secret: str = "mptfx-postgres"
    password_key: str = "password"


class KubernetesTrainerSection(StrictSection):
    # > 1: the Trainer is an Indexed Job of this many pods (MultiWorkerMirroredStrategy).
    workers: int = Field(1, ge=1)
    # Emit a Kubeflow TFJob (kubeflow.org/v1, Training Operator) instead of the Indexed Job.
    use_tfjob: bool = False
    port: int = Field(2222, ge=1, le=65535)


class KubernetesSection(StrictSection):
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

"""Kubeflow Pipelines v2 export: the same pipeline as a KFP PipelineSpec (Kubeflow, Vertex AI).

    mptfx k8s compile --engine kfp --pipeline-root gs://bucket/mptfx --out build/kfp
    # build/kfp/<pipeline>.json  the PipelineJob (Vertex AI), written by TFX's KubeflowV2DagRunner
    # build/kfp/<pipeline>.yaml  PipelineSpec + PlatformSpec documents (Kubeflow Pipelines upload)

Every step carries its node pool (`kubernetes.component_pools`): CPU and memory limits and the
accelerator type and count in the PipelineSpec's container resources (what Vertex AI
schedules on), and the pool's node selector and tolerations in the Kubernetes PlatformSpec
(`platforms.kubernetes.deploymentSpec.executors.<executor>`, kfp-kubernetes'
KubernetesExecutorConfig: `nodeSelector.labels`, `tolerations`), which the KFP backend applies
to the step's pod. kfp-kubernetes itself needs kfp 2, whose urllib3<2 our pins exclude, so the
PlatformSpec is built on the installed kfp-pipeline-spec protos. The pipeline root (where
the steps write their outputs) is a gs:// or s3:// URI.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pipelines.config import Config

_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "m": 1e-3}


def quantity(text: str) -> float:
    """A Kubernetes quantity as a number: `"500m"` → 0.5, `"2Gi"` → 2147483648.0."""
    match = _QUANTITY.match(str(text).strip())
    if not match or match.group(2) not in {**_BINARY, **_DECIMAL}:
        raise ValueError(f"not a Kubernetes quantity. Received: {text!r}")
    number, unit = float(match.group(1)), match.group(2)
    return number * (_BINARY.get(unit) or _DECIMAL[unit])


def accelerator_type(accelerator: str) -> str:
    """GKE accelerator name → KFP/Vertex type: `nvidia-l4` → `NVIDIA_L4`."""
    return accelerator.upper().replace("-", "_")


def resource_spec(pool: Any) -> Any:
    """The KFP ResourceSpec of a node pool: CPU and memory limits, GPU type and count."""
    from kfp.pipeline_spec import pipeline_spec_pb2

    spec = pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec.ResourceSpec(
        cpu_limit=quantity(pool.limits.get("cpu", "1")),
        memory_limit=round(quantity(pool.limits.get("memory", "4Gi")) / 1e9, 3),  # in GB
    )
    if pool.gpus:
        spec.accelerator.type = accelerator_type(pool.accelerator or "nvidia-tesla-t4")
        spec.accelerator.count = pool.gpus
    return spec


# Object stores the KFP backend and Vertex AI write step outputs to.
PIPELINE_ROOT_SCHEMES = ("gs://", "s3://", "minio://")


def check_pipeline_root(uri: str) -> str:
    """`uri` if it is a gs://, s3:// or minio:// URI.

    Raises:
        ValueError: another scheme or a local path, named (the steps run elsewhere).
    """
    if not uri.startswith(PIPELINE_ROOT_SCHEMES) or not uri.split("://", 1)[1].strip("/"):
        schemes = ", ".join(f"{scheme}..." for scheme in PIPELINE_ROOT_SCHEMES)
        raise ValueError(f"the KFP pipeline root must be a bucket URI ({schemes}): the steps "
                         f"run in the cluster, not here. Received: {uri!r}")
    return uri.rstrip("/")


def kubernetes_executor_config(pool: Any) -> dict[str, Any]:
    """The pool's scheduling as a kfp-kubernetes KubernetesExecutorConfig (JSON names)."""
    from pipelines.kubernetes.manifests import pool_tolerations

    executor: dict[str, Any] = {}
    if pool.node_selector:
        executor["nodeSelector"] = {"labels": dict(pool.node_selector)}
    tolerations = [{_CAMEL.get(key, key): value for key, value in t.items()}
                   for t in pool_tolerations(pool)]
    if tolerations:
        executor["tolerations"] = tolerations
    return executor


_CAMEL = {"toleration_seconds": "tolerationSeconds"}


def platform_spec(config: Config, pipeline_spec: dict[str, Any]) -> dict[str, Any]:
    """The PlatformSpec document: each step's KubernetesExecutorConfig, keyed by the
    executor label the PipelineSpec gives the step."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    k8s = config.kubernetes
    executors = {}
    for task_id, task in pipeline_spec["root"]["dag"]["tasks"].items():
        component = pipeline_spec["components"][task["componentRef"]["name"]]
        pool = k8s.pools[k8s.component_pools.get(task_id, k8s.default_pool)]
        label = component.get("executorLabel")
        deployed = pipeline_spec["deploymentSpec"]["executors"].get(label, {})
        executor = kubernetes_executor_config(pool)
        if executor and "container" in deployed:  # resolvers and importers run no pod
            executors[label] = executor
    spec = {"platforms": {"kubernetes": {"deploymentSpec": {"executors": executors}}}}
    # Parsing checks the document against the PlatformSpec proto (unknown fields fail).
    json_format.ParseDict(spec, pipeline_spec_pb2.PlatformSpec())
    return spec


def export_kfp(config: Config, pipeline: Any, out_dir: str | Path,
               pipeline_root: str | None = None) -> Path:
    """Write the KFP v2 pipeline of `pipeline` to `<out_dir>/<pipeline name>.json` (the
    PipelineJob) and `.yaml` (PipelineSpec and PlatformSpec); returns the .json path.

    `pipeline_root`: a gs:// / s3:// URI for the steps' outputs (see `check_pipeline_root`);
    default the pipeline's own root.
    """
    import yaml
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner

    k8s = config.kubernetes
    if pipeline_root is not None:
        pipeline.pipeline_info.pipeline_root = check_pipeline_root(pipeline_root)
    for component in pipeline.components:
        pool = k8s.pools[k8s.component_pools.get(component.id, k8s.default_pool)]
        if hasattr(component, "with_platform_config") and hasattr(component, "executor_spec"):
            component.with_platform_config(resource_spec(pool))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    filename = f"{config.pipeline.name}.json"
    runner = kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(default_image=k8s.image),
        output_dir=str(out_dir),
        output_filename=filename,
    )
    job = runner.run(pipeline, write_out=True)
    spec = job["pipelineSpec"]
    spec["defaultPipelineRoot"] = pipeline.pipeline_info.pipeline_root
    documents = [spec, platform_spec(config, spec)]
    (out_dir / f"{config.pipeline.name}.yaml").write_text(
        yaml.safe_dump_all(documents, sort_keys=False))
    return out_dir / filename

"""Kubeflow Pipelines v2 export: the same pipeline as a KFP PipelineSpec (Kubeflow, Vertex AI).

    mptfx k8s compile --engine kfp --out build/kfp   # build/kfp/<pipeline>.json

Written by TFX's own `KubeflowV2DagRunner`; the Trainer step carries the accelerator type and
count of its node pool (`kubernetes.pools.<pool>.accelerator` / `.gpus`) and every step the
pool's CPU and memory limits, so Vertex AI Pipelines schedules the Trainer on GPUs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

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


def export_kfp(config: Any, pipeline: Any, out_dir: str | Path) -> Path:
    """Write the KFP v2 pipeline spec of `pipeline` to `<out_dir>/<pipeline name>.json`."""
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner

    k8s = config.kubernetes
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
    runner.run(pipeline, write_out=True)
    return out_dir / filename

"""What every Kubernetes object mptfx renders shares, defined once: the image's user, the pod
and container security contexts, the standard labels and metadata, the environment every
mptfx container starts with (the cluster's MLflow server and its login), and the YAML files.

The run's Jobs (`manifests`), the InfraValidator's TF Serving sidecar (`infra_sidecar`), the
serving objects (`serving`) and the rollout CronJob (`rollout_job`) take them from here; the
kustomize base (k8s/base) writes the same contexts out by hand, and the tests hold every pod
and container of both to them (tests/unit/test_k8s_objects.py,
tests/integration/test_k8s_manifests.py).

    pod = {"securityContext": pod_security_context(),
           "containers": [{"name": "c", "securityContext": container_security_context()}]}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipelines.sections import KubernetesSection

IMAGE_UID = 10001  # the non-root user and group of the Dockerfile (USER 10001:10001)
APP_NAME = "mptfx"


def container_security_context() -> dict[str, Any]:
    """The securityContext of every container: uid and gid of the image, no privilege
    escalation, a read-only root file system, no capabilities, the runtime's seccomp."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": IMAGE_UID,
        "runAsGroup": IMAGE_UID,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security_context() -> dict[str, Any]:
    """The securityContext of every pod; fsGroup lets it write to the workspace volume."""
    return {"runAsNonRoot": True, "runAsUser": IMAGE_UID, "runAsGroup": IMAGE_UID,
            "fsGroup": IMAGE_UID, "seccompProfile": {"type": "RuntimeDefault"}}


def app_labels(component: str, name: str = APP_NAME) -> dict[str, str]:
    """The recommended `app.kubernetes.io/*` labels of an object of mptfx."""
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/component": component,
            "app.kubernetes.io/part-of": APP_NAME}


def metadata(name: str, namespace: str, labels: dict[str, str],
             **extra: Any) -> dict[str, Any]:
    """An object's metadata: its name, namespace, (a copy of) `labels`, and `extra` fields
    such as `annotations`."""
    return {"name": name, "namespace": namespace, "labels": dict(labels), **extra}


def image_env() -> list[dict[str, Any]]:
    """What every container of the mptfx image needs whatever it runs."""
    return [{"name": "HOME", "value": "/tmp"},  # Keras and Beam write caches below $HOME
            {"name": "PYTHONUNBUFFERED", "value": "1"}]


def mlflow_env(k8s: KubernetesSection) -> list[dict[str, Any]]:
    """The cluster's MLflow server, and its login from the Secret `kubernetes.tracking_secret`
    (keys `username` and `password`) when it has one: never a plain value."""
    env: list[dict[str, Any]] = [{"name": "MLFLOW_TRACKING_URI", "value": k8s.tracking_uri}]
    if k8s.tracking_secret:
        env += [{"name": f"MLFLOW_TRACKING_{key.upper()}", "valueFrom": {"secretKeyRef": {
            "name": k8s.tracking_secret, "key": key}}} for key in ("username", "password")]
    return env


def write_manifests(path: Path, objects: list[dict[str, Any]], header: str = "") -> Path:
    """Write `objects` as one multi-document YAML file at `path`, `header` as comments."""
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    comments = "".join(f"# {line}\n".replace("# \n", "#\n") for line in header.splitlines())
    path.write_text(comments + yaml.safe_dump_all(objects, sort_keys=False))
    return path

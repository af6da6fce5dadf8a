"""Every Kubernetes object a run creates, built as a plain dict: what `mptfx k8s compile`
writes as YAML, what `kubernetes-validate` checks, and the request body the client sends.
Security contexts, standard labels and the MLflow environment come from `objects`."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from components.errors import EXIT_USAGE
from components.pod_env import PASSWORD_ENV
from pipelines.config import Config
from pipelines.kubernetes.infra_sidecar import INFRA_NODE, add_tf_serving_sidecar
from pipelines.kubernetes.ir import NodePlan
from pipelines.kubernetes.objects import (
    app_labels,
    container_security_context,
    image_env,
    metadata,
    mlflow_env,
    pod_security_context,
)

LABEL_RUN = "mptfx.dev/run-id"
LABEL_NODE = "mptfx.dev/node"
LABEL_ATTEMPT = "mptfx.dev/attempt"
ANNOTATION_NODE_ID = "mptfx.dev/node-id"
ANNOTATION_UPSTREAM = "mptfx.dev/upstream"
ANNOTATION_PLAN = "mptfx.dev/run-nodes"
CONTAINER_NAME = "node"
TFJOB_CONTAINER_NAME = "tensorflow"  # the Training Operator looks for this container name
TFJOB_GROUP, TFJOB_VERSION, TFJOB_PLURAL = "kubeflow.org", "v1", "tfjobs"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


def job_name(run_id: str, node_id: str, attempt: int = 1) -> str:
    """`mptfx-<run>-<node>[-a<attempt>]`, a DNS label short enough for Indexed Job pod names."""
    name = f"mptfx-{_slug(run_id)}-{_slug(node_id)}" + (f"-a{attempt}" if attempt > 1 else "")
    if len(name) > 56:  # pods of an Indexed Job are <job>-<index>: keep room for the index
        digest = hashlib.sha256(name.encode()).hexdigest()[:6]
        name = f"{name[:49].rstrip('-')}-{digest}"
    return name


def _labels(run_id: str, node_id: str, attempt: int, component: str) -> dict[str, str]:
    return {**app_labels(component), LABEL_RUN: run_id, LABEL_NODE: node_id,
            LABEL_ATTEMPT: str(attempt)}


def _resources(pool: Any) -> dict[str, Any]:
    limits = dict(pool.limits)
    if pool.gpus:
        limits["nvidia.com/gpu"] = str(pool.gpus)
    return {"requests": dict(pool.requests), "limits": limits}


def pool_tolerations(pool: Any) -> list[dict[str, Any]]:
    """The pool's tolerations; a GPU pool also tolerates the nvidia.com/gpu taint."""
    tolerations = [dict(t) for t in pool.tolerations]
    if pool.gpus and not any(t.get("key") == "nvidia.com/gpu" for t in tolerations):
        tolerations.append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    return tolerations


def _volumes(config: Config, gpus: int) -> tuple[list[dict], list[dict]]:
    k8s = config.kubernetes
    volumes = [
        {"name": "workspace", "persistentVolumeClaim": {"claimName": k8s.workspace_claim}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "8Gi"}},
    ]
    mounts = [
        {"name": "workspace", "mountPath": k8s.workspace},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if gpus:  # NCCL and tf.data use shared memory; the default 64 MiB is too small
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    return volumes, mounts


def pod_env(config: Config) -> list[dict[str, Any]]:
    """The environment of every pipeline pod: the ML Metadata password and the MLflow login
    from Secrets, the cluster's MLflow server; nothing secret is ever a plain value."""
    k8s = config.kubernetes
    return [*image_env(),
            {"name": PASSWORD_ENV, "valueFrom": {"secretKeyRef": {
                "name": k8s.metadata.password_secret, "key": k8s.metadata.password_key}}},
            *mlflow_env(k8s)]


def _pod_spec(config: Config, pool_name: str, container: dict[str, Any],
              restart_policy: str = "Never") -> dict[str, Any]:
    k8s = config.kubernetes
    pool = k8s.pools[pool_name]
    volumes, mounts = _volumes(config, pool.gpus)
    container = {
        "image": k8s.image,
        "imagePullPolicy": k8s.image_pull_policy,
        "env": pod_env(config),
        "resources": _resources(pool),
        "securityContext": container_security_context(),
        "volumeMounts": mounts,
        **container,
    }
    spec: dict[str, Any] = {
        "serviceAccountName": k8s.service_account,
        "automountServiceAccountToken": False,
        "restartPolicy": restart_policy,
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": volumes,
    }
    if pool.node_selector:
        spec["nodeSelector"] = dict(pool.node_selector)
    tolerations = pool_tolerations(pool)
    if tolerations:
        spec["tolerations"] = tolerations
    return spec


def pod_failure_policy(container: str) -> dict[str, Any]:
    """Exit code 2 (a usage or configuration error: the same on every attempt) fails the Job
    at once; a pod evicted or preempted (DisruptionTarget) is retried without counting
    against backoffLimit; every other failure (a crash, OOM) counts and retries."""
    return {"rules": [
        {"action": "FailJob",
         "onExitCodes": {"containerName": container, "operator": "In", "values": [EXIT_USAGE]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget",
                                                  "status": "True"}]},
    ]}


def _node_command(ir_location: str, node_id: str) -> list[str]:
    return ["python", "-m", "pipelines.node_entrypoint", "--ir", ir_location, "--node", node_id]


def worker_hosts(name: str, workers: int, port: int) -> list[str]:
    """The Indexed Job's pods by their stable DNS names `<job>-<index>.<service>`."""
    return [f"{name}-{index}.{name}:{port}" for index in range(workers)]


def _job(config: Config, run_id: str, node: NodePlan, plan: list[NodePlan], attempt: int,
         container: dict[str, Any], extra_spec: dict[str, Any] | None = None,
         subdomain: str | None = None) -> dict[str, Any]:
    k8s = config.kubernetes
    name = job_name(run_id, node.node_id, attempt)
    labels = _labels(run_id, node.node_id, attempt, "pipeline-node")
    pod_spec = _pod_spec(config, node.pool, {"name": CONTAINER_NAME, **container})
    if subdomain:
        pod_spec["subdomain"] = subdomain
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(name, k8s.namespace, labels, annotations={
            ANNOTATION_NODE_ID: node.node_id,
            ANNOTATION_UPSTREAM: ",".join(node.upstream),
            ANNOTATION_PLAN: ",".join(n.node_id for n in plan),
            "mptfx.dev/pool": node.pool,
        }),
        "spec": {
            "backoffLimit": k8s.backoff_limit,
            "podFailurePolicy": pod_failure_policy(CONTAINER_NAME),  # needs restartPolicy Never
            "activeDeadlineSeconds": k8s.active_deadline_seconds,
            "ttlSecondsAfterFinished": k8s.ttl_seconds_after_finished,
            **(extra_spec or {}),
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


def node_objects(config: Config, run_id: str, node: NodePlan, plan: list[NodePlan],
                 ir_location: str, attempt: int = 1,
                 trainer_env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """What the runner creates for one node: a Job; for a multi-worker Trainer an Indexed Job
    and its headless Service, or a Kubeflow TFJob. `trainer_env`: plain variables added to
    the Trainer's pods only (the MLflow run its system metrics go to: MLFLOW_RUN_ID)."""
    objects = _node_objects(config, run_id, node, plan, ir_location, attempt)
    if node.is_trainer and trainer_env:
        for body in objects:
            for replica in _pod_templates(body):
                for container in replica["spec"]["containers"]:
                    container["env"] += [{"name": k, "value": v} for k, v in trainer_env.items()]
    return objects


def _pod_templates(body: dict[str, Any]) -> list[dict[str, Any]]:
    if body["kind"] == "TFJob":
        return [spec["template"] for spec in body["spec"]["tfReplicaSpecs"].values()]
    return [body["spec"]["template"]] if body["kind"] == "Job" else []


def _node_objects(config: Config, run_id: str, node: NodePlan, plan: list[NodePlan],
                  ir_location: str, attempt: int) -> list[dict[str, Any]]:
    trainer = config.kubernetes.trainer
    command = _node_command(ir_location, node.node_id)
    if not node.is_trainer or trainer.workers == 1:
        job = _job(config, run_id, node, plan, attempt, {"command": command})
        if node.node_id == INFRA_NODE and config.infra.serving_image:
            add_tf_serving_sidecar(job["spec"]["template"]["spec"], config)
        return [job]
    if trainer.use_tfjob:
        return [tfjob(config, run_id, node, plan, ir_location, attempt)]
    name = job_name(run_id, node.node_id, attempt)
    hosts = worker_hosts(name, trainer.workers, trainer.port)
    container = {
        "command": command + ["--worker-hosts", ",".join(hosts)],
        "ports": [{"name": "worker", "containerPort": trainer.port, "protocol": "TCP"}],
    }
    indexed = {"completionMode": "Indexed", "completions": trainer.workers,
               "parallelism": trainer.workers}
    job = _job(config, run_id, node, plan, attempt, container, indexed, subdomain=name)
    return [worker_service(config, run_id, node, attempt), job]


def worker_service(config: Config, run_id: str, node: NodePlan, attempt: int) -> dict[str, Any]:
    """The headless Service that gives each worker pod of the Indexed Job a DNS name."""
    name = job_name(run_id, node.node_id, attempt)
    labels = _labels(run_id, node.node_id, attempt, "pipeline-node")
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(name, config.kubernetes.namespace, labels),
        "spec": {
            "clusterIP": "None",
            # Workers must resolve each other before they are ready: they are never "ready".
            "publishNotReadyAddresses": True,
            "selector": {LABEL_RUN: run_id, LABEL_NODE: node.node_id,
                         LABEL_ATTEMPT: str(attempt)},
            "ports": [{"name": "worker", "port": config.kubernetes.trainer.port,
                       "targetPort": config.kubernetes.trainer.port, "protocol": "TCP"}],
        },
    }


def tfjob(config: Config, run_id: str, node: NodePlan, plan: list[NodePlan], ir_location: str,
          attempt: int = 1) -> dict[str, Any]:
    """A Kubeflow TFJob (kubeflow.org/v1): the Training Operator sets TF_CONFIG itself."""
    k8s = config.kubernetes
    job = _job(config, run_id, node, plan, attempt, {
        "command": _node_command(ir_location, node.node_id),
        "ports": [{"name": "tfjob-port", "containerPort": k8s.trainer.port, "protocol": "TCP"}],
    })
    template = job["spec"]["template"]
    template["spec"]["containers"][0]["name"] = TFJOB_CONTAINER_NAME
    del template["spec"]["restartPolicy"]  # the replica spec's restartPolicy governs
    # TFJobs know no podFailurePolicy; "ExitCode" is the Training Operator's equivalent: exit
    # codes 1-127 (our 1 and 2) fail the replica for good, 128-255 (killed, OOM) restart it.
    return {
        "apiVersion": f"{TFJOB_GROUP}/{TFJOB_VERSION}",
        "kind": "TFJob",
        "metadata": job["metadata"],
        "spec": {
            "runPolicy": {
                "backoffLimit": k8s.backoff_limit,
                "activeDeadlineSeconds": k8s.active_deadline_seconds,
                "ttlSecondsAfterFinished": k8s.ttl_seconds_after_finished,
                "cleanPodPolicy": "Running",
            },
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": k8s.trainer.workers,
                    "restartPolicy": "ExitCode",
                    "template": template,
                },
            },
        },
    }


def config_map(config: Config, run_id: str, config_yaml: str) -> dict[str, Any]:
    """The run's effective configuration, read by the in-cluster driver."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(f"mptfx-{_slug(run_id)}-config", config.kubernetes.namespace,
                             _labels(run_id, "driver", 1, "driver")),
        "data": {"config.yaml": config_yaml},
    }


DRIVER_CONFIG = "/etc/mptfx/config.yaml"


def driver_job(config: Config, run_id: str, forwarded: list[str] = (), resume: bool = False,
               name_suffix: str = "") -> dict[str, Any]:
    """The in-cluster driver: `mptfx k8s submit --in-cluster` under its own ServiceAccount.

    `forwarded`: further `submit` flags for it (`k8s_commands.driver_arguments`); `resume`
    makes it resume the run instead of starting it.
    """
    k8s = config.kubernetes
    name = f"mptfx-{_slug(run_id)}-driver{name_suffix}"
    if len(name) > 63:
        name = f"{name[:56].rstrip('-')}-{hashlib.sha256(name.encode()).hexdigest()[:6]}"
    labels = _labels(run_id, "driver", 1, "driver")
    config_name = f"mptfx-{_slug(run_id)}-config"
    pod_spec = _pod_spec(config, k8s.default_pool, {
        "name": "driver",
        "command": ["mptfx", "k8s", "submit", "--in-cluster",
                    "--resume" if resume else "--run-id", run_id,
                    "--config", DRIVER_CONFIG, *forwarded],
        "resources": {"requests": {"cpu": "500m", "memory": "2Gi"},
                      "limits": {"cpu": "1", "memory": "4Gi"}},
    })
    pod_spec["serviceAccountName"] = k8s.driver_service_account
    pod_spec["automountServiceAccountToken"] = True  # the driver talks to the API server
    pod_spec["volumes"].append({"name": "config", "configMap": {"name": config_name}})
    pod_spec["containers"][0]["volumeMounts"].append(
        {"name": "config", "mountPath": "/etc/mptfx", "readOnly": True})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(name, k8s.namespace, labels),
        "spec": {
            "backoffLimit": 0,  # a driver that died is resumed by hand: mptfx k8s submit --resume
            "podFailurePolicy": pod_failure_policy("driver"),
            "activeDeadlineSeconds": k8s.active_deadline_seconds,
            "ttlSecondsAfterFinished": k8s.ttl_seconds_after_finished,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


def run_objects(config: Config, run_id: str, plan: list[NodePlan], ir_location: str,
                config_yaml: str | None = None) -> list[dict[str, Any]]:
    """Every object a run creates, in creation order (for `mptfx k8s compile`)."""
    objects: list[dict[str, Any]] = []
    if config_yaml is not None:
        objects += [config_map(config, run_id, config_yaml), driver_job(config, run_id)]
    for node in plan:
        objects += node_objects(config, run_id, node, plan, ir_location)
    return objects


"""Run the pipeline on Kubernetes: one batch/v1 Job per TFX node, created as its upstream
nodes succeed, on the official `kubernetes` client.

    runner = KubernetesRunner(config, batch_api, core_api, out=sys.stdout)
    report = runner.run(run_id, plan_nodes(ir, config), ir_uri)

Kubernetes itself is the engine: Jobs retry failed pods (`backoffLimit`), an Indexed Job plus
a headless Service runs a multi-worker Trainer (or a Kubeflow TFJob when the Training Operator
is installed), node pools come from `nodeSelector`, tolerations and resource limits. The driver
only decides what to create next, watches the Jobs and streams their pods' logs. Everything it
knows is in the cluster (Jobs labelled with the run id), so a driver that was killed resumes
where the run stands: finished nodes are not redone, running Jobs are watched again, failed
ones get a new attempt.

Every object is built as a plain dict (what `mptfx k8s compile` writes as YAML, and what
`kubernetes-validate` checks), and passed to the client as the request body.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from pipelines.errors import UsageError

LABEL_RUN = "mptfx.dev/run-id"
LABEL_NODE = "mptfx.dev/node"
LABEL_ATTEMPT = "mptfx.dev/attempt"
ANNOTATION_NODE_ID = "mptfx.dev/node-id"
ANNOTATION_UPSTREAM = "mptfx.dev/upstream"
ANNOTATION_PLAN = "mptfx.dev/run-nodes"
APP_LABELS = {"app.kubernetes.io/name": "mptfx", "app.kubernetes.io/part-of": "mptfx"}
CONTAINER_NAME = "node"
TFJOB_CONTAINER_NAME = "tensorflow"  # the Training Operator looks for this container name
TFJOB_GROUP, TFJOB_VERSION, TFJOB_PLURAL = "kubeflow.org", "v1", "tfjobs"
PASSWORD_ENV = "MPTFX_MLMD_PASSWORD"
IMAGE_UID = 10001  # the non-root user of the Dockerfile
TRAINER_NODE = "Trainer"
IR_DIR = "_mptfx"


class KubernetesError(UsageError):
    """The Kubernetes API refused or could not be reached: exit 2 with this one line."""


# ---------------------------------------------------------------------------------------------
# The plan: which nodes, in which order, on which pool


@dataclasses.dataclass(frozen=True)
class NodePlan:
    """One TFX node as the runner schedules it."""

    node_id: str
    upstream: tuple[str, ...]
    pool: str

    @property
    def is_trainer(self) -> bool:
        return self.node_id == TRAINER_NODE


def plan_nodes(ir: Any, config: Any) -> list[NodePlan]:
    """The IR's nodes in topological order with their upstream nodes and node pool."""
    k8s = config.kubernetes
    plan = []
    for node in ir.nodes:
        info = node.pipeline_node
        node_id = info.node_info.id
        plan.append(NodePlan(
            node_id=node_id,
            upstream=tuple(info.upstream_nodes),
            pool=k8s.component_pools.get(node_id, k8s.default_pool),
        ))
    return plan


def prepare_ir(ir: Any, config: Any) -> None:
    """Point the IR at the cluster's ML Metadata database and Beam runner (in place)."""
    from ml_metadata.proto import metadata_store_pb2
    from tfx.proto.orchestration import executable_spec_pb2, pipeline_pb2

    from pipelines.node_entrypoint import set_connection_config

    database = config.kubernetes.metadata
    connection = metadata_store_pb2.ConnectionConfig()
    if database.engine == "postgresql":
        connection.postgresql.host = database.host
        connection.postgresql.port = str(database.port)
        connection.postgresql.dbname = database.database
        connection.postgresql.user = database.user
    else:
        connection.mysql.host = database.host
        connection.mysql.port = database.port
        connection.mysql.database = database.database
        connection.mysql.user = database.user
    set_connection_config(ir, connection)
    beam_args = config.kubernetes.beam_pipeline_args
    if beam_args:
        deployment = pipeline_pb2.IntermediateDeploymentConfig()
        ir.deployment_config.Unpack(deployment)
        for spec in deployment.executor_specs.values():
            beam = executable_spec_pb2.BeamExecutableSpec()
            if spec.Unpack(beam):
                del beam.beam_pipeline_args[:]
                beam.beam_pipeline_args.extend(beam_args)
                spec.Pack(beam)
        ir.deployment_config.Pack(deployment)


def ir_uri(pipeline_root: str, run_id: str) -> str:
    """Where a run's compiled pipeline is stored: inside the pipeline root, beside the outputs."""
    return f"{pipeline_root.rstrip('/')}/{IR_DIR}/{run_id}/pipeline.json"


def store_ir(ir: Any, uri: str) -> None:
    """Write the IR as JSON where every pod reads it (the workspace PVC, gs:// or s3://)."""
    from google.protobuf import json_format
    from tfx.dsl.io import fileio

    try:
        fileio.makedirs(uri.rsplit("/", 1)[0])
        with fileio.open(uri, "w") as handle:
            handle.write(json_format.MessageToJson(ir, sort_keys=True))
    except Exception as error:  # fileio raises per-filesystem errors
        raise UsageError(
            f"cannot write the pipeline IR to {uri}: {str(error).splitlines()[0]}; the workspace "
            "must be reachable where the driver runs (run it in the cluster: mptfx k8s submit "
            "--driver-job)"
        ) from None


# ---------------------------------------------------------------------------------------------
# Objects


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
    return {**APP_LABELS, "app.kubernetes.io/component": component,
            LABEL_RUN: run_id, LABEL_NODE: node_id, LABEL_ATTEMPT: str(attempt)}


def _security_context() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": IMAGE_UID,
        "runAsGroup": IMAGE_UID,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _pod_security_context() -> dict[str, Any]:
    # fsGroup: the pod may write to the workspace volume.
    return {"runAsNonRoot": True, "runAsUser": IMAGE_UID, "runAsGroup": IMAGE_UID,
            "fsGroup": IMAGE_UID, "seccompProfile": {"type": "RuntimeDefault"}}


def _resources(pool: Any) -> dict[str, Any]:
    limits = dict(pool.limits)
    if pool.gpus:
        limits["nvidia.com/gpu"] = str(pool.gpus)
    return {"requests": dict(pool.requests), "limits": limits}


def _tolerations(pool: Any) -> list[dict[str, Any]]:
    tolerations = [dict(t) for t in pool.tolerations]
    if pool.gpus and not any(t.get("key") == "nvidia.com/gpu" for t in tolerations):
        tolerations.append({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    return tolerations


def _volumes(config: Any, gpus: int) -> tuple[list[dict], list[dict]]:
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


def _env(config: Any) -> list[dict[str, Any]]:
    database = config.kubernetes.metadata
    return [
        {"name": "HOME", "value": "/tmp"},  # Keras and Beam write caches below $HOME
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": PASSWORD_ENV, "valueFrom": {"secretKeyRef": {
            "name": database.password_secret, "key": database.password_key}}},
    ]


def _pod_spec(config: Any, pool_name: str, container: dict[str, Any],
              restart_policy: str = "Never") -> dict[str, Any]:
    k8s = config.kubernetes
    pool = k8s.pools[pool_name]
    volumes, mounts = _volumes(config, pool.gpus)
    container = {
        "image": k8s.image,
        "imagePullPolicy": k8s.image_pull_policy,
        "env": _env(config),
        "resources": _resources(pool),
        "securityContext": _security_context(),
        "volumeMounts": mounts,
        **container,
    }
    spec: dict[str, Any] = {
        "serviceAccountName": k8s.service_account,
        "automountServiceAccountToken": False,
        "restartPolicy": restart_policy,
        "securityContext": _pod_security_context(),
        "containers": [container],
        "volumes": volumes,
    }
    if pool.node_selector:
        spec["nodeSelector"] = dict(pool.node_selector)
    tolerations = _tolerations(pool)
    if tolerations:
        spec["tolerations"] = tolerations
    return spec


def _node_command(ir_location: str, node_id: str) -> list[str]:
    return ["python", "-m", "pipelines.node_entrypoint", "--ir", ir_location, "--node", node_id]


def worker_hosts(name: str, workers: int, port: int) -> list[str]:
    """The Indexed Job's pods by their stable DNS names `<job>-<index>.<service>`."""
    return [f"{name}-{index}.{name}:{port}" for index in range(workers)]


def _job(config: Any, run_id: str, node: NodePlan, plan: list[NodePlan], attempt: int,
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
        "metadata": {
            "name": name,
            "namespace": k8s.namespace,
            "labels": labels,
            "annotations": {
                ANNOTATION_NODE_ID: node.node_id,
                ANNOTATION_UPSTREAM: ",".join(node.upstream),
                ANNOTATION_PLAN: ",".join(n.node_id for n in plan),
                "mptfx.dev/pool": node.pool,
            },
        },
        "spec": {
            "backoffLimit": k8s.backoff_limit,
            "activeDeadlineSeconds": k8s.active_deadline_seconds,
            "ttlSecondsAfterFinished": k8s.ttl_seconds_after_finished,
            **(extra_spec or {}),
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


def node_objects(config: Any, run_id: str, node: NodePlan, plan: list[NodePlan],
                 ir_location: str, attempt: int = 1) -> list[dict[str, Any]]:
    """What the runner creates for one node: a Job; for a multi-worker Trainer an Indexed Job
    and its headless Service, or a Kubeflow TFJob."""
    trainer = config.kubernetes.trainer
    command = _node_command(ir_location, node.node_id)
    if not node.is_trainer or trainer.workers == 1:
        return [_job(config, run_id, node, plan, attempt, {"command": command})]
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


def worker_service(config: Any, run_id: str, node: NodePlan, attempt: int) -> dict[str, Any]:
    """The headless Service that gives each worker pod of the Indexed Job a DNS name."""
    name = job_name(run_id, node.node_id, attempt)
    labels = _labels(run_id, node.node_id, attempt, "pipeline-node")
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": config.kubernetes.namespace, "labels": labels},
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


def tfjob(config: Any, run_id: str, node: NodePlan, plan: list[NodePlan], ir_location: str,
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
                    "restartPolicy": "OnFailure",
                    "template": template,
                },
            },
        },
    }


def config_map(config: Any, run_id: str, config_yaml: str) -> dict[str, Any]:
    """The run's effective configuration, read by the in-cluster driver."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"mptfx-{_slug(run_id)}-config",
                     "namespace": config.kubernetes.namespace,
                     "labels": _labels(run_id, "driver", 1, "driver")},
        "data": {"config.yaml": config_yaml},
    }


def driver_job(config: Any, run_id: str) -> dict[str, Any]:
    """The in-cluster driver: `mptfx k8s submit --in-cluster` under its own ServiceAccount."""
    k8s = config.kubernetes
    name = f"mptfx-{_slug(run_id)}-driver"
    labels = _labels(run_id, "driver", 1, "driver")
    config_name = f"mptfx-{_slug(run_id)}-config"
    pod_spec = _pod_spec(config, k8s.default_pool, {
        "name": "driver",
        "command": ["mptfx", "k8s", "submit", "--in-cluster", "--run-id", run_id,
                    "--config", "/etc/mptfx/config.yaml"],
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
        "metadata": {"name": name, "namespace": k8s.namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,  # a driver that died is resumed by hand: mptfx k8s submit --resume
            "activeDeadlineSeconds": k8s.active_deadline_seconds,
            "ttlSecondsAfterFinished": k8s.ttl_seconds_after_finished,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


def run_objects(config: Any, run_id: str, plan: list[NodePlan], ir_location: str,
                config_yaml: str | None = None) -> list[dict[str, Any]]:
    """Every object a run creates, in creation order (for `mptfx k8s compile`)."""
    objects: list[dict[str, Any]] = []
    if config_yaml is not None:
        objects += [config_map(config, run_id, config_yaml), driver_job(config, run_id)]
    for node in plan:
        objects += node_objects(config, run_id, node, plan, ir_location)
    return objects


# ---------------------------------------------------------------------------------------------
# API errors as one line


def describe_api_error(error: Exception, action: str, target: str, namespace: str) -> str:
    """One line for a failed API call: what was refused, why, and what to do."""
    status = getattr(error, "status", None)
    message = _api_message(error)
    where = f"{target} in namespace {namespace}"
    if status == 403 and "exceeded quota" in message:
        return f"quota exceeded: cannot {action} {where}: {message}"
    if status == 403:
        return (f"forbidden: cannot {action} {where} (the ServiceAccount or user lacks RBAC "
                f"rights; see k8s/base/rbac.yaml): {message}")
    if status == 401:
        return f"unauthorized: cannot {action} {where}: the credentials were rejected"
    if status == 404:
        return (f"not found: cannot {action} {where}: {message} (is namespace {namespace} "
                f"applied? kubectl apply -k k8s/overlays/<cloud>)")
    if status == 409:
        return (f"already exists: cannot {action} {where}: {message} (resume the run with "
                f"--resume, or use a new run id)")
    if status == 422:
        return f"invalid: the API server rejected {target}: {message}"
    if status is not None:
        return f"cannot {action} {where}: HTTP {status} {getattr(error, 'reason', '')}: {message}"
    return f"cannot reach the Kubernetes API server to {action} {where}: {message}"


def _api_message(error: Exception) -> str:
    body = getattr(error, "body", None)
    if body:
        try:
            text = json.loads(body).get("message", "")
        except (TypeError, ValueError, AttributeError):
            text = str(body)
    else:
        text = getattr(error, "reason", None) or str(error)
    lines = str(text).strip().splitlines()
    return lines[0] if lines else type(error).__name__


@contextmanager
def api_call(action: str, target: str, namespace: str) -> Iterator[None]:
    """Turn the client's ApiException / connection errors into a KubernetesError line."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        yield
    except (ApiException, HTTPError, OSError) as error:
        raise KubernetesError(describe_api_error(error, action, target, namespace)) from None


# ---------------------------------------------------------------------------------------------
# The driver


@dataclasses.dataclass
class NodeStatus:
    """What the driver knows about one node of the run."""

    node_id: str
    state: str = "pending"  # pending | running | succeeded | failed | skipped
    job: str | None = None
    attempt: int = 0
    retries: int = 0
    started: float | None = None
    seconds: float | None = None
    message: str = ""


@dataclasses.dataclass
class RunReport:
    """The outcome of a run: one NodeStatus per node, in plan order."""

    run_id: str
    nodes: dict[str, NodeStatus]

    @property
    def succeeded(self) -> bool:
        return all(n.state == "succeeded" for n in self.nodes.values())

    @property
    def failed_nodes(self) -> list[str]:
        return [n.node_id for n in self.nodes.values() if n.state == "failed"]


def job_state(job: Any) -> tuple[str, str]:
    """("succeeded" | "failed" | "running", reason) from a V1Job's status conditions."""
    status = job.status
    for condition in (status.conditions if status and status.conditions else []):
        if condition.status != "True":
            continue
        if condition.type in ("Complete", "SuccessCriteriaMet"):
            return "succeeded", ""
        if condition.type in ("Failed", "FailureTarget"):
            return "failed", f"{condition.reason or 'Failed'}: {condition.message or ''}".strip()
    return "running", ""


def tfjob_state(obj: dict[str, Any]) -> tuple[str, str]:
    """The same for a TFJob custom object (its last condition)."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    for condition in reversed(conditions):
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Succeeded":
            return "succeeded", ""
        if condition.get("type") == "Failed":
            return "failed", f"{condition.get('reason', 'Failed')}: {condition.get('message', '')}"
    return "running", ""


class KubernetesRunner:
    """Schedules a run's nodes as Jobs and watches them to the end.

    Args:
        config: the mptfx Config (its `kubernetes` section).
        batch_api, core_api: `kubernetes.client.BatchV1Api()` / `CoreV1Api()` (or test doubles).
        custom_api: `CustomObjectsApi()`, needed only with `kubernetes.trainer.use_tfjob`.
        out: where the per-node progress lines go.
        log_dir: every pod's log is streamed into `<log_dir>/<node>.log`.
        follow_logs: also echo pod logs to `out`, prefixed with the node id.
    """

    def __init__(self, config: Any, batch_api: Any, core_api: Any, custom_api: Any = None,
                 out: TextIO = sys.stdout, log_dir: Path | None = None,
                 follow_logs: bool = False, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._k8s = config.kubernetes
        self._batch = batch_api
        self._core = core_api
        self._custom = custom_api
        self._out = out
        self._log_dir = log_dir
        self._follow_logs = follow_logs
        self._sleep = sleep
        self._clock = clock
        self._log_lines: dict[str, int] = {}

    @property
    def _namespace(self) -> str:
        return self._k8s.namespace

    def _say(self, line: str) -> None:
        print(line, file=self._out, flush=True)

    def run(self, run_id: str, plan: list[NodePlan], ir_location: str) -> RunReport:
        """Create each node's Job once its upstream nodes succeeded; watch all of them.

        Returns when every node succeeded, failed or was skipped because an upstream node
        failed. Jobs that already exist for `run_id` (a resumed run) are adopted.
        """
        report = RunReport(run_id, {n.node_id: NodeStatus(n.node_id) for n in plan})
        self._adopt_existing(run_id, plan, report)
        while True:
            self._skip_below_failures(plan, report)
            for node in plan:
                status = report.nodes[node.node_id]
                if status.state == "pending" and all(
                    self._upstream_state(report, u) == "succeeded" for u in node.upstream
                ):
                    self._create(run_id, node, plan, ir_location, status)
            running = [n for n in plan if report.nodes[n.node_id].state == "running"]
            if not running:
                if any(n.state == "pending" for n in report.nodes.values()):
                    raise RuntimeError(f"run {run_id}: pending nodes cannot start")
                return report
            for node in running:
                self._poll(node, report.nodes[node.node_id])
            if any(report.nodes[n.node_id].state == "running" for n in plan):
                self._sleep(self._k8s.poll_seconds)

    @staticmethod
    def _upstream_state(report: RunReport, node_id: str) -> str:
        # An upstream node outside the plan ran before (a partial plan): it counts as done.
        status = report.nodes.get(node_id)
        return "succeeded" if status is None else status.state

    # -- creation ---------------------------------------------------------------------------

    def _create(self, run_id: str, node: NodePlan, plan: list[NodePlan], ir_location: str,
                status: NodeStatus) -> None:
        status.attempt += 1
        objects = node_objects(self._config, run_id, node, plan, ir_location, status.attempt)
        for body in objects:
            self._create_object(body)
        main = objects[-1]
        status.job = main["metadata"]["name"]
        status.state = "running"
        status.started = self._clock()
        kind = main["kind"] if main["kind"] != "Job" else (
            "Indexed Job" if main["spec"].get("completionMode") == "Indexed" else "Job")
        again = f", attempt {status.attempt}" if status.attempt > 1 else ""
        self._say(f"  > {node.node_id}: {kind} {status.job} (pool {node.pool}{again})")

    def _create_object(self, body: dict[str, Any]) -> None:
        kind, name = body["kind"], body["metadata"]["name"]
        with api_call("create", f"{kind} {name}", self._namespace):
            if kind == "Job":
                self._batch.create_namespaced_job(namespace=self._namespace, body=body)
            elif kind == "Service":
                self._core.create_namespaced_service(namespace=self._namespace, body=body)
            elif kind == "ConfigMap":
                self._core.create_namespaced_config_map(namespace=self._namespace, body=body)
            elif kind == "TFJob":
                if self._custom is None:
                    raise KubernetesError("kubernetes.trainer.use_tfjob needs CustomObjectsApi")
                self._custom.create_namespaced_custom_object(
                    TFJOB_GROUP, TFJOB_VERSION, self._namespace, TFJOB_PLURAL, body)
            else:  # pragma: no cover - every kind we build is listed above
                raise KubernetesError(f"cannot create {kind} {name}: unsupported kind")

    # -- watching ---------------------------------------------------------------------------

    def _poll(self, node: NodePlan, status: NodeStatus) -> None:
        tfjob_mode = node.is_trainer and self._k8s.trainer.workers > 1 and \
            self._k8s.trainer.use_tfjob
        if tfjob_mode:
            with api_call("read", f"TFJob {status.job}", self._namespace):
                obj = self._custom.get_namespaced_custom_object(
                    TFJOB_GROUP, TFJOB_VERSION, self._namespace, TFJOB_PLURAL, status.job)
            state, reason = tfjob_state(obj)
            failures = sum(int(s.get("failed") or 0) for s in
                           ((obj.get("status") or {}).get("replicaStatuses") or {}).values())
            selector = f"training.kubeflow.org/job-name={status.job}"
        else:
            with api_call("read", f"Job {status.job}", self._namespace):
                job = self._batch.read_namespaced_job_status(status.job, self._namespace)
            state, reason = job_state(job)
            failures = int(job.status.failed or 0) if job.status else 0
            selector = f"job-name={status.job}"
        self._stream_logs(node.node_id, selector)
        if state == "running" and failures > status.retries:
            self._say(f"  ! {node.node_id}: pod failed, Kubernetes retries it "
                      f"({failures} of {self._k8s.backoff_limit} retries used)")
        # Pods that failed and were replaced; a failed Job's last failed pod was not replaced.
        status.retries = max(status.retries, failures - 1 if state == "failed" else failures)
        if state == "running":
            return
        status.seconds = self._clock() - (status.started or self._clock())
        retried = f", {status.retries} retr{'y' if status.retries == 1 else 'ies'}" \
            if status.retries else ""
        if state == "succeeded":
            status.state = "succeeded"
            self._say(f"  < {node.node_id} succeeded in {status.seconds:.1f} s{retried}")
        else:
            status.state = "failed"
            last = self._last_log_line(node.node_id)
            status.message = reason + (f"; last log line: {last}" if last else "")
            self._say(f"  x {node.node_id} failed after {status.seconds:.1f} s{retried}: "
                      f"{status.message}")

    def _skip_below_failures(self, plan: list[NodePlan], report: RunReport) -> None:
        for node in plan:  # topological order: one pass reaches every descendant
            status = report.nodes[node.node_id]
            if status.state != "pending":
                continue
            blocked = [u for u in node.upstream
                       if self._upstream_state(report, u) in ("failed", "skipped")]
            if blocked:
                status.state = "skipped"
                status.message = f"upstream {blocked[0]} did not succeed"
                self._say(f"  - {node.node_id} skipped: {status.message}")

    # -- logs -------------------------------------------------------------------------------

    def _stream_logs(self, node_id: str, selector: str) -> None:
        if self._log_dir is None and not self._follow_logs:
            return
        with api_call("list", f"pods of {node_id}", self._namespace):
            pods = self._core.list_namespaced_pod(self._namespace, label_selector=selector)
        for pod in sorted(pods.items, key=lambda p: p.metadata.name):
            name = pod.metadata.name
            if pod.status is None or pod.status.phase == "Pending":
                continue
            try:
                with api_call("read the log of", f"pod {name}", self._namespace):
                    text = self._core.read_namespaced_pod_log(name, self._namespace)
            except KubernetesError:
                continue  # a pod that is gone or not started yet has no log to show
            lines = (text or "").splitlines()
            seen = self._log_lines.get(name, 0)
            fresh = lines[seen:]
            self._log_lines[name] = len(lines)
            if not fresh:
                continue
            if self._log_dir is not None:
                self._log_dir.mkdir(parents=True, exist_ok=True)
                with open(self._log_dir / f"{node_id}.log", "a") as handle:
                    handle.writelines(f"[{name}] {line}\n" for line in fresh)
            if self._follow_logs:
                for line in fresh:
                    self._say(f"    [{node_id}] {line}")

    def _last_log_line(self, node_id: str) -> str:
        if self._log_dir is None:
            return ""
        path = self._log_dir / f"{node_id}.log"
        if not path.exists():
            return ""
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        return lines[-1].split("] ", 1)[-1][:300] if lines else ""

    # -- resume -----------------------------------------------------------------------------

    def _adopt_existing(self, run_id: str, plan: list[NodePlan], report: RunReport) -> None:
        """Take over what a previous driver of this run created."""
        with api_call("list", f"Jobs of run {run_id}", self._namespace):
            jobs = self._batch.list_namespaced_job(
                self._namespace, label_selector=f"{LABEL_RUN}={run_id}").items
        latest: dict[str, Any] = {}
        for job in jobs:
            labels = job.metadata.labels or {}
            node_id = labels.get(LABEL_NODE)
            if node_id not in report.nodes:
                continue
            attempt = int(labels.get(LABEL_ATTEMPT, "1"))
            if node_id not in latest or attempt > int(
                    latest[node_id].metadata.labels.get(LABEL_ATTEMPT, "1")):
                latest[node_id] = job
        for node in plan:
            job = latest.get(node.node_id)
            if job is None:
                continue
            status = report.nodes[node.node_id]
            status.attempt = int(job.metadata.labels.get(LABEL_ATTEMPT, "1"))
            status.job = job.metadata.name
            state, reason = job_state(job)
            if state == "succeeded":
                status.state = "succeeded"
                status.seconds = _job_seconds(job)
                self._say(f"  = {node.node_id} already succeeded (Job {status.job})")
            elif state == "running":
                status.state = "running"
                status.started = self._clock() - (_job_seconds(job) or 0.0)
                self._say(f"  ~ {node.node_id} still running (Job {status.job}); watching it")
            else:
                self._say(f"  ~ {node.node_id} failed before ({reason or 'Failed'}); "
                          f"running it again")


def _job_seconds(job: Any) -> float | None:
    status = job.status
    if status is None or status.start_time is None:
        return None
    end = status.completion_time or datetime.datetime.now(datetime.timezone.utc)
    return (end - status.start_time).total_seconds()


# ---------------------------------------------------------------------------------------------
# status and logs of a run, read from the cluster


def run_status(batch_api: Any, namespace: str, run_id: str) -> list[dict[str, Any]]:
    """One row per node of the run: node, state, Job, attempts, retries, seconds."""
    with api_call("list", f"Jobs of run {run_id}", namespace):
        jobs = batch_api.list_namespaced_job(
            namespace, label_selector=f"{LABEL_RUN}={run_id}").items
    nodes: dict[str, Any] = {}
    plan: list[str] = []
    for job in jobs:
        labels = job.metadata.labels or {}
        node_id = labels.get(LABEL_NODE)
        if node_id is None or node_id == "driver":
            continue
        annotations = job.metadata.annotations or {}
        plan = plan or [n for n in annotations.get(ANNOTATION_PLAN, "").split(",") if n]
        attempt = int(labels.get(LABEL_ATTEMPT, "1"))
        if node_id not in nodes or attempt > nodes[node_id][0]:
            nodes[node_id] = (attempt, job)
    if not jobs:
        raise KubernetesError(f"no Jobs of run {run_id} in namespace {namespace}")
    rows = []
    for node_id in plan or sorted(nodes):
        if node_id not in nodes:
            rows.append({"node": node_id, "state": "not started", "job": "-", "attempts": 0,
                         "retries": 0, "seconds": None})
            continue
        attempt, job = nodes[node_id]
        state, reason = job_state(job)
        rows.append({
            "node": node_id, "state": state, "job": job.metadata.name, "attempts": attempt,
            "retries": int(job.status.failed or 0) if job.status else 0,
            "seconds": _job_seconds(job), "reason": reason,
        })
    return rows


def node_logs(batch_api: Any, core_api: Any, namespace: str, run_id: str,
              node_id: str) -> Iterator[tuple[str, str]]:
    """(pod name, log text) of every pod of the node's latest Job."""
    rows = {row["node"]: row for row in run_status(batch_api, namespace, run_id)}
    if node_id not in rows:
        raise KubernetesError(f"run {run_id} has no node {node_id!r} "
                              f"(nodes: {', '.join(rows)})")
    job = rows[node_id]["job"]
    if job == "-":
        raise KubernetesError(f"{node_id} of run {run_id} has not started")
    with api_call("list", f"pods of Job {job}", namespace):
        pods = core_api.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
    if not pods:
        raise KubernetesError(f"Job {job} has no pods left (finished Jobs keep them until "
                              f"ttlSecondsAfterFinished)")
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        with api_call("read the log of", f"pod {pod.metadata.name}", namespace):
            yield pod.metadata.name, core_api.read_namespaced_pod_log(
                pod.metadata.name, namespace)

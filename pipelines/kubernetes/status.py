"""What a run's Jobs say about it: node states and durations for the driver, and
`mptfx k8s status` / `logs` read straight from the cluster."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterator
from typing import Any

from pipelines.kubernetes.api import KubernetesError, api_call, read_json
from pipelines.kubernetes.manifests import (
    ANNOTATION_PLAN,
    LABEL_ATTEMPT,
    LABEL_NODE,
    LABEL_RUN,
    TFJOB_GROUP,
    TFJOB_PLURAL,
    TFJOB_VERSION,
)


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


def job_state(job: dict[str, Any]) -> tuple[str, str]:
    """("succeeded" | "failed" | "running", reason) from a Job's status conditions (the
    Job as the server sent it, see `api.read_json`)."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "succeeded", ""
        if condition.get("type") in ("Failed", "FailureTarget"):
            return "failed", (f"{condition.get('reason') or 'Failed'}: "
                              f"{condition.get('message') or ''}").strip()
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


def seconds_run(obj: dict[str, Any]) -> float | None:
    """Seconds a Job or TFJob has run (to its completion, or until now); None before it
    started. Both keep RFC 3339 `startTime` / `completionTime` in their status."""
    status = obj.get("status") or {}
    if not status.get("startTime"):
        return None
    start = _timestamp(status["startTime"])
    end = _timestamp(status["completionTime"]) if status.get("completionTime") else \
        datetime.datetime.now(datetime.timezone.utc)
    return (end - start).total_seconds()


def _timestamp(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))


@dataclasses.dataclass(frozen=True)
class RunObject:
    """The latest Job or TFJob of one node of a run, as the cluster reports it."""

    node_id: str
    kind: str  # "Job" | "TFJob"
    name: str
    attempt: int
    state: str  # succeeded | failed | running
    reason: str
    seconds: float | None
    retries: int
    plan: tuple[str, ...]  # the run's node ids, from the annotation


def run_objects_in_cluster(batch_api: Any, namespace: str, run_id: str,
                           custom_api: Any = None) -> dict[str, RunObject]:
    """node id -> its latest (highest attempt) Job or TFJob of run `run_id`.

    TFJobs are listed when `custom_api` is given (a run with `kubernetes.trainer.use_tfjob`):
    its Trainer is a TFJob, which the batch API does not list.
    """
    selector = f"{LABEL_RUN}={run_id}"
    with api_call("list", f"Jobs of run {run_id}", namespace):
        jobs = read_json(batch_api.list_namespaced_job, namespace,
                         label_selector=selector).get("items") or []
    found = [_from_job(job) for job in jobs]
    if custom_api is not None:
        with api_call("list", f"TFJobs of run {run_id}", namespace):
            listed = custom_api.list_namespaced_custom_object(
                TFJOB_GROUP, TFJOB_VERSION, namespace, TFJOB_PLURAL, label_selector=selector)
        found += [_from_tfjob(obj) for obj in listed.get("items") or []]
    latest: dict[str, RunObject] = {}
    for item in found:
        if item is None:
            continue
        if item.node_id not in latest or item.attempt > latest[item.node_id].attempt:
            latest[item.node_id] = item
    return latest


def _plan(annotations: dict[str, str] | None) -> tuple[str, ...]:
    return tuple(n for n in (annotations or {}).get(ANNOTATION_PLAN, "").split(",") if n)


def _from_job(job: dict[str, Any]) -> RunObject | None:
    metadata = job.get("metadata") or {}
    labels = metadata.get("labels") or {}
    node_id = labels.get(LABEL_NODE)
    if node_id is None or node_id == "driver":
        return None
    state, reason = job_state(job)
    return RunObject(node_id, "Job", metadata["name"], int(labels.get(LABEL_ATTEMPT, "1")),
                     state, reason, seconds_run(job),
                     int((job.get("status") or {}).get("failed") or 0),
                     _plan(metadata.get("annotations")))


def _from_tfjob(obj: dict[str, Any]) -> RunObject | None:
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    node_id = labels.get(LABEL_NODE)
    if node_id is None:
        return None
    state, reason = tfjob_state(obj)
    replicas = ((obj.get("status") or {}).get("replicaStatuses") or {}).values()
    return RunObject(node_id, "TFJob", metadata["name"], int(labels.get(LABEL_ATTEMPT, "1")),
                     state, reason, seconds_run(obj),
                     sum(int(r.get("failed") or 0) for r in replicas),
                     _plan(metadata.get("annotations")))


def run_status(batch_api: Any, namespace: str, run_id: str,
               custom_api: Any = None) -> list[dict[str, Any]]:
    """One row per node of the run: node, state, Job (or TFJob), attempts, retries, seconds."""
    nodes = run_objects_in_cluster(batch_api, namespace, run_id, custom_api)
    if not nodes:
        raise KubernetesError(f"no Jobs of run {run_id} in namespace {namespace}")
    plan = next((item.plan for item in nodes.values() if item.plan), ())
    rows = []
    for node_id in plan or sorted(nodes):
        item = nodes.get(node_id)
        if item is None:
            rows.append({"node": node_id, "state": "not started", "job": "-", "attempts": 0,
                         "retries": 0, "seconds": None})
            continue
        rows.append({
            "node": node_id, "state": item.state, "job": item.name, "kind": item.kind,
            "attempts": item.attempt, "retries": item.retries, "seconds": item.seconds,
            "reason": item.reason,
        })
    return rows


def node_logs(batch_api: Any, core_api: Any, namespace: str, run_id: str,
              node_id: str, custom_api: Any = None) -> Iterator[tuple[str, str]]:
    """(pod name, log text) of every pod of the node's latest Job or TFJob."""
    rows = {row["node"]: row for row in run_status(batch_api, namespace, run_id, custom_api)}
    if node_id not in rows:
        raise KubernetesError(f"run {run_id} has no node {node_id!r} "
                              f"(nodes: {', '.join(rows)})")
    job = rows[node_id]["job"]
    if job == "-":
        raise KubernetesError(f"{node_id} of run {run_id} has not started")
    selector = (f"training.kubeflow.org/job-name={job}" if rows[node_id].get("kind") == "TFJob"
                else f"job-name={job}")
    with api_call("list", f"pods of {rows[node_id].get('kind', 'Job')} {job}", namespace):
        pods = core_api.list_namespaced_pod(namespace, label_selector=selector).items
    if not pods:
        raise KubernetesError(f"Job {job} has no pods left (finished Jobs keep them until "
                              f"ttlSecondsAfterFinished)")
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        with api_call("read the log of", f"pod {pod.metadata.name}", namespace):
            yield pod.metadata.name, core_api.read_namespaced_pod_log(
                pod.metadata.name, namespace)

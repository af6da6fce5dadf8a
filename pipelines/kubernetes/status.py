"""What a run's Jobs say about it: node states and durations for the driver, and
`mptfx k8s status` / `logs` read straight from the cluster."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterator
from typing import Any

from pipelines.kubernetes.api import KubernetesError, api_call
from pipelines.kubernetes.manifests import ANNOTATION_PLAN, LABEL_ATTEMPT, LABEL_NODE, LABEL_RUN


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

def job_seconds(job: Any) -> float | None:
    """Seconds a Job has run (to its completion, or until now); None before it started."""
    status = job.status
    if status is None or status.start_time is None:
        return None
    end = status.completion_time or datetime.datetime.now(datetime.timezone.utc)
    return (end - status.start_time).total_seconds()



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
            "seconds": job_seconds(job), "reason": reason,
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

"""The driver: creates each node's Job once its upstream nodes succeeded, watches the Jobs,
streams their pods' logs, and adopts what an earlier driver of the run created."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from pipelines.config import Config
from pipelines.kubernetes.api import KubernetesError, api_call, read_json
from pipelines.kubernetes.ir import NodePlan
from pipelines.kubernetes.manifests import (
    TFJOB_GROUP,
    TFJOB_PLURAL,
    TFJOB_VERSION,
    node_objects,
)
from pipelines.kubernetes.status import (
    NodeStatus,
    RunReport,
    job_state,
    run_objects_in_cluster,
    tfjob_state,
)


class KubernetesRunner:
    """Schedules a run's nodes as Jobs and watches them to the end.

    Args:
        config: the mptfx Config (its `kubernetes` section).
        batch_api, core_api: `kubernetes.client.BatchV1Api()` / `CoreV1Api()` (or test doubles).
        custom_api: `CustomObjectsApi()`, needed only with `kubernetes.trainer.use_tfjob`.
        out: where the per-node progress lines go.
        log_dir: every pod's log is streamed into `<log_dir>/<node>.log`.
        follow_logs: also echo pod logs to `out`, prefixed with the node id.
        trainer_env: variables added to the Trainer's pods (the MLflow run for its system
            metrics, pipelines/k8s_tracking.py `open_run_for_pods`).
    """

    def __init__(self, config: Config, batch_api: Any, core_api: Any, custom_api: Any = None,
                 out: TextIO = sys.stdout, log_dir: Path | None = None,
                 follow_logs: bool = False, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 trainer_env: dict[str, str] | None = None) -> None:
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
        self._trainer_env = dict(trainer_env or {})

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
        objects = node_objects(self._config, run_id, node, plan, ir_location, status.attempt,
                               self._trainer_env)
        for body in objects:
            self.create_object(body)
        main = objects[-1]
        status.job = main["metadata"]["name"]
        status.state = "running"
        status.started = self._clock()
        kind = main["kind"] if main["kind"] != "Job" else (
            "Indexed Job" if main["spec"].get("completionMode") == "Indexed" else "Job")
        again = f", attempt {status.attempt}" if status.attempt > 1 else ""
        self._say(f"  > {node.node_id}: {kind} {status.job} (pool {node.pool}{again})")

    def create_object(self, body: dict[str, Any]) -> None:
        """Create one object of a kind the runner builds (Job, Service, ConfigMap, TFJob)."""
        kind, name = body["kind"], body["metadata"]["name"]
        with api_call("create", f"{kind} {name}", self._namespace):
            if kind == "Job":
                # The reply is not read: the 26.1 models cannot hold a podFailurePolicy rule
                # as 1.27+ servers send it (see api.read_json).
                self._batch.create_namespaced_job(namespace=self._namespace, body=body,
                                                  _preload_content=False)
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
        if node.is_trainer and self._uses_tfjob:
            with api_call("read", f"TFJob {status.job}", self._namespace):
                obj = self._custom.get_namespaced_custom_object(
                    TFJOB_GROUP, TFJOB_VERSION, self._namespace, TFJOB_PLURAL, status.job)
            state, reason = tfjob_state(obj)
            failures = sum(int(s.get("failed") or 0) for s in
                           ((obj.get("status") or {}).get("replicaStatuses") or {}).values())
            selector = f"training.kubeflow.org/job-name={status.job}"
        else:
            with api_call("read", f"Job {status.job}", self._namespace):
                job = read_json(self._batch.read_namespaced_job_status, status.job,
                                self._namespace)
            state, reason = job_state(job)
            failures = int((job.get("status") or {}).get("failed") or 0)
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
        """Take over what a previous driver of this run created: its Jobs, and its TFJob
        when the Trainer runs as one (listed through CustomObjectsApi)."""
        if self._uses_tfjob and self._custom is None:
            raise KubernetesError("kubernetes.trainer.use_tfjob needs CustomObjectsApi")
        latest = run_objects_in_cluster(self._batch, self._namespace, run_id,
                                        self._custom if self._uses_tfjob else None)
        for node in plan:
            found = latest.get(node.node_id)
            if found is None:
                continue
            status = report.nodes[node.node_id]
            status.attempt = found.attempt
            status.job = found.name
            if found.state == "succeeded":
                status.state = "succeeded"
                status.seconds = found.seconds
                self._say(f"  = {node.node_id} already succeeded ({found.kind} {status.job})")
            elif found.state == "running":
                status.state = "running"
                status.retries = found.retries
                status.started = self._clock() - (found.seconds or 0.0)
                self._say(f"  ~ {node.node_id} still running ({found.kind} {status.job}); "
                          f"watching it")
            else:
                self._say(f"  ~ {node.node_id} failed before ({found.reason or 'Failed'}); "
                          f"running it again")

    @property
    def _uses_tfjob(self) -> bool:
        trainer = self._k8s.trainer
        return trainer.use_tfjob and trainer.workers > 1

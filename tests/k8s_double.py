"""The Kubernetes API doubles of the tests, and the steps the replays share.

`ScriptedCluster` (tests/unit/test_k8s_runner.py, tests/integration/test_k8s_compile.py)
finishes each pod on a script; `ProcessCluster` runs each pod as a process.

`ProcessCluster` implements the calls the Kubernetes runner makes (BatchV1Api, CoreV1Api)
and "runs" each Job by starting one process per pod with the container's environment
(Secrets resolved); its subclass in tests/image/test_container_replay.py runs the container
in the built image. An Indexed Job's pods get JOB_COMPLETION_INDEX, and their Service DNS
names are mapped to ports on 127.0.0.1. A native sidecar of the TF Serving image (the
InfraValidator's, pipelines/kubernetes/infra_sidecar.py) cannot run here (no TF Serving
binary): tests/tf_serving_double.py runs in its place with the container's flags, its REST
port and emptyDir folders mapped to a free port and scratch folders. It is the replay's only
stand-in; ML Metadata is the real PostgreSQL server of the `postgres` fixture.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from tests.ports import free_port
from tests.workspaces import REPLAYED

REPO = Path(__file__).resolve().parents[1]
# No registry is reachable from here: a digest the tests make up, so that the rendered
# objects pin TF Serving by digest as a real config must (infra.serving_image).
TEST_SERVING_IMAGE = "tensorflow/serving:2.16.1@sha256:" + "5e" * 32
_DESERIALIZE = ApiClient()._ApiClient__deserialize


class RawResponse:
    """What a client method returns with `_preload_content=False`: the server's JSON body."""

    def __init__(self, body: dict):
        self.data = json.dumps(body).encode()


def _reply(body: dict, model: str, preload: bool):
    return _DESERIALIZE(body, model) if preload else RawResponse(body)


class ProcessCluster:
    """The Kubernetes API double whose Jobs run as local processes (one per pod)."""

    def __init__(self, secrets: dict[tuple[str, str], str], scratch: Path):
        self.secrets = secrets
        self.scratch = scratch
        self.jobs: dict[str, dict] = {}
        self.services: dict[str, dict] = {}
        self.order: list[str] = []  # node ids in creation order

    # -- BatchV1Api ------------------------------------------------------------------------
    def create_namespaced_job(self, namespace, body, _preload_content=True):
        name = body["metadata"]["name"]
        spec = body["spec"]
        indexes = range(spec.get("completions", 1)) if spec.get("completionMode") == \
            "Indexed" else [None]
        job = {"body": body, "pods": [], "failed": 0, "done": set(), "state": None,
               "address_map": self._address_map(body)}
        self.jobs[name] = job
        self.order.append(body["metadata"]["labels"]["mptfx.dev/node"])
        for index in indexes:
            self._start_pod(name, job, index)

    def read_namespaced_job_status(self, name, namespace, _preload_content=True):
        job = self.jobs[name]
        for pod in list(job["pods"]):
            code = pod["process"].poll()
            if code is None or pod["seen"]:
                continue
            pod["seen"] = True
            self._stop_sidecars(pod)
            if code == 0:
                job["done"].add(pod["index"])
            else:
                job["failed"] += 1
                if code == 2 or job["failed"] > job["body"]["spec"]["backoffLimit"]:
                    # exit 2: the Job's podFailurePolicy FailJob rule
                    job["state"] = "Failed"
                else:
                    self._start_pod(name, job, pod["index"])
        wanted = job["body"]["spec"].get("completions", 1)
        if job["state"] is None and len(job["done"]) == wanted:
            job["state"] = "Complete"
        return _reply(self._as_dict(name), "V1Job", _preload_content)

    def list_namespaced_job(self, namespace, label_selector="", _preload_content=True):
        key, _, value = label_selector.partition("=")
        items = [self._as_dict(name) for name, job in self.jobs.items()
                 if job["body"]["metadata"]["labels"].get(key) == value]
        return _reply({"items": items}, "V1JobList", _preload_content)

    # -- CoreV1Api -------------------------------------------------------------------------
    def create_namespaced_service(self, namespace, body):
        self.services[body["metadata"]["name"]] = body

    def list_namespaced_pod(self, namespace, label_selector=""):
        job = self.jobs.get(label_selector.partition("=")[2], {"pods": []})
        items = [{"metadata": {"name": pod["name"]}, "status": {"phase": "Running"}}
                 for pod in job["pods"]]
        return _DESERIALIZE({"items": items}, "V1PodList")

    def read_namespaced_pod_log(self, name, namespace):
        return (self.scratch / f"{name}.log").read_text(errors="replace")

    # -- pods as processes -----------------------------------------------------------------
    def _address_map(self, body) -> str:
        """Indexed Job: each worker's Service DNS name -> a port on 127.0.0.1."""
        command = body["spec"]["template"]["spec"]["containers"][0]["command"]
        if "--worker-hosts" not in command:
            return ""
        hosts = command[command.index("--worker-hosts") + 1].split(",")
        return ",".join(f"{host}=127.0.0.1:{free_port()}" for host in hosts)

    def _start_sidecars(self, pod_name, pod_spec):
        """Native sidecars of the TF Serving image: tests/tf_serving_double.py in their
        place (a double at the binary's boundary), with the container's flags but its REST
        port and emptyDir paths mapped; returns the processes and the replacements the main
        container's environment values need to reach them."""
        replacements, processes = {}, []
        empty_dirs = {v["name"] for v in pod_spec.get("volumes", []) if "emptyDir" in v}
        for sidecar in pod_spec.get("initContainers", []):
            if sidecar.get("restartPolicy") != "Always" or \
                    not sidecar["image"].startswith("tensorflow/serving"):
                continue
            for mount in sidecar.get("volumeMounts", []):
                if mount["name"] in empty_dirs and mount["mountPath"] != "/tmp":
                    host = self.scratch / pod_name / mount["name"]
                    host.mkdir(parents=True, exist_ok=True)
                    replacements[mount["mountPath"]] = str(host)
            args = []
            for arg in sidecar.get("args", []):
                if arg.startswith("--rest_api_port="):
                    port = free_port()
                    replacements[f"127.0.0.1:{arg.partition('=')[2]}"] = f"127.0.0.1:{port}"
                    arg = f"--rest_api_port={port}"
                for old, new in replacements.items():
                    arg = arg.replace(old, new)
                args.append(arg)
            log = open(self.scratch / f"{pod_name}-{sidecar['name']}.log", "w")  # noqa: SIM115
            processes.append(subprocess.Popen(
                [sys.executable, str(REPO / "tests" / "tf_serving_double.py"), *args],
                cwd=REPO, stdout=log, stderr=subprocess.STDOUT))
        return processes, replacements

    def _start_pod(self, name, job, index):
        """Start the pod `index` of Job `name` and append it to job["pods"]: a subclass runs
        its container (tests/image/test_container_replay.py: inside the image)."""
        raise NotImplementedError

    @staticmethod
    def _indexed_pod_env(job, index) -> dict[str, str]:
        """What the kubelet gives an Indexed Job's pod (its index), and the map from the
        workers' Service DNS names to their ports on 127.0.0.1 that stands in for the DNS."""
        if index is None:
            return {}
        return {"JOB_COMPLETION_INDEX": str(index), "MPTFX_WORKER_ADDRESS_MAP": job["address_map"]}

    @staticmethod
    def _stop_sidecars(pod):
        """A native sidecar is stopped once the pod's containers have ended."""
        for sidecar in pod.get("sidecars", []):
            if sidecar.poll() is None:
                sidecar.kill()
                sidecar.wait()

    def _as_dict(self, name):
        job = self.jobs[name]
        status = {"failed": job["failed"] or None, "succeeded": len(job["done"]) or None}
        if job["state"] == "Complete":
            status["conditions"] = [{"type": "Complete", "status": "True"}]
        elif job["state"] == "Failed":
            status["conditions"] = [{"type": "Failed", "status": "True",
                                     "reason": "BackoffLimitExceeded"}]
        return {**job["body"], "status": status}

    def stop(self):
        for job in self.jobs.values():
            for pod in job["pods"]:
                if pod["process"].poll() is None:
                    pod["process"].kill()
                self._stop_sidecars(pod)


def k8s_overrides(postgres: dict, workspace: Path, poll_seconds: float = 0.5) -> list[str]:
    """The `kubernetes.*` settings of a replay: its workspace, the test PostgreSQL, no retry,
    and TF Serving (pinned by the tests' digest) as the InfraValidator's sidecar."""
    return [
        f"kubernetes.workspace={workspace}",
        f"kubernetes.metadata.host={postgres['host']}",
        f"kubernetes.metadata.port={postgres['port']}",
        f"kubernetes.metadata.database={postgres['database']}",
        f"kubernetes.metadata.user={postgres['user']}",
        f"kubernetes.poll_seconds={poll_seconds}",
        "kubernetes.backoff_limit=0",
        f"infra.serving_image={TEST_SERVING_IMAGE}",
    ]


def connection(postgres: dict):
    """ML Metadata's connection to the test PostgreSQL database."""
    from ml_metadata.proto import metadata_store_pb2

    config = metadata_store_pb2.ConnectionConfig()
    pg = config.postgresql
    pg.host, pg.port, pg.dbname = postgres["host"], str(postgres["port"]), postgres["database"]
    pg.user, pg.password = postgres["user"], postgres["password"]
    return config


def submit(config, ir, run_id: str, cluster, log_dir: Path, plan=None,
           before_run: Callable[[], None] | None = None):
    """What `mptfx k8s submit` does after compiling: store the IR, run the plan; returns
    (report, IR location, the runner's console output). `before_run` runs after the IR is
    stored (e.g. to hand the workspace to the pods' user)."""
    from pipelines.kubernetes.driver import KubernetesRunner
    from pipelines.kubernetes.ir import ir_uri, plan_nodes, store_ir

    root = ir.runtime_spec.pipeline_root.field_value.string_value
    location = ir_uri(root, run_id)
    store_ir(ir, location)
    if before_run is not None:
        before_run()
    out = io.StringIO()
    runner = KubernetesRunner(config, cluster, cluster, out=out, log_dir=log_dir / "pods")
    try:
        report = runner.run(run_id, plan or plan_nodes(ir, config), location)
    finally:
        cluster.stop()
    # For the suite's count of pipeline runs (tests/workspaces.py).
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / REPLAYED).write_text(json.dumps(
        {"run_id": run_id, "status": "completed" if report.succeeded else "failed"}))
    return report, location, out.getvalue()


class ScriptedCluster:
    """BatchV1Api + CoreV1Api + CustomObjectsApi double. `script[node]` lists pod outcomes
    ("ok", "fail" = a crash with exit code 1, "exit2" = a usage error); each pod runs `ticks`
    polls. `errors[(verb, kind)]` raises an ApiException instead."""

    def __init__(self, script=None, ticks=2, errors=None):
        self.script = script or {}
        self.ticks = ticks
        self.errors = errors or {}
        self.jobs: dict[str, dict] = {}
        self.created: list[str] = []
        self.max_running = 0

    # -- BatchV1Api ----------------------------------------------------------------------
    def create_namespaced_job(self, namespace, body, _preload_content=True):
        self._maybe_fail("create", "Job")
        name = body["metadata"]["name"]
        if name in self.jobs:
            raise api_error(409, "AlreadyExists", f'jobs.batch "{name}" already exists')
        node = body["metadata"]["labels"]["mptfx.dev/node"]
        self.jobs[name] = {"body": body, "node": node, "outcomes": list(self.script.get(
            node, ["ok"])), "age": 0, "failed": 0, "state": None, "pods": 1}
        self.created.append(name)
        return _reply(body, "V1Job", _preload_content)

    def read_namespaced_job_status(self, name, namespace, _preload_content=True):
        self._maybe_fail("read", "Job")
        job = self.jobs[name]
        self._advance(job)
        running = sum(1 for j in self.jobs.values() if j["state"] is None)
        self.max_running = max(self.max_running, running)
        return _reply(self._as_dict(name), "V1Job", _preload_content)

    def list_namespaced_job(self, namespace, label_selector="", _preload_content=True):
        self._maybe_fail("list", "Job")
        key, _, value = label_selector.partition("=")
        items = [self._as_dict(n) for n, j in self.jobs.items() if j["body"]["kind"] == "Job"
                 and j["body"]["metadata"]["labels"].get(key) == value]
        return _reply({"items": items}, "V1JobList", _preload_content)

    # -- CustomObjectsApi (TFJobs) ------------------------------------------------------------
    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        assert (group, version, plural) == ("kubeflow.org", "v1", "tfjobs")
        self._maybe_fail("create", "TFJob")
        name = body["metadata"]["name"]
        if name in self.jobs:
            raise api_error(409, "AlreadyExists", f'tfjobs.kubeflow.org "{name}" already exists')
        node = body["metadata"]["labels"]["mptfx.dev/node"]
        self.jobs[name] = {"body": body, "node": node, "outcomes": list(self.script.get(
            node, ["ok"])), "age": 0, "failed": 0, "state": None, "pods": 1}
        self.created.append(name)
        return body

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        self._advance(self.jobs[name])
        return self._tfjob_dict(name)

    def list_namespaced_custom_object(self, group, version, namespace, plural,
                                      label_selector=""):
        key, _, value = label_selector.partition("=")
        return {"items": [self._tfjob_dict(n) for n, j in self.jobs.items()
                          if j["body"]["kind"] == "TFJob"
                          and j["body"]["metadata"]["labels"].get(key) == value]}

    def _tfjob_dict(self, name):
        job = self.jobs[name]
        status = {"startTime": "2026-01-01T00:00:00Z",
                  "replicaStatuses": {"Worker": {"failed": job["failed"]}}}
        if job["state"] == "Complete":
            status["conditions"] = [{"type": "Succeeded", "status": "True"}]
            status["completionTime"] = "2026-01-01T00:02:00Z"
        elif job["state"] == "Failed":
            status["conditions"] = [{"type": "Failed", "status": "True",
                                     "reason": "TFJobFailed", "message": "Worker failed"}]
        return {**job["body"], "status": status}

    # -- CoreV1Api ------------------------------------------------------------------------
    def create_namespaced_service(self, namespace, body):
        self._maybe_fail("create", "Service")

    def list_namespaced_pod(self, namespace, label_selector=""):
        job = label_selector.partition("=")[2]
        pods = [{"metadata": {"name": f"{job}-pod{i}"}, "status": {"phase": "Running"}}
                for i in range(self.jobs[job]["pods"])] if job in self.jobs else []
        return _DESERIALIZE({"items": pods}, "V1PodList")

    def read_namespaced_pod_log(self, name, namespace):
        job = name.rsplit("-pod", 1)[0]
        return f"log of {job}\nlast words of {self.jobs[job]['node']}\n"

    # -- the script -----------------------------------------------------------------------
    def _advance(self, job):
        if job["state"] is not None:
            return
        job["age"] += 1
        if job["age"] < self.ticks:
            return
        outcome = job["outcomes"].pop(0) if job["outcomes"] else "ok"
        job["age"] = 0
        if outcome == "ok":
            job["state"] = "Complete"
            return
        job["failed"] += 1
        job["pods"] += 1
        spec = job["body"]["spec"]
        exit_code = 2 if outcome == "exit2" else 1
        if _fail_job_rule_matches(spec.get("podFailurePolicy"), exit_code):
            job["state"], job["reason"] = "Failed", "PodFailurePolicy"
        elif job["failed"] > spec.get("backoffLimit", spec.get("runPolicy", {}).get(
                "backoffLimit", 6)):
            job["state"], job["reason"] = "Failed", "BackoffLimitExceeded"

    def _as_dict(self, name):
        job = self.jobs[name]
        status = {"failed": job["failed"] or None, "startTime": "2026-01-01T00:00:00Z"}
        if job["state"] == "Complete":
            status["conditions"] = [{"type": "Complete", "status": "True"}]
            status["completionTime"] = "2026-01-01T00:01:00Z"
        elif job["state"] == "Failed":
            status["conditions"] = [{"type": "Failed", "status": "True",
                                     "reason": job["reason"], "message": {
                "BackoffLimitExceeded": "Job has reached the specified backoff limit",
                "PodFailurePolicy": "Container node for pod failed with exit code 2 matching "
                                    "FailJob rule at index 0"}[job["reason"]]}]
        return {**job["body"], "status": status}

    def _maybe_fail(self, verb, kind):
        error = self.errors.get((verb, kind))
        if error is not None:
            raise error


def _fail_job_rule_matches(policy, exit_code):
    """The Job controller's reading of podFailurePolicy's onExitCodes FailJob rules."""
    for rule in (policy or {}).get("rules", []):
        codes = rule.get("onExitCodes")
        if rule["action"] == "FailJob" and codes and (
                (exit_code in codes["values"]) == (codes["operator"] == "In")):
            return True
    return False


def api_error(status, reason, message):
    error = ApiException(status=status, reason=reason)
    error.body = json.dumps({"kind": "Status", "message": message, "reason": reason})
    return error


def assert_same_outcome(replay: dict, nodes: dict, local_nodes: dict, local) -> None:
    """The replayed run (its ML Metadata `nodes`) did what the local baseline did: the same
    node states and output counts, the same data, a blessed model pushed as version 1 into
    the replay's workspace, the same TF Lite variants and the same schema."""
    from scipy.stats import fisher_exact

    from pipelines.metadata_summary import build_summary

    assert {n: info["state"] for n, info in nodes.items()} == \
        {n: info["state"] for n, info in local_nodes.items()}
    assert set(nodes) == set(local_nodes) and len(nodes) == 11
    for node, info in nodes.items():  # same outputs, node by node: keys and counts
        assert {k: len(v) for k, v in info["outputs"].items()} == \
            {k: len(v) for k, v in local_nodes[node]["outputs"].items()}, node
    replayed = build_summary(nodes, {}, {"status": "completed", "run_id": replay["run_id"],
                                         "summary_path": "not written"})
    assert replayed.data.images == local.data.images == 400
    assert replayed.data.split_counts == local.data.split_counts
    assert replayed.eval.blessed is local.eval.blessed is True
    # As accurate within sampling noise on the same eval split (Fisher's exact test, p > 0.01):
    # a Trainer of two workers (the Kubernetes replay's) shards the data and sums gradients
    # in another order than one process, a different and equally good draw. A replay that
    # trained another model fails it: 0.37 and 0.41 against the local run's 0.82 on 83 images
    # (8x8 inputs and a global batch of 64, p < 1e-7).
    images = local.data.split_counts["eval"]
    hits = [round(summary.eval.accuracy * images) for summary in (replayed, local)]
    same = fisher_exact([[hit, images - hit] for hit in hits]).pvalue
    assert same > 0.01, (replayed.eval.accuracy, local.eval.accuracy, same)
    assert replayed.infra.blessed is local.infra.blessed is True
    # The replay's check ran against TF Serving's REST API (its sidecar), the local one in
    # a model process of its own: the same requests either way.
    assert (replayed.infra.server, local.infra.server) == ("tf serving", "model process")
    assert replayed.infra.requests == local.infra.requests
    assert replayed.pushed.pushed is local.pushed.pushed is True
    assert replayed.pushed.version == local.pushed.version == "1"
    assert Path(replayed.pushed.path, "saved_model.pb").exists()
    assert Path(replayed.pushed.path).is_relative_to(replay["workspace"])
    assert set(replayed.tflite) == set(local.tflite) and replayed.tflite["fp32"].published
    schemas = [Path(n["SchemaGen"]["outputs"]["schema"][0].uri, "schema.pbtxt").read_text()
               for n in (nodes, local_nodes)]
    assert schemas[0] == schemas[1]

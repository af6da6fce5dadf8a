"""The end-to-end replay, in the image: each Job the Kubernetes runner creates runs its
container spec (image, command, args, env with the Secret's value, volume mounts, runAsUser)
inside the built image, in the order the runner schedules them, against the real PostgreSQL.
The pipeline is the local run's (the first span with SMALL's settings, tests/conftest.py),
its span on the workspace claim, as a user would deploy it: the model a user's file, staged
into the pipeline root while compiling (the source deleted before the pods start), and the
Trainer an Indexed Job of two workers. Its outcome is compared with the local runner's run,
the driver's records (MLflow, retraining, reruns) are checked on it, and the image's own
files are as they were: every pod wrote only its volumes. This replay is the suite's whole
run in the image and on the cluster's terms; tests/image/test_image.py starts every command in
the image without a run.

The only stand-in is the Kubernetes API (tests/k8s_double.py's `ProcessCluster`, subclassed
here): a pod is `buildah run` of the Job's container in the image (chroot isolation: the
host's network, so an Indexed Job's pods reach each other at the ports on 127.0.0.1 their
Service DNS names are mapped to), the workspace claim a host folder (chowned as fsGroup
would) mounted at the same path, so that the artifact URIs in ML Metadata resolve on both
sides, each emptyDir a fresh host folder. PostgreSQL comes from .ci/run (MPTFX_TEST_PG_HOST/
PORT/USER/PASSWORD, default 127.0.0.1:5432 mptfx/mptfx); each test session makes a fresh
database.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from containers import Container, container_env, empty_dir, pod_volume

from tests.conftest import RUN_DIR, set_args
from tests.k8s_double import (
    REPO,
    ProcessCluster,
    assert_same_outcome,
    connection,
    k8s_overrides,
    submit,
)
from tests.workspaces import SMALL, TEST_PRECISION

pytestmark = pytest.mark.e2e

# seed_cnn's architecture in a user's file: the local run trains the built-in seed_cnn, and the
# replay's outcome is held to it.
USER_MODEL = REPO / "tests" / "data" / "user_models" / "digits_cnn.py"


class ContainerCluster(ProcessCluster):
    """ProcessCluster whose pods run the Job's container inside the image."""

    def __init__(self, secrets: dict[tuple[str, str], str], scratch: Path, image: str,
                 container: Container, workspace: Path):
        super().__init__(secrets, scratch)
        self.image, self.container, self.workspace = image, container, workspace

    def _start_pod(self, name, job, index):
        pod = job["body"]["spec"]["template"]["spec"]
        spec = pod["containers"][0]
        assert spec["image"] == self.image  # the pod runs the image under test
        pod_name = f"{name}-{index if index is not None else 0}-{len(job['pods'])}"
        # TF Serving's sidecar: the double on the host (chroot isolation shares its network),
        # serving the host folder that stands in for the shared emptyDir.
        sidecars, replacements = self._start_sidecars(pod_name, pod)
        ports = {old: new for old, new in replacements.items() if old.startswith("127.0.0.1:")}
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        mounts = {}
        for mount in spec["volumeMounts"]:
            volume = volumes[mount["name"]]
            if "persistentVolumeClaim" in volume:
                mounts[self.workspace] = mount["mountPath"]
            else:  # emptyDir: new for each pod
                mounts[empty_dir(self.scratch / pod_name / mount["name"])] = mount["mountPath"]
        security = {**pod.get("securityContext", {}), **spec.get("securityContext", {})}
        user = f"{security['runAsUser']}:{security['runAsGroup']}"
        env = {**container_env(spec, self.secrets), **self._indexed_pod_env(job, index)}
        for key, value in env.items():
            for old, new in ports.items():
                env[key] = value = value.replace(old, new)
        process = self.container.popen([*spec["command"], *spec.get("args", [])], env, mounts,
                                       self.scratch / f"{pod_name}.log", user=user)
        job["pods"].append({"name": pod_name, "index": index, "process": process,
                            "seen": False, "user": user, "mounts": mounts,
                            "sidecars": sidecars})

    def stop(self):
        for job in self.jobs.values():
            for pod in job["pods"]:
                if pod["process"].poll() is None:
                    self.container.stop(pod["process"])
                self._stop_sidecars(pod)


@pytest.fixture(scope="module")
def replay(image, container, postgres, local_run_data, tmp_path_factory):
    """The replayed run. Its Trainer is the Indexed Job's two pods, TF_CONFIG from
    JOB_COMPLETION_INDEX and the Service names; its model a user's file, which the driver
    stages into the pipeline root while compiling; the source file is then deleted (and the
    pods never saw the host's folders), so every pod can only import the staged copy."""
    from pipelines.config import load_config
    from pipelines.k8s_commands import compile_for_kubernetes

    tmp = tmp_path_factory.mktemp("container-replay")
    source = tmp / "src" / USER_MODEL.name
    source.parent.mkdir()
    shutil.copy(USER_MODEL, source)
    # Outside /tmp, which every pod mounts an emptyDir over.
    workspace = pod_volume(Path(tempfile.mkdtemp(prefix="mptfx-image-replay-", dir="/var/tmp")))
    # The local run's span, on the workspace claim (the one volume every pod mounts).
    data = shutil.copytree(local_run_data, workspace / "drops")
    config = load_config(REPO / "configs/local.yaml", SMALL + [
        f"data.source={data}",
        f"kubernetes.image={image}", *k8s_overrides(postgres, workspace, poll_seconds=1),
        "kubernetes.trainer.workers=2", f"model.module_file={source}",
        # what the local run's seed_cnn takes: 16x16 images (a user's file takes the digits'
        # own 8x8), a global batch of 32 (16 a worker)
        "model.input_size=[16,16]", "trainer.batch_size=16"])
    run_id = "image-replay-" + secrets.token_hex(2)
    _, ir, _ = compile_for_kubernetes(config, run_id, None)  # stages the file
    source.unlink()  # from here on only the staged copy in the pipeline root exists
    password = config.kubernetes.metadata
    cluster = ContainerCluster({(password.password_secret, password.password_key):
                                postgres["password"]}, tmp, image, container, workspace)

    def hand_to_the_pods_user():
        # In the cluster the driver pod writes the IR as uid 10001; here this (root) process
        # did.
        for path in [workspace, *workspace.rglob("*")]:
            os.chown(path, 10001, 10001)

    marker = tmp / "before-the-pods"
    marker.touch()
    time.sleep(1.1)  # find -newer compares whole seconds on some filesystems
    report, location, out = submit(config, ir, run_id, cluster, tmp,
                                   before_run=hand_to_the_pods_user)
    trainer = next(n.pipeline_node for n in ir.nodes if n.pipeline_node.node_info.id == "Trainer")
    custom = json.loads(trainer.parameters.parameters["custom_config"].field_value.string_value)
    yield {"config": config, "ir": ir, "run_id": run_id, "report": report, "ir_uri": location,
           "out": out, "cluster": cluster, "workspace": workspace, "marker": marker,
           "module": custom["model"], "digest": hashlib.sha256(USER_MODEL.read_bytes()).hexdigest()}
    shutil.rmtree(workspace)


def _replay_outputs(replay, postgres):
    from pipelines.metadata_summary import collect_outputs

    return collect_outputs(connection(postgres), replay["config"].pipeline.name,
                           replay["run_id"])


def test_every_job_runs_its_container_in_the_image_in_the_runners_order(replay):
    report, cluster = replay["report"], replay["cluster"]
    logs = {pod["name"]: cluster.read_namespaced_pod_log(pod["name"], "mptfx")[-2000:]
            for job in cluster.jobs.values() for pod in job["pods"]}
    assert report.succeeded, replay["out"] + "\n".join(logs.values())
    assert cluster.order[0] == "Ingest" and cluster.order[-1] == "TFLite"
    assert len(cluster.order) == 11 and len(set(cluster.order)) == 11
    for node, result in report.nodes.items():
        pods = cluster.jobs[result.job]["pods"]
        assert len(pods) == (2 if node == "Trainer" else 1), node
        for pod in pods:
            assert pod["user"] == "10001:10001" and pod["process"].returncode == 0
            assert pod["mounts"][replay["workspace"]] == str(replay["workspace"])
    # Each node ran in a container of its own whose log shows the entrypoint's own lines (the
    # Trainer's chief, worker 0, in its own).
    for node in ("Ingest", "Trainer", "Evaluator"):
        pod = cluster.jobs[report.nodes[node].job]["pods"][0]
        log = cluster.read_namespaced_pod_log(pod["name"], "mptfx")
        assert f"mptfx node: {node}: starting (run {replay['run_id']}, metadata postgresql://" \
            in log
        assert f"mptfx node: {node} complete in" in log
    assert "< Trainer succeeded in" in replay["out"]
    # The InfraValidator's pod ran TF Serving's sidecar (the double in its place), stopped
    # with the node as a native sidecar is.
    [pod] = cluster.jobs[report.nodes["InfraValidator"].job]["pods"]
    [sidecar] = pod["sidecars"]
    assert sidecar.poll() is not None


def test_the_image_replay_matches_the_local_runs_artifacts_and_blessing(replay, local_run,
                                                                        postgres):
    local_nodes, local = local_run
    assert_same_outcome(replay, _replay_outputs(replay, postgres), local_nodes, local)


def test_the_pods_write_only_their_volumes(replay, container):
    """What the pods changed in the image's files: nothing but the mount points of their
    volumes (the workspace claim, each emptyDir) and the directories the runtime itself
    touches at each start (/run: buildah's run-time files, as a kubelet's)."""
    assert replay["report"].succeeded, replay["out"]
    mounted = {path for job in replay["cluster"].jobs.values() for pod in job["pods"]
               for path in pod["mounts"].values()}
    assert {str(replay["workspace"]), "/tmp"} <= mounted
    changed = container.changed_since(replay["marker"], ignore=tuple(mounted))
    # A mount point's parent folders are made for it (/var for /var/tmp/...), and so is /run.
    parents = {str(parent) for path in mounted for parent in Path(path).parents}
    assert [path for path in changed if path not in parents | {"/run"}] == []


def test_the_driver_records_the_replayed_run_in_mlflow(replay, postgres, monkeypatch, tmp_path):
    from mlflow import MlflowClient

    from components.run_summary import RunSummary
    from pipelines.k8s_tracking import record_run

    monkeypatch.setenv("MPTFX_MLMD_PASSWORD", postgres["password"])
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = io.StringIO()
    summary = record_run(replay["config"], replay["ir"], replay["report"], tmp_path / "log",
                         tmp_path / "ws", out)
    assert summary.status == "completed" and summary.orchestrator == "kubernetes"
    # What a user reads in the driver's log when the model was not registered.
    assert summary.mlflow.registered_model, (out.getvalue(), summary.pushed)
    assert RunSummary.read(tmp_path / "log" / "summary.json").mlflow == summary.mlflow
    store = f"sqlite:///{tmp_path / 'ws' / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=store, registry_uri=store)
    run = client.get_run(summary.mlflow.run_id)
    assert run.data.tags["mptfx.orchestrator"] == "kubernetes"
    assert run.data.tags["mptfx.tfx_run_id"] == replay["run_id"]
    assert run.data.metrics["eval/accuracy"] == summary.eval.accuracy >= 0.5
    assert run.data.metrics["seconds/Trainer"] > 0
    assert run.data.params["precision_requested"] == TEST_PRECISION
    assert run.data.params["config.trainer.epochs"] == "8"
    champion = client.get_model_version_by_alias("digits", "champion")
    assert champion.run_id == run.info.run_id
    assert f"mlflow: run {run.info.run_id}" in out.getvalue()


def test_a_cluster_retraining_started_by_drift_says_trigger_drift(replay, postgres,
                                                                    monkeypatch, tmp_path):
    # What `mptfx monitor --retrain-on-drift --runner kubernetes` hands the driver.
    from mlflow import MlflowClient

    from pipelines.k8s_tracking import record_run

    monkeypatch.setenv("MPTFX_MLMD_PASSWORD", postgres["password"])
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    trigger = {"kind": "drift", "features": ["brightness", "height"], "versions": [1],
               "report": "/mnt/mptfx/monitor/20261202T020000Z/report.md"}
    summary = record_run(replay["config"], replay["ir"], replay["report"], tmp_path / "log",
                         tmp_path / "ws", io.StringIO(), trigger=trigger)
    assert summary.trigger.to_dict() == trigger
    store = f"sqlite:///{tmp_path / 'ws' / 'mlflow.db'}"
    tags = MlflowClient(tracking_uri=store).get_run(summary.mlflow.run_id).data.tags
    assert (tags["mptfx.trigger"], tags["mptfx.trigger.features"]) == ("drift",
                                                                       "brightness,height")


def test_an_unreadable_metadata_database_is_one_warning_not_a_failure(replay, monkeypatch,
                                                                     tmp_path):
    from pipelines.k8s_tracking import record_run

    monkeypatch.setenv("MPTFX_MLMD_PASSWORD", "not-the-password")
    out = io.StringIO()
    assert record_run(replay["config"], replay["ir"], replay["report"], tmp_path / "log",
                      tmp_path / "ws", out) is None
    lines = out.getvalue().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"mptfx: warning: run {replay['run_id']} not tracked: ML Metadata at postgresql://")
    assert not (tmp_path / "ws" / "mlflow.db").exists()


def test_cluster_retraining_sees_the_submitted_run_and_does_nothing(replay, postgres,
                                                                   monkeypatch, capsys):
    """`mptfx retrain --runner kubernetes` judges new data by the cluster's ML Metadata, where
    the submitted (replayed) run recorded its Trainer: the same data is no new data, and
    nothing reaches the cluster."""
    from pipelines import cli, k8s_commands

    def no_cluster(*_args, **_kwargs):
        raise AssertionError("a no-op retraining must not create Jobs")

    monkeypatch.setattr(k8s_commands, "make_clients", no_cluster)
    monkeypatch.setenv("MPTFX_MLMD_PASSWORD", postgres["password"])
    sets = set_args(*SMALL, f"data.source={replay['config'].data.source}",
                    *k8s_overrides(postgres, replay["workspace"]))
    assert cli.main(["retrain", "--runner", "kubernetes", "--in-cluster", "--config",
                     str(REPO / "configs/local.yaml"), *sets]) == 0
    out = capsys.readouterr().out
    assert "no new data since span 1; nothing to do" in out, out


def test_rerunning_a_finished_node_does_nothing(replay, postgres):
    before = _replay_outputs(replay, postgres)["Trainer"]["execution_id"]
    env = dict(os.environ, MPTFX_MLMD_PASSWORD=postgres["password"])
    result = subprocess.run(
        [sys.executable, "-m", "pipelines.node_entrypoint", "--ir", replay["ir_uri"],
         "--node", "Trainer"], cwd=RUN_DIR, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"Trainer already succeeded in run {replay['run_id']} (execution {before}, " \
        "complete); nothing to do" in result.stdout
    after = _replay_outputs(replay, postgres)
    assert after["Trainer"]["execution_id"] == before
    assert after["Trainer"]["state"] == "completed"


@pytest.fixture(scope="module")
def two_workers(replay, postgres):
    """The replay's Trainer: its Indexed Job's pods and logs, its ML Metadata record, the
    model_run folder and the chief's training summary."""
    cluster = replay["cluster"]
    job = cluster.jobs[replay["report"].nodes["Trainer"].job]
    logs = {pod["name"]: cluster.read_namespaced_pod_log(pod["name"], "mptfx")
            for pod in job["pods"]}
    nodes = _replay_outputs(replay, postgres)
    model_run = nodes["Trainer"]["outputs"]["model_run"][0].uri
    return {"job": job, "logs": logs, "nodes": nodes, "model_run": model_run,
            "training": json.loads(Path(model_run, "training_summary.json").read_text())}


def test_two_trainer_workers_train_together_and_only_the_chief_publishes(two_workers, replay,
                                                                        postgres):
    from ml_metadata.metadata_store import metadata_store

    job, logs, run_id = two_workers["job"], two_workers["logs"], replay["run_id"]
    assert [pod["index"] for pod in job["pods"]] == [0, 1]
    assert all(pod["process"].returncode == 0 for pod in job["pods"])
    assert len(replay["cluster"].services) == 1  # the headless Service of the Indexed Job
    worker_log = logs[job["pods"][1]["name"]]
    assert "worker 1 of run" in worker_log and "joining the chief's execution" in worker_log

    trainer = two_workers["nodes"]["Trainer"]
    assert trainer["state"] == "completed"
    store = metadata_store.MetadataStore(connection(postgres))
    context = store.get_context_by_type_and_name("pipeline_run", run_id)
    executions = store.get_executions_by_context(context.id)
    [kind] = [e.type_id for e in executions if e.id == trainer["execution_id"]]
    # The chief's execution alone: the worker joined it, it recorded none of its own.
    assert [e.id for e in executions if e.type_id == kind] == [trainer["execution_id"]]
    # In the run's workspace, not a worker's scratch dir.
    assert two_workers["model_run"].startswith(str(replay["workspace"]))
    summary = two_workers["training"]
    assert summary["strategy"] == "multi_worker" and summary["replicas"] == 2
    model = trainer["outputs"]["model"][0].uri
    assert list(Path(model).rglob("saved_model.pb"))


def test_compiled_trainer_names_the_staged_copy_in_the_pipeline_root(replay):
    digest = replay["digest"]
    staged = replay["workspace"] / "tfx" / "mptfx-digits" / "user_models" / digest[:16] / \
        USER_MODEL.name
    assert replay["module"]["module_file"] == str(staged)
    assert replay["module"]["module_sha256"] == digest
    assert staged.read_bytes() == USER_MODEL.read_bytes()


def test_the_trainer_pods_import_the_staged_copy(two_workers, replay):
    """Both pods built the model from the file (the source was deleted before they started);
    the chief's training summary names the staged copy and its hash."""
    summary = two_workers["training"]
    assert summary["model_file_staged"] == replay["module"]["module_file"]
    assert summary["model_file_sha256"] == replay["digest"]
    assert summary["model"].startswith(f"user:{USER_MODEL.name}:build_model@")
    assert all(pod["process"].returncode == 0 for pod in two_workers["job"]["pods"])

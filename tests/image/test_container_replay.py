"""The end-to-end replay, in the image: each Job the Kubernetes runner creates runs its
container spec (image, command, args, env with the Secret's value, volume mounts, runAsUser)
inside the built image, in the order the runner schedules them, against the real PostgreSQL;
the result is compared with the local runner's run of the same config, and the image's own
files are as they were: every pod wrote only its volumes (this replay is the suite's whole
run in the image; tests/image/test_image.py starts every command in it without a run).

As in tests/e2e/test_k8s_replay.py, the only stand-in is the Kubernetes API
(tests/k8s_double.py's `ProcessCluster`, subclassed here): a pod is `buildah run` of the
Job's container in the image, the workspace claim a host folder (chowned as fsGroup would)
mounted at the same path, so that the artifact URIs in ML Metadata resolve on both sides,
each emptyDir a fresh host folder.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from containers import Container, container_env, empty_dir, pod_volume

from tests.k8s_double import (
    REPO,
    SMALL,
    ProcessCluster,
    assert_same_outcome,
    connection,
    k8s_overrides,
    submit,
)

pytestmark = pytest.mark.e2e

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
        env = container_env(spec, self.secrets)
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
def replay(image, container, postgres, tmp_path_factory):
    from pipelines.config import load_config
    from pipelines.k8s_commands import compile_for_kubernetes

    tmp = tmp_path_factory.mktemp("container-replay")
    # Outside /tmp, which every pod mounts an emptyDir over.
    workspace = pod_volume(Path(tempfile.mkdtemp(prefix="mptfx-image-replay-", dir="/var/tmp")))
    config = load_config(REPO / "configs/local.yaml", SMALL + [
        f"kubernetes.image={image}", *k8s_overrides(postgres, workspace, poll_seconds=1)])
    run_id = "image-replay-" + secrets.token_hex(2)
    _, ir, _ = compile_for_kubernetes(config, run_id, None)
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
    report, _, out = submit(config, ir, run_id, cluster, tmp, before_run=hand_to_the_pods_user)
    yield {"config": config, "run_id": run_id, "report": report, "out": out,
           "cluster": cluster, "workspace": workspace, "marker": marker}
    shutil.rmtree(workspace)


def test_every_job_runs_its_container_in_the_image_in_the_runners_order(replay):
    report, cluster = replay["report"], replay["cluster"]
    logs = {pod["name"]: cluster.read_namespaced_pod_log(pod["name"], "mptfx")[-2000:]
            for job in cluster.jobs.values() for pod in job["pods"]}
    assert report.succeeded, replay["out"] + "\n".join(logs.values())
    assert cluster.order[0] == "Ingest" and cluster.order[-1] == "TFLite"
    assert len(cluster.order) == 11 and len(set(cluster.order)) == 11
    for job in cluster.jobs.values():
        [pod] = job["pods"]
        assert pod["user"] == "10001:10001" and pod["process"].returncode == 0
        assert pod["mounts"][replay["workspace"]] == str(replay["workspace"])
    for node in ("Ingest", "Trainer", "Evaluator"):
        [pod] = cluster.jobs[report.nodes[node].job]["pods"]
        log = cluster.read_namespaced_pod_log(pod["name"], "mptfx")
        assert f"mptfx node: {node}: starting (run {replay['run_id']}, metadata postgresql://" \
            in log
        assert f"mptfx node: {node} complete in" in log


def test_the_image_replay_matches_the_local_runs_artifacts_and_blessing(replay, local_run,
                                                                        postgres):
    from pipelines.metadata_summary import collect_outputs

    local_nodes, local = local_run
    nodes = collect_outputs(connection(postgres), replay["config"].pipeline.name,
                            replay["run_id"])
    assert_same_outcome(replay, nodes, local_nodes, local)


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

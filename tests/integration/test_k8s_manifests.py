"""Every Kubernetes object mptfx ships or generates, checked offline: kustomize renders the
overlays, `kubernetes-validate --strict` against Kubernetes 1.30, the TFJob against the
Training Operator's CRD schema, checkov on k8s/ and the Dockerfile, hadolint on the Dockerfile.

The checkers live in .venv-tools (`make tools`, part of `make test`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from pipelines.config import load_config
from pipelines.kubernetes.ir import NodePlan
from pipelines.kubernetes.manifests import config_map, driver_job, node_objects
from tests.k8s_schemas import run_tool, tool, validate

REPO = Path(__file__).resolve().parents[2]
OVERLAYS = ["gke", "eks", "generic"]
PLAN = [
    NodePlan("Ingest", (), "cpu"),
    NodePlan("StatisticsGen", ("Ingest",), "cpu"),
    NodePlan("Trainer", ("Ingest", "StatisticsGen"), "gpu"),
]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, list[dict]]:
    """`kubectl kustomize` of the base and of each overlay: name -> objects."""
    out = tmp_path_factory.mktemp("kustomize")
    result = {}
    for name in ["base", *OVERLAYS]:
        source = REPO / "k8s" / ("base" if name == "base" else f"overlays/{name}")
        built = run_tool(tool("kubectl"), "kustomize", str(source))
        assert built.returncode == 0, built.stderr
        (out / f"{name}.yaml").write_text(built.stdout)
        result[name] = [doc for doc in yaml.safe_load_all(built.stdout) if doc]
    result["_dir"] = out
    return result


def _by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _pod_specs(objects: list[dict]):
    for obj in objects:
        spec = obj.get("spec", {})
        template = spec.get("template") or spec.get("jobTemplate", {}).get("spec", {}).get(
            "template")
        if template:
            yield obj["metadata"]["name"], template["spec"]


def test_base_and_every_overlay_validate_strictly_against_kubernetes_1_30(rendered):
    files = [rendered["_dir"] / f"{name}.yaml" for name in ["base", *OVERLAYS]]
    result = validate(files)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(rendered["gke"]) == len(rendered["base"]) >= 20


def test_the_validator_rejects_a_typo(tmp_path):
    # Guards the test above: --strict must refuse an unknown field.
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "x"}, "spec": {"backoffLimits": 1, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}))
    result = validate([bad])
    assert result.returncode != 0 and "backoffLimits" in result.stdout + result.stderr


def test_base_holds_every_object_the_cluster_needs(rendered):
    base = rendered["base"]
    kinds = {(o["kind"], o["metadata"]["name"]) for o in base}
    for expected in [
        ("Namespace", "mptfx"), ("ServiceAccount", "mptfx-runner"),
        ("ServiceAccount", "mptfx-pipeline"), ("Role", "mptfx-runner"),
        ("RoleBinding", "mptfx-runner"), ("PersistentVolumeClaim", "mptfx-workspace"),
        ("StatefulSet", "mptfx-postgres"), ("Service", "mptfx-postgres"),
        ("Deployment", "mptfx-mlflow"), ("Service", "mptfx-mlflow"),
        ("Deployment", "mptfx-serving-gpu"), ("Deployment", "mptfx-serving-cpu"),
        ("Service", "mptfx-serving"), ("ConfigMap", "mptfx-serving-config"),
        ("CronJob", "mptfx-retrain"), ("CronJob", "mptfx-monitor"),
        ("NetworkPolicy", "mptfx-postgres"),
        ("NetworkPolicy", "mptfx-mlflow"),
    ]:
        assert expected in kinds, expected
    assert all(o["metadata"].get("namespace") == "mptfx" for o in base if o["kind"] != "Namespace")


def test_the_runner_role_is_scoped_to_jobs_services_pods_and_logs(rendered):
    role = _by_kind(rendered["base"], "Role")["mptfx-runner"]
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"]}
    assert granted == {("batch", "jobs"), ("", "services"), ("", "pods"), ("", "pods/log"),
                       ("kubeflow.org", "tfjobs")}
    verbs = {v for rule in role["rules"] for v in rule["verbs"]}
    assert verbs <= {"create", "get", "list", "watch", "delete"}
    assert not _by_kind(rendered["base"], "ClusterRole")  # nothing cluster-wide
    binding = _by_kind(rendered["base"], "RoleBinding")["mptfx-runner"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "mptfx-runner",
                                    "namespace": "mptfx"}]


def test_every_container_is_locked_down_and_sized(rendered):
    for name, spec in _pod_specs(rendered["base"]):
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        # Only the retraining drivers (retrain, monitor on drift; as the driver account) and
        # the canary rollout (which patches one HTTPRoute) talk to the API server.
        accounts = {"mptfx-retrain": "mptfx-runner", "mptfx-monitor": "mptfx-runner",
                    "mptfx-serving-rollout": "mptfx-serving-rollout"}
        assert spec["automountServiceAccountToken"] is (name in accounts), name
        if spec["automountServiceAccountToken"]:
            assert spec["serviceAccountName"] == accounts[name]
        for container in spec["containers"]:
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False, name
            assert security["capabilities"]["drop"] == ["ALL"], name
            assert security["readOnlyRootFilesystem"] is True, name
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), name
            assert {"cpu", "memory"} <= set(resources["limits"]), name


def test_postgres_password_comes_from_a_secret_never_the_manifests(rendered):
    text = (REPO / "k8s").joinpath("base", "postgres.yaml").read_text()
    assert not _by_kind(rendered["base"], "Secret")
    spec = _by_kind(rendered["base"], "StatefulSet")["mptfx-postgres"]["spec"]["template"]["spec"]
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["POSTGRES_PASSWORD_FILE"]["value"].startswith("/etc/mptfx-postgres/")
    assert {"name": "password", "secret": {"secretName": "mptfx-postgres",
                                           "defaultMode": 0o440}} in spec["volumes"]
    assert "POSTGRES_PASSWORD\n" not in text and "password:" not in text.replace(
        "password: ", "")
    mlflow = _by_kind(rendered["base"], "Deployment")["mptfx-mlflow"]["spec"]["template"]["spec"]
    env = {e["name"]: e for e in mlflow["containers"][0]["env"]}
    assert env["PGPASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "mptfx-postgres",
                                                              "key": "password"}
    args = " ".join(mlflow["containers"][0]["args"])
    assert "--allowed-hosts=mptfx-mlflow" in args and "mptfx-postgres:5432/mlflow" in args


def test_serving_has_grpc_rest_readiness_batching_and_warmup(rendered):
    base = rendered["base"]
    service = _by_kind(base, "Service")["mptfx-serving"]
    # gRPC, REST, and the metrics sidecar's /metrics (the ServiceMonitor's second endpoint)
    assert {p["port"] for p in service["spec"]["ports"]} == {8500, 8501, 9108}
    config = _by_kind(base, "ConfigMap")["mptfx-serving-config"]["data"]
    assert "max_batch_size" in config["batching.config"]
    assert "prometheus_config" in config["monitoring.config"]  # models.config is on the PVC
    deployments = _by_kind(base, "Deployment")
    gpu = deployments["mptfx-serving-gpu"]["spec"]["template"]["spec"]
    cpu = deployments["mptfx-serving-cpu"]["spec"]["template"]["spec"]
    for spec in (gpu, cpu):
        container = spec["containers"][0]
        assert "--enable_model_warmup=true" in container["args"]
        assert "--batching_parameters_file=/etc/tf-serving/batching.config" in container["args"]
        assert container["readinessProbe"]["httpGet"]["path"] == "/v1/models/digits"
    assert gpu["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in \
        gpu["tolerations"]
    assert "nvidia.com/gpu" not in cpu["containers"][0]["resources"]["limits"]


def test_each_route_backend_reaches_one_track_through_its_metrics_sidecar(rendered):
    """TF Serving's metrics carry the model name only: the canary's series are told apart by
    the pods that serve it, so each backend Service of the HTTPRoute selects one track."""
    objects = rendered["base"]
    services, deployments = _by_kind(objects, "Service"), _by_kind(objects, "Deployment")
    tracks = {name: d["spec"]["template"]["metadata"]["labels"]["mptfx.dev/track"]
              for name, d in deployments.items() if name.startswith("mptfx-serving-")}
    assert tracks == {"mptfx-serving-gpu": "stable", "mptfx-serving-cpu": "stable",
                      "mptfx-serving-canary": "canary"}
    for track in ("stable", "canary"):
        spec = services[f"mptfx-serving-{track}"]["spec"]
        assert spec["selector"] == {"app.kubernetes.io/name": "mptfx-serving",
                                    "mptfx.dev/track": track}
        assert [p["targetPort"] for p in spec["ports"]] == ["rest-proxy"]
    for name in tracks:
        pod = deployments[name]["spec"]["template"]["spec"]
        sidecar = {c["name"]: c for c in pod["containers"]}["metrics-sidecar"]
        assert sidecar["command"][:3] == ["mptfx", "serve", "sidecar"]
        assert {p["name"] for p in sidecar["ports"]} == {"rest-proxy", "metrics"}
        assert sidecar["image"] == _by_kind(objects, "CronJob")["mptfx-retrain"]["spec"][
            "jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"]
    gpu, canary = (deployments[n]["spec"]["template"]["spec"] for n in ("mptfx-serving-gpu",
                                                                       "mptfx-serving-canary"))
    assert canary["containers"][0]["resources"] == gpu["containers"][0]["resources"]
    for overlay in OVERLAYS:  # the canary runs on the stable's GPU nodes on every cloud
        specs = dict(_pod_specs(rendered[overlay]))
        assert specs["mptfx-serving-canary"]["nodeSelector"] == \
            specs["mptfx-serving-gpu"]["nodeSelector"]


def test_the_rollout_cronjob_judges_canaries_with_the_least_rights(rendered):
    from pipelines import cli

    objects = rendered["base"]
    cron = _by_kind(objects, "CronJob")["mptfx-serving-rollout"]["spec"]
    assert cron["concurrencyPolicy"] == "Forbid"
    job = cron["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0 and job["activeDeadlineSeconds"] > 3600
    [container] = job["template"]["spec"]["containers"]
    args = cli.build_parser().parse_args(container["command"][1:])
    assert (args.command, args.serve_command, args.if_canary, args.in_cluster) == (
        "serve", "rollout", True, True)
    assert args.workspace == "/mnt/mptfx" and args.config == "/etc/mptfx/config.yaml"
    assert {"name": "config", "configMap": {"name": "mptfx-config"}} in \
        job["template"]["spec"]["volumes"]
    for name in ["base", *OVERLAYS]:  # the cluster's config names the cluster's Prometheus
        text = _by_kind(rendered[name], "ConfigMap")["mptfx-config"]["data"]["config.yaml"]
        path = rendered["_dir"] / f"{name}-rollout-config.yaml"
        path.write_text(text)
        assert load_config(path).serving.analysis.prometheus_url == \
            "http://prometheus-operated.monitoring.svc:9090"
    role = _by_kind(objects, "Role")["mptfx-serving-rollout"]
    assert role["rules"] == [{"apiGroups": ["gateway.networking.k8s.io"],
                              "resources": ["httproutes"], "resourceNames": ["mptfx-serving"],
                              "verbs": ["get", "patch"]}]
    binding = _by_kind(objects, "RoleBinding")["mptfx-serving-rollout"]
    assert binding["subjects"][0]["name"] == job["template"]["spec"]["serviceAccountName"]


def test_retraining_cronjob_never_overlaps_and_keeps_a_short_history(rendered):
    cron = _by_kind(rendered["base"], "CronJob")["mptfx-retrain"]["spec"]
    assert cron["concurrencyPolicy"] == "Forbid"
    assert cron["startingDeadlineSeconds"] > 0 and cron["timeZone"] == "Etc/UTC"
    assert cron["successfulJobsHistoryLimit"] == 3 and cron["failedJobsHistoryLimit"] == 3
    container = cron["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["mptfx", "retrain"]


def test_the_retraining_cronjob_drives_the_kubernetes_runner_without_a_gpu(rendered):
    from pipelines import cli

    for name in ["base", *OVERLAYS]:
        cron = _by_kind(rendered[name], "CronJob")["mptfx-retrain"]["spec"]["jobTemplate"]
        pod = cron["spec"]["template"]["spec"]
        [container] = pod["containers"]
        args = cli.build_parser().parse_args(container["command"][1:] + container["args"])
        assert (args.command, args.runner, args.in_cluster) == ("retrain", "kubernetes", True)
        # The node Jobs it creates run the image this pod runs (the overlay's registry).
        assert args.set == [f"kubernetes.image={container['image']}"]
        assert pod["serviceAccountName"] == "mptfx-runner"
        assert "nvidia.com/gpu" not in container["resources"]["limits"]
        assert "nodeSelector" not in pod and "tolerations" not in pod
        assert not any(m["mountPath"] == "/dev/shm" for m in container["volumeMounts"])
        env = {e["name"]: e for e in container["env"]}
        assert env["MLFLOW_TRACKING_URI"]["value"] == _mlflow_url(rendered[name])
        assert cron["spec"]["podFailurePolicy"]["rules"][0] == {
            "action": "FailJob",
            "onExitCodes": {"containerName": "retrain", "operator": "In", "values": [2]}}
        assert pod["restartPolicy"] == "Never"


def test_the_monitor_cronjob_judges_a_day_and_retrains_on_the_clusters_runner(rendered):
    from pipelines import cli

    for name in ["base", *OVERLAYS]:
        cron = _by_kind(rendered[name], "CronJob")["mptfx-monitor"]["spec"]
        assert cron["concurrencyPolicy"] == "Forbid" and cron["timeZone"] == "Etc/UTC"
        job = cron["jobTemplate"]["spec"]
        pod = job["template"]["spec"]
        [container] = pod["containers"]
        args = cli.build_parser().parse_args(container["command"][1:] + container["args"])
        assert (args.command, args.since, args.retrain_on_drift, args.runner,
                args.in_cluster, args.workspace) == ("monitor", "24h", True, "kubernetes",
                                                     True, "/mnt/mptfx")
        assert args.set == [f"kubernetes.image={container['image']}"]  # the overlay's image
        # 2 (usage) and 4 (drift, reported and acted on) fail the Job at once: the alert.
        assert job["podFailurePolicy"]["rules"][0] == {
            "action": "FailJob",
            "onExitCodes": {"containerName": "monitor", "operator": "In", "values": [2, 4]}}
        assert pod["serviceAccountName"] == "mptfx-runner"
        env = {e["name"]: e for e in container["env"]}
        assert env["MLFLOW_TRACKING_URI"]["value"] == _mlflow_url(rendered[name])
        assert env["MPTFX_MLMD_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "mptfx-postgres"
        assert {"name": "config", "configMap": {"name": "mptfx-config"}} in pod["volumes"]


def test_every_serving_pods_rest_traffic_goes_through_its_request_logger(rendered, tmp_path):
    from pipelines import cli

    for name in ["base", *OVERLAYS]:
        text = _by_kind(rendered[name], "ConfigMap")["mptfx-config"]["data"]["config.yaml"]
        (tmp_path / f"{name}.yaml").write_text(text)
        config = load_config(tmp_path / f"{name}.yaml")  # strict: a typo fails here
        assert config.serving.request_log.sampling_rate == 0.05
        services = [s for s in _by_kind(rendered[name], "Service").values()
                    if s["spec"]["selector"].get("app.kubernetes.io/name") == "mptfx-serving"]
        assert len(services) == 3  # mptfx-serving, -stable, -canary
        for deployment in ("mptfx-serving-gpu", "mptfx-serving-cpu", "mptfx-serving-canary"):
            pod = _by_kind(rendered[name], "Deployment")[deployment]["spec"]["template"]["spec"]
            containers = {c["name"]: c for c in pod["containers"]}
            serving, logger = containers["tf-serving"], containers["request-logger"]
            ports = {p["name"]: (c["name"], p["containerPort"])
                     for c in pod["containers"] for p in c.get("ports", [])}
            # The route's Services reach it through the metrics sidecar (the canary
            # analysis' predictions), whose upstream is the request-logger.
            sidecar = cli.build_parser().parse_args(containers["metrics-sidecar"]["command"][1:])
            assert sidecar.upstream == f"http://127.0.0.1:{ports['rest'][1]}"
            for service in services:
                rest = [p for p in service["spec"]["ports"] if p["name"] == "rest"]
                assert [ports[p["targetPort"]][0] for p in rest] in (
                    ["request-logger"], ["metrics-sidecar"])
            args = cli.build_parser().parse_args(logger["command"][1:])
            assert args.command == "request-logger" and args.port == ports["rest"][1]
            assert args.upstream == f"http://127.0.0.1:{ports['tf-rest'][1]}"
            assert (args.workspace, args.config) == ("/mnt/mptfx", "/etc/mptfx/config.yaml")
            assert serving["readinessProbe"]["httpGet"]["port"] == "tf-rest"
            mounts = {m["mountPath"]: m for m in serving["volumeMounts"]}
            assert mounts["/mnt/mptfx"]["readOnly"] is True  # TF Serving only reads
            assert "readOnly" not in {m["mountPath"]: m for m in logger["volumeMounts"]}[
                "/mnt/mptfx"]  # the logger writes request_log/
            assert logger["image"] == _by_kind(rendered[name], "CronJob")["mptfx-monitor"][
                "spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"]


def _mlflow_url(objects: list[dict]) -> str:
    service = _by_kind(objects, "Service")["mptfx-mlflow"]
    return f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"


def test_the_trainer_job_the_cronjob_creates_gets_the_gpu_of_each_cloud(rendered):
    # The run's configuration (the CronJob's ConfigMap) gives the Trainer its GPU node pool.
    for name, label in [("base", "cloud.google.com/gke-accelerator"), ("gke", "cloud.google.com/"
                        "gke-accelerator"), ("eks", "node.kubernetes.io/instance-type"),
                        ("generic", "nvidia.com/gpu.present")]:
        text = _by_kind(rendered[name], "ConfigMap")["mptfx-config"]["data"]["config.yaml"]
        path = rendered["_dir"] / f"{name}-config.yaml"
        path.write_text(text)
        config = load_config(path)
        [trainer] = node_objects(config, "r1", PLAN[2], PLAN, "/ir.json")
        spec = trainer["spec"]["template"]["spec"]
        assert label in spec["nodeSelector"], name
        assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert config.data.source == "/mnt/mptfx/data/incoming"


def test_no_sqlite_store_and_no_credential_in_any_manifest(rendered):
    for name in ["base", *OVERLAYS]:
        text = (rendered["_dir"] / f"{name}.yaml").read_text()
        for needle in ("sqlite", "metadata.db", "mlflow.db"):
            assert needle not in text, (name, needle)
        for stored in _by_kind(rendered[name], "ConfigMap").values():
            data = json.dumps(stored.get("data", {})).lower()
            assert "password" not in data and "token" not in data, stored["metadata"]
        mlflow = _by_kind(rendered[name], "Deployment")["mptfx-mlflow"]
        args = mlflow["spec"]["template"]["spec"]["containers"][0]["args"]
        assert any(a.startswith("--backend-store-uri=postgresql://") for a in args)


def test_only_the_namespace_reaches_postgres_and_mlflow(rendered):
    policies = _by_kind(rendered["base"], "NetworkPolicy")
    for name, port in [("mptfx-postgres", 5432), ("mptfx-mlflow", 5000)]:
        spec = policies[name]["spec"]
        assert spec["policyTypes"] == ["Ingress"]
        [rule] = spec["ingress"]
        assert rule["from"] == [{"podSelector": {}}]  # same namespace, any pod; nothing else
        assert rule["ports"] == [{"port": port, "protocol": "TCP"}]


@pytest.mark.parametrize("overlay, label, storage_class", [
    ("gke", "cloud.google.com/gke-accelerator", "standard-rwx"),
    ("eks", "node.kubernetes.io/instance-type", "efs-sc"),
    ("generic", "nvidia.com/gpu.present", "nfs-client"),
])
def test_overlays_change_only_gpu_nodes_storage_and_images(rendered, overlay, label,
                                                           storage_class):
    objects = rendered[overlay]
    specs = dict(_pod_specs(objects))
    assert label in specs["mptfx-serving-gpu"]["nodeSelector"]
    assert label in _by_kind(objects, "ConfigMap")["mptfx-config"]["data"]["config.yaml"]
    assert "nodeSelector" not in specs["mptfx-serving-cpu"]
    pvc = _by_kind(objects, "PersistentVolumeClaim")["mptfx-workspace"]
    assert pvc["spec"]["storageClassName"] == storage_class
    images = {c["image"] for spec in specs.values() for c in spec["containers"]}
    assert not any(image.startswith("mptfx:") for image in images)  # the registry's image
    assert {(o["kind"], o["metadata"]["name"]) for o in objects} == \
        {(o["kind"], o["metadata"]["name"]) for o in rendered["base"]}


def _checkov(*args: str) -> dict:
    result = run_tool(tool("checkov"), "--skip-download", "--compact", "-o", "json", *args)
    assert result.returncode in (0, 1), result.stderr[-2000:]
    reports = json.loads(result.stdout)
    return reports if isinstance(reports, list) else [reports]


def test_checkov_passes_on_k8s_and_the_dockerfile_with_every_skip_explained():
    reports = (_checkov("-d", "k8s", "--framework", "kustomize")
               + _checkov("-d", "k8s/base", "--framework", "kubernetes")
               + _checkov("-f", "Dockerfile", "--framework", "dockerfile"))
    failed = [(c["check_id"], c["resource"]) for r in reports
              for c in r["results"]["failed_checks"]]
    assert failed == []
    assert sum(r["summary"]["passed"] for r in reports) > 1000
    skipped = [c for r in reports for c in r["results"]["skipped_checks"]]
    assert skipped and all(len(c["check_result"]["suppress_comment"]) > 40 for c in skipped)
    # Every skip is written where the object is, with its reason.
    written = re.findall(r"checkov(?:\.io/skip\d+: |:skip=)(CKV\w+)[=:](.+)",
                         "\n".join(p.read_text() for p in [*REPO.glob("k8s/**/*.yaml"),
                                                           REPO / "Dockerfile"]))
    assert {check for check, _ in written} == {c["check_id"] for c in skipped}


def test_hadolint_passes_and_each_ignore_says_why():
    result = run_tool(tool("hadolint"), "Dockerfile")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = (REPO / "Dockerfile").read_text().splitlines()
    for index, line in enumerate(lines):
        if "hadolint ignore" in line:
            assert lines[index - 1].startswith("#") and "hadolint" not in lines[index - 1]


def _pins(lock: str) -> dict[str, str]:
    return dict(re.findall(r"^([a-z0-9][a-z0-9._-]*)==(\S+)$", (REPO / lock).read_text(), re.M))


def test_the_image_is_cuda_tensorflow_on_python_3_10_as_a_non_root_user():
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=python:3\.10-slim-bookworm$", text, re.M)
    assert "uv pip sync" in text and "requirements-image.lock" in text
    # The image's lock is requirements.lock unchanged plus tensorflow[and-cuda]'s NVIDIA wheels.
    locked, image = _pins("requirements.lock"), _pins("requirements-image.lock")
    assert {name: image.get(name) for name in locked} == locked
    added = set(image) - set(locked)
    assert {"nvidia-cudnn-cu12", "nvidia-cuda-nvcc-cu12", "nvidia-cublas-cu12"} <= added
    assert all(name.startswith("nvidia-") and name.endswith("-cu12") for name in added)
    assert re.search(r"^USER 10001:10001$", text, re.M)
    assert text.rstrip().endswith('CMD ["python", "-m", "pipelines.node_entrypoint"]')


# -- objects the runner generates -------------------------------------------------------------


def _config(*overrides: str):
    return load_config(REPO / "configs" / "local.yaml", list(overrides))


def test_generated_objects_validate_strictly(tmp_path):
    objects = [config_map(_config(), "r1", "pipeline: {}\n"), driver_job(_config(), "r1"),
               driver_job(_config("kubernetes.tracking_secret=mlflow-login"), "r1",
                          ["--data", "/mnt/mptfx/d", "--follow-logs"], resume=True,
                          name_suffix="-r0a1b")]
    for overrides in ([], ["kubernetes.trainer.workers=3"]):
        config = _config(*overrides)
        for node in PLAN:
            objects += node_objects(config, "r1", node, PLAN, "/mnt/mptfx/ir.json",
                                    trainer_env=TRAINER_ENV)
    paths = []
    for index, body in enumerate(objects):
        paths.append(tmp_path / f"{index}.yaml")
        paths[-1].write_text(yaml.safe_dump(body))
    result = validate(paths)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [o["kind"] for o in objects].count("Service") == 1


# What the driver hands the Trainer's pods (pipelines/k8s_tracking.py open_run_for_pods).
TRAINER_ENV = {"MLFLOW_RUN_ID": "0123456789abcdef", "MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL": "2"}


@pytest.mark.parametrize("overrides", [[], ["kubernetes.trainer.workers=2"],
                                       ["kubernetes.trainer.workers=2",
                                        "kubernetes.trainer.use_tfjob=true"]])
def test_only_the_trainers_pods_get_the_mlflow_run_for_system_metrics(overrides):
    config = _config(*overrides)
    for node in PLAN:
        for body in node_objects(config, "r1", node, PLAN, "/ir.json", trainer_env=TRAINER_ENV):
            if body["kind"] == "Service":
                continue
            template = (body["spec"]["template"] if body["kind"] == "Job"
                        else body["spec"]["tfReplicaSpecs"]["Worker"]["template"])
            env = {e["name"]: e.get("value") for e in template["spec"]["containers"][0]["env"]}
            wanted = TRAINER_ENV.items() <= env.items()
            assert wanted == node.is_trainer, (node.node_id, env)
            assert env["MLFLOW_TRACKING_URI"] == "http://mptfx-mlflow:5000"  # every pod
            names = [e["name"] for e in template["spec"]["containers"][0]["env"]]
            assert len(names) == len(set(names))


def test_the_gpu_pool_gives_the_trainer_node_selector_toleration_and_gpus():
    config = _config("kubernetes.pools.gpu.gpus=4",
                     "kubernetes.pools.gpu.node_selector={nvidia.com/gpu.product: "
                     "NVIDIA-H100-80GB-HBM3}")
    [trainer] = node_objects(config, "r1", PLAN[2], PLAN, "/ir.json")
    spec = trainer["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists",
                                    "effect": "NoSchedule"}]
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert trainer["metadata"]["annotations"]["mptfx.dev/pool"] == "gpu"
    for node in PLAN[:2]:  # cpu pool: none of it
        [job] = node_objects(config, "r1", node, PLAN, "/ir.json")
        spec = job["spec"]["template"]["spec"]
        assert "nodeSelector" not in spec and "tolerations" not in spec
        assert "nvidia.com/gpu" not in spec["containers"][0]["resources"]["limits"]
        assert spec["containers"][0]["resources"]["requests"]["cpu"] == "1"


def test_a_multi_worker_trainer_is_an_indexed_job_behind_a_headless_service():
    config = _config("kubernetes.trainer.workers=3")
    service, job = node_objects(config, "r1", PLAN[2], PLAN, "/ir.json")
    assert service["spec"]["clusterIP"] == "None"
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 3
    spec = job["spec"]["template"]["spec"]
    assert spec["subdomain"] == service["metadata"]["name"] == job["metadata"]["name"]
    command = spec["containers"][0]["command"]
    hosts = command[command.index("--worker-hosts") + 1].split(",")
    assert hosts == [f"mptfx-r1-trainer-{i}.mptfx-r1-trainer:2222" for i in range(3)]
    selector = service["spec"]["selector"]
    assert all(job["spec"]["template"]["metadata"]["labels"][k] == v for k, v in selector.items())


def test_the_tfjob_matches_the_training_operator_crd_and_its_pods_kubernetes(tmp_path):
    import jsonschema

    config = _config("kubernetes.trainer.workers=2", "kubernetes.trainer.use_tfjob=true")
    [tfjob] = node_objects(config, "r1", PLAN[2], PLAN, "/ir.json")
    schema = json.loads((REPO / "k8s/schemas/tfjob-kubeflow.org-v1.schema.json").read_text())
    jsonschema.validate(tfjob, schema)
    worker = tfjob["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    assert worker["template"]["spec"]["containers"][0]["name"] == "tensorflow"
    pod_template = tmp_path / "pod-template.yaml"
    pod_template.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "PodTemplate",
        "metadata": {"name": "tfjob-worker"}, "template": worker["template"]}))
    result = validate([pod_template])
    assert result.returncode == 0, result.stdout + result.stderr
    typo = json.loads(json.dumps(tfjob))
    typo["spec"]["tfReplicaSpecs"]["Workers"] = typo["spec"]["tfReplicaSpecs"].pop("Worker")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(typo, schema)


def test_every_job_fails_at_once_on_exit_code_2_and_retries_crashes():
    jobs = [driver_job(_config(), "r1")]
    for overrides in ([], ["kubernetes.trainer.workers=3"]):
        for node in PLAN:
            jobs += [o for o in node_objects(_config(*overrides), "r1", node, PLAN, "/ir.json")
                     if o["kind"] == "Job"]
    assert len(jobs) == 7
    for job in jobs:
        spec = job["spec"]
        pod = spec["template"]["spec"]
        [fail_job, ignore] = spec["podFailurePolicy"]["rules"]
        assert fail_job == {"action": "FailJob", "onExitCodes": {
            "containerName": pod["containers"][0]["name"], "operator": "In", "values": [2]}}
        assert ignore["action"] == "Ignore"  # evictions and preemptions do not count
        assert pod["restartPolicy"] == "Never"  # podFailurePolicy requires it
    assert {j["spec"]["backoffLimit"] for j in jobs} == {0, 2}  # the driver: 0, nodes: 2
    [tfjob] = node_objects(_config("kubernetes.trainer.workers=2",
                                   "kubernetes.trainer.use_tfjob=true"),
                           "r1", PLAN[2], PLAN, "/ir.json")
    # The Training Operator's equivalent: exit codes 1-127 are permanent, 128-255 retried.
    assert tfjob["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] == "ExitCode"


def test_every_pod_records_to_the_clusters_mlflow_server_with_credentials_from_a_secret():
    config = _config("kubernetes.tracking_secret=mlflow-login")
    objects = [driver_job(config, "r1")] + [
        o for node in PLAN for o in node_objects(config, "r1", node, PLAN, "/ir.json")]
    for obj in objects:
        env = {e["name"]: e for e in obj["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["MLFLOW_TRACKING_URI"] == {"name": "MLFLOW_TRACKING_URI",
                                              "value": "http://mptfx-mlflow:5000"}
        for key in ("username", "password"):
            assert env[f"MLFLOW_TRACKING_{key.upper()}"]["valueFrom"] == {
                "secretKeyRef": {"name": "mlflow-login", "key": key}}
        assert "value" not in env["MPTFX_MLMD_PASSWORD"]
    no_login = driver_job(_config(), "r1")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert not any(e["name"].startswith("MLFLOW_TRACKING_P") for e in no_login)


# -- the InfraValidator's pod: TF Serving as a native sidecar ----------------------------------

INFRA_NODE = NodePlan("InfraValidator", ("Evaluator", "Ingest", "Trainer"), "cpu")
# The Deployment's flags that say what it serves (models.config and its labels): the sidecar
# serves one candidate from a folder instead.
_MODEL_SOURCE_FLAGS = ("--model_config_file", "--allow_version_labels_for_unavailable_models",
                       "--file_system_poll_wait_seconds")


def test_the_infra_validator_runs_tf_serving_pinned_by_digest_beside_the_node(rendered,
                                                                           tmp_path):
    """With infra.serving_image, the InfraValidator's Job runs TF Serving (pinned by digest)
    as a native sidecar with the CPU serving Deployment's flags, resources and security
    context; the whole Job validates strictly against Kubernetes 1.30."""
    from tests.k8s_double import TEST_SERVING_IMAGE

    [job] = node_objects(_config(f"infra.serving_image={TEST_SERVING_IMAGE}"), "r1",
                         INFRA_NODE, [*PLAN, INFRA_NODE], "/mnt/mptfx/ir.json")
    path = tmp_path / "infra-job.yaml"
    path.write_text(yaml.safe_dump(job))
    result = validate([path])
    assert result.returncode == 0, result.stdout + result.stderr

    pod = job["spec"]["template"]["spec"]
    [sidecar] = pod["initContainers"]
    assert sidecar["restartPolicy"] == "Always"  # a native sidecar: ends with the node
    assert re.fullmatch(r"tensorflow/serving:2\.16\.1@sha256:[0-9a-f]{64}", sidecar["image"])
    deployment = _by_kind(rendered["base"], "Deployment")["mptfx-serving-cpu"]
    [serving] = [c for c in deployment["spec"]["template"]["spec"]["containers"]
                 if c["name"] == "tf-serving"]
    assert sidecar["command"] == serving["command"] == ["tensorflow_model_server"]
    same = [arg for arg in serving["args"] if not arg.startswith(_MODEL_SOURCE_FLAGS)]
    assert set(same) <= set(sidecar["args"])
    assert "--model_name=digits" in sidecar["args"]
    assert "--model_base_path=/infra/candidate" in sidecar["args"]
    assert sidecar["resources"] == serving["resources"]
    assert sidecar["securityContext"] == serving["securityContext"]
    serving_volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tf-serving-config"]["configMap"] == serving_volumes["config"]["configMap"]
    [node] = pod["containers"]
    env = {item["name"]: item.get("value") for item in node["env"]}
    assert env["MPTFX_INFRA_SERVING_URL"] == "http://127.0.0.1:8501"
    assert env["MPTFX_INFRA_MODEL_DIR"] == "/infra/candidate"
    mounts = {m["name"]: m for m in node["volumeMounts"]}
    assert mounts["infra-candidate"]["mountPath"] == "/infra/candidate"
    assert not mounts["infra-candidate"].get("readOnly")
    assert {m["name"]: m for m in sidecar["volumeMounts"]}["infra-candidate"]["readOnly"]
    # Without a pinned image the node checks in its own TensorFlow: no sidecar.
    [plain] = node_objects(_config(), "r1", INFRA_NODE, [*PLAN, INFRA_NODE], "/ir.json")
    assert "initContainers" not in plain["spec"]["template"]["spec"]

"""One securityContext for every pod and one for every container, whoever builds the object:
the run's Jobs, Services, TFJob and driver, the InfraValidator's TF Serving sidecar, the
serving route and monitoring, the rollout CronJob (all from pipelines/kubernetes/objects.py),
and every object the kustomize base ships by hand (k8s/base; the overlays change no pod's
security). A cluster's admission policy (Pod Security "restricted", checkov, OPA) then sees
the same rules everywhere, and the image's user (10001, the Dockerfile's) is written once."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import yaml

from pipelines.config import load_config
from pipelines.kubernetes.ir import NodePlan
from pipelines.kubernetes.manifests import driver_job, run_objects
from pipelines.kubernetes.objects import (
    IMAGE_UID,
    container_security_context,
    pod_security_context,
)
from pipelines.kubernetes.rollout_job import rollout_objects
from pipelines.kubernetes.serving import (
    render_http_route,
    render_prometheus_rule,
    render_service_monitor,
)
from tests.k8s_double import TEST_SERVING_IMAGE

REPO = Path(__file__).resolve().parents[2]
PLAN = [
    NodePlan("Ingest", (), "cpu"),
    NodePlan("Trainer", ("Ingest",), "gpu"),
    NodePlan("Evaluator", ("Ingest", "Trainer"), "cpu"),
    NodePlan("InfraValidator", ("Evaluator", "Ingest", "Trainer"), "cpu"),
]
# Every variant a builder has: one worker, an Indexed Job behind a Service, a TFJob; TF
# Serving beside the InfraValidator; MLflow with a login.
VARIANTS = [
    [],
    ["kubernetes.trainer.workers=3"],
    ["kubernetes.trainer.workers=2", "kubernetes.trainer.use_tfjob=true"],
    [f"infra.serving_image={TEST_SERVING_IMAGE}", "kubernetes.tracking_secret=mlflow-login"],
]
# The PostgreSQL image runs as its own user (999): the same context with that uid.
OTHER_USERS = {"mptfx-postgres": 999}


def rendered_objects() -> list[dict]:
    """Every object mptfx's code renders, in each variant of its configuration."""
    objects: list[dict] = []
    for overrides in VARIANTS:
        config = load_config(None, overrides)
        objects += run_objects(config, "r1", PLAN, "/mnt/mptfx/ir.json", "pipeline: {}\n")
        objects += [driver_job(config, "r1", ["--follow-logs"], resume=True, name_suffix="-r1"),
                    render_http_route(config, 10), render_service_monitor(config),
                    render_prometheus_rule(config), *rollout_objects(config)]
    return objects


def base_objects() -> list[dict]:
    """Every object of the kustomize base, as its files write them."""
    return [doc for path in sorted((REPO / "k8s/base").glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc and "metadata" in doc]


def pod_specs(node: object) -> Iterator[dict]:
    """Every pod spec anywhere in `node` (a Job's template, a CronJob's job template, a
    TFJob's replica, a Deployment's, a StatefulSet's)."""
    if isinstance(node, dict):
        if "containers" in node:
            yield node
        for value in node.values():
            yield from pod_specs(value)
    elif isinstance(node, list):
        for value in node:
            yield from pod_specs(value)


def security_contexts(node: object) -> int:
    """How many securityContext fields `node` holds, wherever they are."""
    if isinstance(node, dict):
        return ("securityContext" in node) + sum(map(security_contexts, node.values()))
    if isinstance(node, list):
        return sum(map(security_contexts, node))
    return 0


def _with_user(context: dict, uid: int) -> dict:
    return {**context, **{key: uid for key in ("runAsUser", "runAsGroup", "fsGroup")
                          if key in context}}


def _check_pods(objects: list[dict]) -> tuple[int, int]:
    """Assert each pod's and container's context; returns (pods, containers) checked."""
    pods = containers = 0
    for obj in objects:
        uid = OTHER_USERS.get(obj["metadata"]["name"], IMAGE_UID)
        checked = 0
        for pod in pod_specs(obj):
            where = f"{obj['kind']} {obj['metadata']['name']}"
            assert pod["securityContext"] == _with_user(pod_security_context(), uid), where
            for container in pod["containers"] + pod.get("initContainers", []):
                assert container["securityContext"] == _with_user(
                    container_security_context(), uid), f"{where} {container['name']}"
                containers += 1
                checked += 1
            pods += 1
            checked += 1
        # No securityContext anywhere else (an ephemeral container, a typo'd place).
        assert security_contexts(obj) == checked, obj["metadata"]["name"]
    return pods, containers


def test_every_rendered_pod_and_container_has_the_one_security_context():
    objects = rendered_objects()
    pods, containers = _check_pods(objects)
    kinds = {o["kind"] for o in objects}
    assert {"Job", "TFJob", "CronJob", "Service", "HTTPRoute"} <= kinds
    sidecars = [c for pod in pod_specs(objects) for c in pod.get("initContainers", [])]
    assert [c["name"] for c in sidecars] == ["tf-serving"]  # the InfraValidator's variant
    # 4 variants x (4 nodes, the run's driver, a resumed driver, the rollout CronJob); one
    # TF Serving sidecar
    assert (pods, containers) == (28, 29)


def test_every_pod_and_container_of_the_kustomize_base_has_the_same_context():
    objects = base_objects()
    pods, containers = _check_pods(objects)
    # mlflow, postgres, 3 serving Deployments (3 containers each), retrain, monitor, rollout
    assert (pods, containers) == (8, 14)


def test_the_security_context_is_restrictive():
    container, pod = container_security_context(), pod_security_context()
    assert container["allowPrivilegeEscalation"] is False
    assert container["readOnlyRootFilesystem"] is True
    assert container["capabilities"] == {"drop": ["ALL"]}
    for context in (container, pod):
        assert context["runAsNonRoot"] is True
        assert context["runAsUser"] == context["runAsGroup"] == IMAGE_UID
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(rf"^USER {IMAGE_UID}:{IMAGE_UID}$", dockerfile, re.M)


def test_the_image_uid_is_written_once_in_the_code():
    spelled = [str(path.relative_to(REPO))
               for package in ("pipelines", "components", "models", "benchmarks")
               for path in sorted((REPO / package).rglob("*.py"))
               for line in path.read_text().splitlines() if str(IMAGE_UID) in line]
    assert spelled == ["pipelines/kubernetes/objects.py"]  # one line: IMAGE_UID = ...

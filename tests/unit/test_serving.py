"""Serving operations without a pipeline run: models.config, the Pusher's rollout and pruning,
the rendered HTTPRoute / ServiceMonitor / PrometheusRule against their CRDs' own schemas."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest
import tensorflow as tf
import yaml
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from components.pusher.component import push_with_rollout
from components.serving.models_config import (
    ModelsConfigError,
    ServingLabels,
    read_labels,
    write_labels,
)
from pipelines.config import ConfigError, load_config
from pipelines.kubernetes.rollout_job import rollout_objects
from pipelines.kubernetes.serving import (
    render_http_route,
    render_prometheus_rule,
    render_service_monitor,
)

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "k8s" / "schemas"


def _parse(path: Path) -> model_server_config_pb2.ModelServerConfig:
    return text_format.Parse(path.read_text(), model_server_config_pb2.ModelServerConfig())


def _saved_model(path: Path, value: float) -> str:
    module = tf.Module()
    module.weight = tf.Variable([value])
    tf.saved_model.save(module, str(path))
    return str(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> list[str]:
    """Six different real SavedModels, so each push is a new version."""
    root = tmp_path_factory.mktemp("models")
    return [_saved_model(root / f"m{i}", float(i)) for i in range(6)]


def test_models_config_is_tf_servings_own_format_and_keeps_other_models(tmp_path):
    path = tmp_path / "models.config"
    path.write_text('model_config_list { config { name: "other" base_path: "/o" '
                    'model_platform: "tensorflow" } }')
    write_labels(path, "digits", "/s/digits", ServingLabels(stable=3, canary=5, previous=2))
    config = _parse(path)
    entries = {entry.name: entry for entry in config.model_config_list.config}
    assert set(entries) == {"other", "digits"} and entries["other"].base_path == "/o"
    digits = entries["digits"]
    assert digits.base_path == "/s/digits" and digits.model_platform == "tensorflow"
    assert list(digits.model_version_policy.specific.versions) == [2, 3, 5]
    assert dict(digits.version_labels) == {"stable": 3, "canary": 5, "previous": 2}
    assert read_labels(path, "digits") == ServingLabels(stable=3, canary=5, previous=2)
    assert sorted(os.listdir(tmp_path)) == ["models.config"]  # no temporary file left
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_a_garbled_models_config_is_named_not_overwritten(tmp_path):
    path = tmp_path / "models.config"
    path.write_text("model_config_list { config { name: ")
    with pytest.raises(ModelsConfigError, match=str(path)):
        write_labels(path, "digits", "/s/digits", ServingLabels(stable=1))
    assert path.read_text() == "model_config_list { config { name: "


def test_label_moves_keep_the_previous_stable():
    labels = ServingLabels(stable=1).with_canary(2)
    assert labels.as_dict() == {"stable": 1, "canary": 2}
    promoted = labels.with_stable(2)
    assert promoted.as_dict() == {"stable": 2, "previous": 1}
    assert promoted.with_stable(2) == promoted


def test_direct_and_canary_pushes_label_and_pruning_keeps_labelled_versions(models, tmp_path):
    base = str(tmp_path / "serving" / "digits")
    config = tmp_path / "serving" / "models.config"

    def push(model: str, rollout: str) -> tuple[int, str | None]:
        version, _, label = push_with_rollout(model, base, keep_versions=2, rollout=rollout)
        return version, label

    assert push(models[0], "canary") == (1, "stable")  # a first push has no stable to trial
    assert push(models[1], "direct") == (2, "stable")
    assert push(models[2], "canary") == (3, "canary")
    assert push(models[3], "canary") == (4, "canary")
    assert push(models[4], "canary") == (5, "canary")
    assert dict(_parse(config).model_config_list.config[0].version_labels) == {
        "stable": 2, "previous": 1, "canary": 5}
    # keep_versions=2 keeps 4 and 5; stable 2 and previous stable 1 survive; 3 is gone.
    assert sorted(os.listdir(base)) == ["1", "2", "4", "5"]
    assert push(models[5], "direct") == (6, "stable")
    assert dict(_parse(config).model_config_list.config[0].version_labels) == {
        "stable": 6, "previous": 2, "canary": 5}
    assert sorted(os.listdir(base)) == ["2", "5", "6"]  # 1 and 4 are no longer labelled


def test_keep_versions_below_two_and_unknown_rollouts_are_refused():
    with pytest.raises(ConfigError, match="pusher.keep_versions"):
        load_config(None, ["pusher.keep_versions=1"])
    with pytest.raises(ConfigError, match="pusher.rollout"):
        load_config(None, ["pusher.rollout=blue-green"])


def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


SCHEMA_OF = {"HTTPRoute": "httproute-gateway.networking.k8s.io-v1",
             "ServiceMonitor": "servicemonitor-monitoring.coreos.com-v1",
             "PrometheusRule": "prometheusrule-monitoring.coreos.com-v1"}


def test_rendered_route_and_monitoring_validate_against_the_crd_schemas():
    config = load_config(None, ["serving.p99_latency_budget_ms=80"])
    route = render_http_route(config, 25)
    for obj in (route, render_service_monitor(config), render_prometheus_rule(config)):
        jsonschema.validate(obj, _schema(SCHEMA_OF[obj["kind"]]))
    stable, canary = route["spec"]["rules"][0]["backendRefs"]
    assert (stable["weight"], canary["weight"]) == (75, 25)
    assert canary["filters"][0]["urlRewrite"]["path"]["replaceFullPath"] == \
        "/v1/models/digits/labels/canary:predict"
    latency = [r for r in render_prometheus_rule(config)["spec"]["groups"][0]["rules"]
               if r["alert"] == "MptfxModelLatencyP99"][0]
    assert latency["expr"].endswith("> 80000")  # TF Serving's latency histogram is in µs


@pytest.mark.parametrize("kind,break_it", [
    ("HTTPRoute", lambda o: o["spec"]["rules"][0]["backendRefs"][0].update(wieght=1)),
    ("HTTPRoute", lambda o: o["spec"]["rules"][0]["backendRefs"][0].update(weight=-1)),
    ("ServiceMonitor", lambda o: o["spec"]["endpoints"][0].update(intervall="30s")),
    ("PrometheusRule", lambda o: o["spec"]["groups"][0]["rules"][0].pop("expr")),
])
def test_the_crd_schemas_refuse_typos_and_bad_values(kind, break_it):
    config = load_config(None, [])
    render = {"HTTPRoute": lambda: render_http_route(config, 10),
              "ServiceMonitor": lambda: render_service_monitor(config),
              "PrometheusRule": lambda: render_prometheus_rule(config)}[kind]
    broken = render()
    break_it(broken)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, _schema(SCHEMA_OF[kind]))


def test_the_kustomize_base_ships_the_default_rendering():
    config = load_config(None, [])
    route = list(yaml.safe_load_all((REPO / "k8s/base/serving-route.yaml").read_text()))
    monitoring = list(yaml.safe_load_all(
        (REPO / "k8s/base/serving-monitoring.yaml").read_text()))
    assert route == [render_http_route(config, 0)]
    assert monitoring == [render_service_monitor(config), render_prometheus_rule(config)]
    rollout = list(yaml.safe_load_all((REPO / "k8s/base/serving-rollout.yaml").read_text()))
    assert rollout == rollout_objects(config)
    kustomization = yaml.safe_load((REPO / "k8s/base/kustomization.yaml").read_text())
    assert {"serving-route.yaml", "serving-monitoring.yaml",
            "serving-rollout.yaml"} <= set(kustomization["resources"])


def test_tf_serving_reads_models_config_from_the_volume_with_labels_and_metrics():
    objects = list(yaml.safe_load_all((REPO / "k8s/base/serving.yaml").read_text()))
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    assert len(deployments) == 3  # stable on GPU, stable on CPU, the canary track
    for deployment in deployments:
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert "--model_config_file=/mnt/mptfx/serving/models.config" in args
        assert "--allow_version_labels_for_unavailable_models=true" in args
        assert "--monitoring_config_file=/etc/tf-serving/monitoring.config" in args
        assert any(a.startswith("--model_config_file_poll_wait_seconds=") for a in args)
    [config_map] = [o for o in objects if o["kind"] == "ConfigMap"]
    # tensorflow-serving-api ships no monitoring_config_pb2; the ServiceMonitor must scrape
    # the path this file enables.
    monitoring = config_map["data"]["monitoring.config"]
    assert "enable: true" in monitoring
    path = render_service_monitor(load_config(None, []))["spec"]["endpoints"][0]["path"]
    assert f'path: "{path}"' in monitoring
    services = {o["metadata"]["name"] for o in objects if o["kind"] == "Service"}
    assert {"mptfx-serving-stable", "mptfx-serving-canary"} <= services

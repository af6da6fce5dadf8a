"""The `infra` config section: defaults that are the serving Deployment's, values refused
with one line naming the key, and the TF Serving flags the Kubernetes check shares with
that Deployment (k8s/base/serving.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from components.infra.config import quantity_bytes
from pipelines.config import Config, ConfigError, load_config
from pipelines.kubernetes.infra_sidecar import CANDIDATE_FLAGS, SERVING_FLAGS

REPO = Path(__file__).resolve().parents[2]


def _serving_container(deployment: str) -> dict:
    docs = yaml.safe_load_all((REPO / "k8s" / "base" / "serving.yaml").read_text())
    [found] = [d for d in docs if d and d["kind"] == "Deployment"
               and d["metadata"]["name"] == deployment]
    [container] = [c for c in found["spec"]["template"]["spec"]["containers"]
                   if c["name"] == "tf-serving"]
    return container


def test_the_defaults_are_the_cpu_serving_deployments_resources():
    serving = _serving_container("mptfx-serving-cpu")
    infra = Config().infra
    assert {"requests": infra.requests, "limits": infra.limits} == serving["resources"]
    assert infra.memory_limit_bytes == 4 * 2**30
    assert load_config("configs/local.yaml").infra == infra  # local.yaml documents them


def test_the_sidecar_has_every_flag_of_the_deployment_but_what_it_serves():
    args = _serving_container("mptfx-serving-cpu")["args"]
    what_it_serves = ("--model_config_file", "--allow_version_labels_for_unavailable_models",
                      "--file_system_poll_wait_seconds")
    assert sorted(SERVING_FLAGS) == sorted(a for a in args if not a.startswith(what_it_serves))
    assert any(flag.startswith("--file_system_poll_wait_seconds=") for flag in CANDIDATE_FLAGS)


@pytest.mark.parametrize(("override", "named"), [
    ("infra.serving_image=tensorflow/serving:2.16.1", "infra.serving_image must be pinned by "
                                                      "digest"),
    ("infra.limits={cpu: '4'}", "infra.limits.memory must be set"),
    ("infra.limits={memory: lots}", "not a memory quantity such as 4Gi"),
    ("infra.num_examples=0", "'infra.num_examples'"),
    ("infra.max_load_seconds=0", "'infra.max_load_seconds'"),
    ("infra.p99_latency_ms=-1", "'infra.p99_latency_ms'"),
    ("infra.num_exampels=3", "unknown config key 'infra.num_exampels'"),
])
def test_bad_infra_values_are_one_line_naming_the_key(override, named):
    with pytest.raises(ConfigError) as caught:
        load_config("configs/local.yaml", [override])
    assert named in str(caught.value) and "\n" not in str(caught.value)


def test_a_digest_pinned_image_is_taken_and_quantities_are_bytes():
    image = "tensorflow/serving:2.16.1@sha256:" + "ab" * 32
    assert load_config("configs/local.yaml", [f"infra.serving_image={image}"]) \
        .infra.serving_image == image
    assert quantity_bytes("512Mi") == 512 * 2**20 and quantity_bytes("2G") == 2 * 10**9
    assert quantity_bytes("1500000000") == 1_500_000_000

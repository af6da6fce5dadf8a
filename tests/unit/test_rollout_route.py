"""`mptfx serve rollout --in-cluster` moves the weights of the cluster's HTTPRoute. The
Kubernetes API server cannot run here: `RouteServer` is a double at the client boundary
(CustomObjectsApi.patch_namespaced_custom_object) that applies the JSON merge patch the
client sends (RFC 7386, what `application/merge-patch+json` means) to the HTTPRoute the base
ships, and validates the result against the Gateway API CRD schema, as the server would."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from pipelines.config import load_config
from pipelines.kubernetes.api import KubernetesError
from pipelines.kubernetes.route import patch_http_route
from pipelines.kubernetes.serving import render_http_route
from tests.k8s_double import api_error

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "k8s/schemas/httproute-gateway.networking.k8s.io-v1.schema.json")
                    .read_text())


def merge_patch(target, patch):
    """RFC 7386: objects merge key by key, anything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


class RouteServer:
    def __init__(self, refuse=None):
        [self.route] = yaml.safe_load_all((REPO / "k8s/base/serving-route.yaml").read_text())
        self.refuse = refuse

    def patch_namespaced_custom_object(self, group, version, namespace, plural, name, body):
        if self.refuse:
            raise self.refuse
        assert (group, version, plural) == ("gateway.networking.k8s.io", "v1", "httproutes")
        assert (namespace, name) == (self.route["metadata"]["namespace"],
                                     self.route["metadata"]["name"])
        patched = merge_patch(self.route, body)
        jsonschema.validate(patched, SCHEMA)
        self.route = patched
        return patched


def weights(route: dict) -> list[int]:
    return [ref["weight"] for ref in route["spec"]["rules"][0]["backendRefs"]]


def test_each_step_leaves_the_clusters_route_exactly_as_rendered():
    config = load_config(None, [])
    server = RouteServer()
    assert weights(server.route) == [100, 0]
    for weight in (10, 25, 100, 0):
        patch_http_route(server, render_http_route(config, weight))
        assert server.route == render_http_route(config, weight)
        assert weights(server.route) == [100 - weight, weight]


def test_a_refused_patch_is_one_line_naming_the_route_and_the_role():
    server = RouteServer(refuse=api_error(403, "Forbidden", 'httproutes "mptfx-serving" is '
                                          'forbidden: User "system:serviceaccount:mptfx:x" '
                                          'cannot patch resource "httproutes"'))
    with pytest.raises(KubernetesError) as refused:
        patch_http_route(server, render_http_route(load_config(None, []), 10))
    message = str(refused.value)
    assert message.startswith("forbidden: cannot patch HTTPRoute mptfx-serving in namespace "
                              "mptfx (the ServiceAccount or user lacks RBAC rights")
    assert "\n" not in message

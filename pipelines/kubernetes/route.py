"""Moving the canary's traffic in the cluster: patch the HTTPRoute `mptfx serve` renders.

A JSON merge patch of the whole `spec` (the client sends custom objects as
`application/merge-patch+json`): its `rules` list replaces the server's, so the route in the
cluster is exactly the rendered one. One line naming the route on any refusal (exit 2)."""

from __future__ import annotations

from typing import Any

from pipelines.kubernetes.api import api_call

GATEWAY_GROUP, GATEWAY_VERSION, HTTPROUTES = "gateway.networking.k8s.io", "v1", "httproutes"


def patch_http_route(custom_api: Any, route: dict[str, Any]) -> None:
    """Make the cluster's HTTPRoute `route["metadata"]["name"]` carry `route`'s spec."""
    name, namespace = route["metadata"]["name"], route["metadata"]["namespace"]
    with api_call("patch", f"HTTPRoute {name}", namespace):
        custom_api.patch_namespaced_custom_object(
            GATEWAY_GROUP, GATEWAY_VERSION, namespace, HTTPROUTES, name,
            {"spec": route["spec"]})

"""Kubernetes objects around TF Serving: the canary HTTPRoute, ServiceMonitor, PrometheusRule.

One TF Serving Deployment serves every labelled version (models.config); the traffic split
happens in front of it. Two Services select the same pods, `mptfx-serving-stable` and
`mptfx-serving-canary`, so a Gateway API implementation can weight them; each backend of
the predict rule rewrites the path to its label (`/v1/models/<name>/labels/<label>:predict`),
so TF Serving answers from the right version. Clients that already address a label or a
version directly go to the stable Service unchanged.

    route = render_http_route(config, weight=10)    # 90 % stable, 10 % canary
    write_manifests(Path("workspace/k8s") / ROUTE_FILE, [route], ROUTE_HEADER)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipelines.config import Config
from pipelines.kubernetes.objects import app_labels, metadata, write_manifests

GATEWAY_API_VERSION = "gateway.networking.k8s.io/v1"
MONITORING_API_VERSION = "monitoring.coreos.com/v1"
SERVICE_NAME = "mptfx-serving"
STABLE_SERVICE = "mptfx-serving-stable"
CANARY_SERVICE = "mptfx-serving-canary"
REST_PORT = 8501
METRICS_PATH = "/monitoring/prometheus/metrics"
# The metrics sidecar (components/serving/sidecar.py): the route's backends reach TF Serving
# through its proxy port; its own metrics are on SIDECAR_METRICS_PORT.
SIDECAR_PORT = 8508
SIDECAR_METRICS_PORT = 9108
SIDECAR_METRICS_PATH = "/metrics"
# Pods of the stable and the canary track carry this label; scrape targets get it as `track`.
TRACK_POD_LABEL = "mptfx.dev/track"
ROUTE_FILE = "serving-route.yaml"
MONITORING_FILE = "serving-monitoring.yaml"
LABELS = app_labels("serving", name=SERVICE_NAME)


def _backend(service: str, weight: int, model_name: str, label: str) -> dict[str, Any]:
    return {
        "name": service, "port": REST_PORT, "weight": weight,
        "filters": [{"type": "URLRewrite", "urlRewrite": {"path": {
            "type": "ReplaceFullPath",
            "replaceFullPath": f"/v1/models/{model_name}/labels/{label}:predict"}}}],
    }


def render_http_route(config: Config, weight: int) -> dict[str, Any]:
    """The HTTPRoute sending `weight` % of `/v1/models/<name>:predict` to the canary label
    and the rest to the stable label; every other path goes to the stable Service."""
    if not 0 <= weight <= 100:
        raise ValueError(f"--weight must be between 0 and 100. Received: {weight}")
    namespace = config.kubernetes.namespace
    model_name = config.pusher.model_name
    parent: dict[str, Any] = {"name": config.serving.gateway}
    if config.serving.gateway_namespace:
        parent["namespace"] = config.serving.gateway_namespace
    predict = f"/v1/models/{model_name}:predict"
    return {
        "apiVersion": GATEWAY_API_VERSION,
        "kind": "HTTPRoute",
        "metadata": metadata(SERVICE_NAME, namespace, LABELS),
        "spec": {
            "parentRefs": [parent],
            "rules": [
                {"matches": [{"path": {"type": "Exact", "value": predict},
                              "method": "POST"}],
                 "backendRefs": [_backend(STABLE_SERVICE, 100 - weight, model_name, "stable"),
                                 _backend(CANARY_SERVICE, weight, model_name, "canary")]},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/v1/models"}}],
                 "backendRefs": [{"name": STABLE_SERVICE, "port": REST_PORT}]},
            ],
        },
    }


def render_service_monitor(config: Config) -> dict[str, Any]:
    """Prometheus Operator ServiceMonitor scraping TF Serving's Prometheus endpoint and the
    metrics sidecar's; both get the pod's track (stable | canary) as the label `track`, which
    is how the canary analysis tells the canary's series from the stable's (TF Serving's own
    metrics carry the model name only)."""
    track = [{"sourceLabels": ["__meta_kubernetes_pod_label_"
                               + TRACK_POD_LABEL.replace(".", "_").replace("/", "_")],
              "targetLabel": "track", "action": "replace"}]
    return {
        "apiVersion": MONITORING_API_VERSION,
        "kind": "ServiceMonitor",
        "metadata": metadata(SERVICE_NAME, config.kubernetes.namespace, LABELS),
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": SERVICE_NAME,
                                         "app.kubernetes.io/component": "serving"}},
            "endpoints": [{"port": "rest", "path": METRICS_PATH, "interval": "30s",
                           "scheme": "http", "relabelings": track},
                          {"port": "metrics", "path": SIDECAR_METRICS_PATH, "interval": "30s",
                           "scheme": "http", "relabelings": track}],
        },
    }


def render_prometheus_rule(config: Config) -> dict[str, Any]:
    """Alerts: the model is not available, request error ratio, p99 latency over budget."""
    model = config.pusher.model_name
    budget_us = int(config.serving.p99_latency_budget_ms * 1000)  # TF Serving counts in µs
    max_errors = config.serving.max_error_rate
    # The Operator labels each target with its Service (job) and port name (endpoint): the
    # sidecar's `metrics` port answering must not hide a TF Serving that does not.
    job = f'job="{SERVICE_NAME}",endpoint="rest"'
    selector = f'model_name="{model}"'
    requests = f":tensorflow:serving:request_count{{{selector}}}"
    failed = f':tensorflow:serving:request_count{{{selector},status!="OK"}}'
    # API="" is the readiness probes' model status requests: fast, and not what users wait for.
    latency = f':tensorflow:serving:request_latency_bucket{{{selector},API!=""}}'
    rules = [
        {"alert": "MptfxModelNotAvailable",
         # Not ready (readiness probe on /v1/models/<name>) means not scraped: up is 0 or absent.
         "expr": f"(sum(up{{{job}}}) or vector(0)) == 0",
         "for": "5m", "labels": {"severity": "critical"},
         "annotations": {"summary": f"TF Serving does not serve model {model}",
                         "description": "No TF Serving pod of the model answers its "
                         "Prometheus endpoint for 5 minutes."}},
        {"alert": "MptfxModelRequestErrors",
         "expr": f"sum(rate({failed}[5m])) / sum(rate({requests}[5m])) > {max_errors:g}",
         "for": "10m", "labels": {"severity": "warning"},
         "annotations": {"summary": f"{model}: more than {max_errors:.1%} of requests fail"}},
        {"alert": "MptfxModelLatencyP99",
         "expr": f"histogram_quantile(0.99, sum by (le) (rate({latency}[5m]))) > {budget_us}",
         "for": "10m", "labels": {"severity": "warning"},
         "annotations": {"summary": f"{model}: p99 request latency above "
                         f"{config.serving.p99_latency_budget_ms:g} ms"}},
    ]
    return {
        "apiVersion": MONITORING_API_VERSION,
        "kind": "PrometheusRule",
        "metadata": metadata(SERVICE_NAME, config.kubernetes.namespace, LABELS),
        "spec": {"groups": [{"name": f"mptfx-serving-{model}", "rules": rules}]},
    }


ROUTE_HEADER = """The weighted canary split in front of TF Serving (Gateway API HTTPRoute).
Rendered by `mptfx serve canary VERSION --weight PCT` (and every other `mptfx serve` verb)
into <workspace>/k8s/serving-route.yaml; apply that file to move traffic. The base ships
weight 0: every predict request goes to the stable label."""
MONITORING_HEADER = """Prometheus Operator objects for TF Serving metrics (monitoring.config).
Rendered by `mptfx serve render` from serving.p99_latency_budget_ms and
serving.max_error_rate; this file is the rendering of the defaults."""


def render_all(out_dir: Path, config: Config, weight: int) -> list[Path]:
    """Write the route and the monitoring objects into `out_dir`."""
    return [
        write_manifests(out_dir / ROUTE_FILE, [render_http_route(config, weight)], ROUTE_HEADER),
        write_manifests(out_dir / MONITORING_FILE, [render_service_monitor(config),
                                                    render_prometheus_rule(config)],
                        MONITORING_HEADER),
    ]

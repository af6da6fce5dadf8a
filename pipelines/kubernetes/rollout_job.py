"""The automatic canary analysis on Kubernetes: a CronJob running `mptfx serve rollout`.

Why a CronJob rather than a Job the pipeline's driver starts after a canary push: a canary
is labelled by more than one path (the Pusher of an in-cluster run, of the retraining
CronJob, a local run writing to the shared volume, `mptfx serve canary` by hand), and a
schedule judges all of them without any of them knowing about the rollout. It also recovers:
a rollout pod that was evicted midway is followed by the next scheduled one, which starts
again from the first step; a rollout that gave up for lack of traffic (exit 3) keeps the
canary's label, so the next one judges it again. With no canary it exits 0 at once
(`--if-canary`); `concurrencyPolicy: Forbid` keeps one rollout at a time.

It reads the cluster's configuration (the ConfigMap mptfx-config, which names the
cluster's Prometheus in serving.analysis.prometheus_url). The pod patches the HTTPRoute (its
Role may get and patch that one HTTPRoute, nothing else), writes models.config on the
workspace volume, and records in the cluster's MLflow.

    objects = rollout_objects(config)   # ServiceAccount, Role, RoleBinding, CronJob
"""

from __future__ import annotations

import math
from typing import Any

from components.serving.config import AnalysisSection
from pipelines.config import Config
from pipelines.kubernetes import objects
from pipelines.kubernetes.serving import SERVICE_NAME

ROLLOUT_NAME = "mptfx-serving-rollout"
ROLLOUT_FILE = "serving-rollout.yaml"
CONFIG_MAP = "mptfx-config"  # the cluster's configuration, k8s/base/retrain-cronjob.yaml
CONFIG_FILE = "/etc/mptfx/config.yaml"
SCHEDULE = "*/10 * * * *"
LABELS = objects.app_labels("serving-rollout")
ROLLOUT_HEADER = """The automatic canary analysis: `mptfx serve rollout` every 10 minutes (a no-op
without a canary). Rendered by `mptfx serve render` from serving.analysis and kubernetes.*;
this file is the rendering of the defaults. See docs/guide/canary.md."""


def longest_rollout_seconds(analysis: AnalysisSection) -> int:
    """The most a rollout can take: every step held through every failed and inconclusive
    check it may make, plus a check's worth of queries."""
    checks = len(analysis.steps) * (analysis.failure_limit + analysis.inconclusive_limit)
    return math.ceil(checks * analysis.interval + analysis.interval
                     + checks * 6 * analysis.query_timeout_seconds)


def _container(config: Config) -> dict[str, Any]:
    k8s = config.kubernetes
    return {
        "name": "rollout",
        "image": k8s.image,
        "imagePullPolicy": "Always",
        "command": ["mptfx", "serve", "rollout", "--if-canary", "--in-cluster",
                    "--workspace", k8s.workspace, "--config", CONFIG_FILE],
        "env": [*objects.image_env(), *objects.mlflow_env(k8s)],
        "resources": {"requests": {"cpu": "100m", "memory": "512Mi",
                                   "ephemeral-storage": "64Mi"},
                      "limits": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "256Mi"}},
        "securityContext": objects.container_security_context(),
        "volumeMounts": [{"name": "workspace", "mountPath": k8s.workspace},
                         {"name": "config", "mountPath": "/etc/mptfx", "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"}],
    }


def render_rollout_cronjob(config: Config) -> dict[str, Any]:
    """The CronJob; its deadline covers the longest rollout `serving.analysis` allows."""
    k8s = config.kubernetes
    pod = {
        "restartPolicy": "Never",
        "serviceAccountName": ROLLOUT_NAME,
        "automountServiceAccountToken": True,  # it patches the HTTPRoute
        "securityContext": objects.pod_security_context(),
        "containers": [_container(config)],
        "volumes": [{"name": "workspace",
                     "persistentVolumeClaim": {"claimName": k8s.workspace_claim}},
                    {"name": "config", "configMap": {"name": CONFIG_MAP}},
                    {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
    }
    annotations = {
        "checkov.io/skip1": "CKV_K8S_43=tags are pinned here; the digest exists only after "
        "the image is pushed, so the overlay pins it (kustomize images digest, see README)",
        "checkov.io/skip2": "CKV_K8S_38=this pod moves the canary's traffic: it patches the "
        "HTTPRoute mptfx-serving through the API server with the mptfx-serving-rollout Role "
        "(get and patch on that one object), so it needs its ServiceAccount token",
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": objects.metadata(ROLLOUT_NAME, k8s.namespace, LABELS, annotations=annotations),
        "spec": {
            "schedule": SCHEDULE,
            "timeZone": "Etc/UTC",
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": dict(LABELS)},
                "spec": {
                    # Aborted (1), refused (2) and gave up (3) are verdicts, not crashes: the
                    # next schedule is the retry.
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": longest_rollout_seconds(config.serving.analysis),
                    "ttlSecondsAfterFinished": k8s.ttl_seconds_after_finished,
                    "template": {"metadata": {"labels": dict(LABELS)}, "spec": pod},
                },
            },
        },
    }


def rollout_objects(config: Config) -> list[dict[str, Any]]:
    """ServiceAccount, Role (get/patch the one HTTPRoute), RoleBinding, CronJob."""
    namespace = config.kubernetes.namespace
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": objects.metadata(ROLLOUT_NAME, namespace, LABELS)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": objects.metadata(ROLLOUT_NAME, namespace, LABELS),
         "rules": [{"apiGroups": ["gateway.networking.k8s.io"], "resources": ["httproutes"],
                    "resourceNames": [SERVICE_NAME], "verbs": ["get", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": objects.metadata(ROLLOUT_NAME, namespace, LABELS),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": ROLLOUT_NAME},
         "subjects": [{"kind": "ServiceAccount", "name": ROLLOUT_NAME,
                       "namespace": namespace}]},
        render_rollout_cronjob(config),
    ]

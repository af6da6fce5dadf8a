"""The InfraValidator's pod on Kubernetes: TF Serving itself as a native sidecar.

With `infra.serving_image` set (pinned by digest), the InfraValidator node's Job runs the
real TF Serving image beside the mptfx container: an init container with
`restartPolicy: Always` (a native sidecar, Kubernetes 1.29+), started before the node and
stopped once it ends, so the Job completes with the node. It has the flags and resources of
the serving Deployment (k8s/base/serving.yaml, `mptfx-serving-cpu`; the same ConfigMap for
batching and monitoring, the same securityContext: every container's, from `objects`), but it
serves one model from an emptyDir instead of models.config: the node copies the candidate in
(components/infra/tf_serving.py) and queries it over REST on 127.0.0.1. Node pods have no
Kubernetes API access, so the check cannot start a Pod of its own (what TFX's InfraValidator
does); a sidecar needs none, and a Job of its own would need the driver to know the
candidate's path before the node runs.
"""

from __future__ import annotations

from typing import Any

from components.infra.tf_serving import SIDECAR_MODEL_DIR_ENV, SIDECAR_URL_ENV
from pipelines.kubernetes.objects import container_security_context

INFRA_NODE = "InfraValidator"
SIDECAR_NAME = "tf-serving"
CANDIDATE_VOLUME = "infra-candidate"
CANDIDATE_MOUNT = "/infra/candidate"
SERVING_CONFIG_MAP = "mptfx-serving-config"  # k8s/base/serving.yaml
SERVING_CONFIG_DIR = "/etc/tf-serving"
GRPC_PORT, REST_PORT = 8500, 8501
# The serving Deployment's flags, but for what it serves: its --model_config_file (and
# the label flag that goes with it) becomes one model read from the candidate folder,
# looked for every second instead of every 30.
SERVING_FLAGS = [
    f"--port={GRPC_PORT}",
    f"--rest_api_port={REST_PORT}",
    f"--monitoring_config_file={SERVING_CONFIG_DIR}/monitoring.config",
    "--enable_batching=true",
    f"--batching_parameters_file={SERVING_CONFIG_DIR}/batching.config",
    "--enable_model_warmup=true",
]
CANDIDATE_FLAGS = [f"--model_base_path={CANDIDATE_MOUNT}", "--file_system_poll_wait_seconds=1"]


def tf_serving_sidecar(config: Any) -> dict[str, Any]:
    """The TF Serving container the InfraValidator's pod runs beside the node."""
    infra = config.infra
    return {
        "name": SIDECAR_NAME,
        "image": infra.serving_image,
        # Pinned by digest: what is pulled cannot change, so a cached copy is the same.
        "imagePullPolicy": "IfNotPresent",
        "restartPolicy": "Always",
        "command": ["tensorflow_model_server"],
        "args": [*SERVING_FLAGS, f"--model_name={config.pusher.model_name}",
                 *CANDIDATE_FLAGS],
        "ports": [{"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
                  {"name": "rest", "containerPort": REST_PORT, "protocol": "TCP"}],
        # The node starts once TF Serving listens; it then waits for the candidate itself.
        "startupProbe": {"tcpSocket": {"port": "rest"}, "periodSeconds": 1,
                         "failureThreshold": 300},
        "livenessProbe": {"tcpSocket": {"port": "grpc"}, "initialDelaySeconds": 30,
                          "periodSeconds": 20},
        "resources": {"requests": dict(infra.requests), "limits": dict(infra.limits)},
        "securityContext": container_security_context(),
        "volumeMounts": [
            {"name": CANDIDATE_VOLUME, "mountPath": CANDIDATE_MOUNT, "readOnly": True},
            {"name": "tf-serving-config", "mountPath": SERVING_CONFIG_DIR, "readOnly": True},
            {"name": "tf-serving-tmp", "mountPath": "/tmp"},
        ],
    }


def add_tf_serving_sidecar(pod_spec: dict[str, Any], config: Any) -> None:
    """Give the InfraValidator's pod spec (in place) its TF Serving sidecar, the shared
    candidate folder, and the node container the environment that names both."""
    pod_spec.setdefault("initContainers", []).append(tf_serving_sidecar(config))
    pod_spec["volumes"] += [
        # Room for one SavedModel; it counts against the node's ephemeral storage.
        {"name": CANDIDATE_VOLUME, "emptyDir": {"sizeLimit": "4Gi"}},
        {"name": "tf-serving-config", "configMap": {"name": SERVING_CONFIG_MAP}},
        {"name": "tf-serving-tmp", "emptyDir": {"sizeLimit": "1Gi"}},
    ]
    [node] = pod_spec["containers"]
    node["volumeMounts"].append({"name": CANDIDATE_VOLUME, "mountPath": CANDIDATE_MOUNT})
    node["env"] += [
        {"name": SIDECAR_URL_ENV, "value": f"http://127.0.0.1:{REST_PORT}"},
        {"name": SIDECAR_MODEL_DIR_ENV, "value": CANDIDATE_MOUNT},
    ]

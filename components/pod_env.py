"""What a pipeline pod reads from its environment: TF_CONFIG and the ML Metadata password.

TensorFlow-free, so the pod entrypoint (pipelines/node_entrypoint.py), the Kubernetes
manifests and the Trainer (components/trainer/strategy.py) share one reading of TF_CONFIG,
one `is_chief` and one name for the password variable.

    tf_config = read_tf_config()          # {} when TF_CONFIG is not set
    if is_chief(tf_config):
        ...  # publish / export
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

# The ML Metadata (and --lock database) password: a Secret's key in the cluster, never in
# the IR, a ConfigMap or a command line.
PASSWORD_ENV = "MPTFX_MLMD_PASSWORD"
TF_CONFIG_ENV = "TF_CONFIG"


class TFConfigError(ValueError):
    """TF_CONFIG is set but is not the JSON object TensorFlow expects."""


def read_tf_config(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The parsed TF_CONFIG environment variable, or {} when it is not set.

    Raises:
        TFConfigError: TF_CONFIG is not a JSON object (the message shows what it holds).
    """
    raw = (os.environ if environ is None else environ).get(TF_CONFIG_ENV, "")
    if not raw.strip():
        return {}
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as error:
        raise TFConfigError(f"TF_CONFIG is not valid JSON ({error.msg} at character "
                            f"{error.pos}). Received: TF_CONFIG={raw[:200]!r}") from None
    if not isinstance(parsed, dict):
        raise TFConfigError(f"TF_CONFIG must be a JSON object with 'cluster' and 'task'. "
                            f"Received: TF_CONFIG={raw[:200]!r}")
    task = parsed.get("task") or {}
    if not isinstance(task, dict) or not str(task.get("index", 0)).isdigit():
        raise TFConfigError(f"TF_CONFIG's task must be {{\"type\": ..., \"index\": N}}. "
                            f"Received: task={task!r}")
    return parsed


def is_chief(tf_config: Mapping[str, Any]) -> bool:
    """True for the one task that publishes and writes shared outputs (model, summary).

    That is the "chief" task, or worker 0 when the cluster has no chief, or the only
    process when there is no TF_CONFIG.
    """
    task = tf_config.get("task") or {}
    if not task:
        return True
    task_type, index = task.get("type"), int(task.get("index", 0))
    if task_type == "chief":
        return True
    has_chief = bool((tf_config.get("cluster") or {}).get("chief"))
    return task_type == "worker" and index == 0 and not has_chief


def task_name(tf_config: Mapping[str, Any]) -> str:
    """This process's task as "<type>-<index>" (e.g. "worker-1"), "chief-0" without TF_CONFIG."""
    task = tf_config.get("task") or {}
    return f"{task.get('type', 'chief')}-{int(task.get('index', 0))}"


def cluster_size(tf_config: Mapping[str, Any]) -> int:
    """How many chief and worker tasks TF_CONFIG's cluster lists (0 without TF_CONFIG)."""
    cluster = tf_config.get("cluster") or {}
    return sum(len(cluster.get(role) or []) for role in ("chief", "worker"))


def worker_position(tf_config: Mapping[str, Any]) -> tuple[int, int] | None:
    """`(count, index)` of this task among the cluster's chief and workers (the chief
    first, then the workers in order), or None without a cluster of more than one."""
    count = cluster_size(tf_config)
    task = tf_config.get("task") or {}
    if count <= 1 or task.get("type") not in ("chief", "worker"):
        return None
    chiefs = len((tf_config.get("cluster") or {}).get("chief") or [])
    index = int(task.get("index", 0)) + (chiefs if task["type"] == "worker" else 0)
    return count, index


def build_tf_config(worker_hosts: list[str], index: int) -> dict[str, Any]:
    """TF_CONFIG for task `index` of a cluster of workers (worker 0 is the chief).

    Raises:
        TFConfigError: `index` is not one of the workers.
    """
    if not 0 <= index < len(worker_hosts):
        raise TFConfigError(f"JOB_COMPLETION_INDEX={index} is outside the {len(worker_hosts)} "
                            f"workers {','.join(worker_hosts)}")
    return {"cluster": {"worker": list(worker_hosts)}, "task": {"type": "worker", "index": index}}

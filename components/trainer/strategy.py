"""Which tf.distribute strategy to train under.

`batch_size` in the config is per replica; the global batch is
`per_replica * strategy.num_replicas_in_sync`.

"mirrored" mirrors over every GPU, or, on a machine without GPUs, over every logical CPU
device (`tf.config.set_logical_device_configuration` splits one CPU into several, which is
how the strategy is tested here). Under "multi_worker" only the chief writes shared outputs
(`is_chief`); the other workers write to a scratch folder they delete.

Example:

    strategy, name = resolve_strategy("auto", describe_devices())
    with strategy.scope():
        model = build_model(...)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from components.trainer.precision import DeviceDescription

STRATEGIES = ("auto", "default", "one_device", "mirrored", "multi_worker")


def read_tf_config() -> dict[str, Any]:
    """Returns the parsed TF_CONFIG environment variable, or {} when it is not set."""
    raw = os.environ.get("TF_CONFIG", "")
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON. Received: TF_CONFIG={raw!r}") from error


def choose_strategy_name(
    requested: str, devices: Sequence[DeviceDescription], tf_config: Mapping[str, Any]
) -> str:
    """Resolves "auto" to a concrete strategy name; other names pass through.

    auto: more than one task in TF_CONFIG's cluster -> "multi_worker"; else more than one
    GPU -> "mirrored"; else "default" (TensorFlow's default strategy, one device).

    Raises:
        ValueError: for an unknown strategy name.
    """
    if requested not in STRATEGIES:
        raise ValueError(
            f"Unknown strategy. Received: strategy={requested!r}; "
            f"expected one of {list(STRATEGIES)}"
        )
    if requested != "auto":
        return requested
    if _cluster_size(tf_config) > 1:
        return "multi_worker"
    if sum(d.kind == "GPU" for d in devices) > 1:
        return "mirrored"
    return "default"


def resolve_strategy(
    requested: str,
    devices: Sequence[DeviceDescription],
    tf_config: Mapping[str, Any] | None = None,
) -> tuple[tf.distribute.Strategy, str]:
    """Creates the strategy `requested` names (see `choose_strategy_name`).

    Args:
        requested: one of `STRATEGIES`.
        devices: what `precision.describe_devices()` returns.
        tf_config: parsed TF_CONFIG; read from the environment when None.

    Returns:
        (strategy, name); the number of replicas is `strategy.num_replicas_in_sync`.
    """
    tf_config = read_tf_config() if tf_config is None else tf_config
    name = choose_strategy_name(requested, devices, tf_config)
    if name == "default":
        return tf.distribute.get_strategy(), name
    if name == "one_device":
        device = "/gpu:0" if any(d.kind == "GPU" for d in devices) else "/cpu:0"
        return tf.distribute.OneDeviceStrategy(device), name
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(devices=_mirrored_devices(devices)), name
    # Reads TF_CONFIG itself; must be created before other TensorFlow ops run.
    return tf.distribute.MultiWorkerMirroredStrategy(), name


def is_chief(tf_config: Mapping[str, Any]) -> bool:
    """True for the one task that writes shared outputs (the model, the summary).

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


def _mirrored_devices(devices: Sequence[DeviceDescription]) -> list[str] | None:
    """None (MirroredStrategy's default: all GPUs) when there is a GPU, else all logical CPUs."""
    if any(d.kind == "GPU" for d in devices):
        return None
    return [device.name for device in tf.config.list_logical_devices("CPU")]


def _cluster_size(tf_config: Mapping[str, Any]) -> int:
    cluster = tf_config.get("cluster") or {}
    return sum(len(cluster.get(role) or []) for role in ("chief", "worker"))

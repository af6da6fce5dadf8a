"""Which tf.distribute strategy to train under.

`batch_size` in the config is per replica; the global batch is
`per_replica * strategy.num_replicas_in_sync`.

"mirrored" mirrors over every GPU, or, on a machine without GPUs, over every logical CPU
device (`tf.config.set_logical_device_configuration` splits one CPU into several, which is
how the strategy is tested here). Under "multi_worker" only the chief writes shared outputs
(`components.pod_env.is_chief`); the other workers write to a scratch folder they delete.

Example:

    strategy, name = resolve_strategy("auto", describe_devices())
    with strategy.scope():
        model = build_model(...)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

# TF_CONFIG is read in one place for the Trainer and the pod entrypoint (TensorFlow-free).
from components.pod_env import cluster_size, read_tf_config
from components.trainer.precision import DeviceDescription

STRATEGIES = ("auto", "default", "one_device", "mirrored", "multi_worker")


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
    if cluster_size(tf_config) > 1:
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


def _mirrored_devices(devices: Sequence[DeviceDescription]) -> list[str] | None:
    """None (MirroredStrategy's default: all GPUs) when there is a GPU, else all logical CPUs."""
    if any(d.kind == "GPU" for d in devices):
        return None
    return [device.name for device in tf.config.list_logical_devices("CPU")]

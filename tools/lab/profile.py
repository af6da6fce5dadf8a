"""Where a training step's time goes: TensorFlow's profiler, summed per op.

The trace of a few steps is read back from the profiler's XSpace file; op time is summed
per TensorFlow op (name and type) on the executor threads and divided by the step count.
Ops of one layer are grouped under the layer's name, so a row reads like
"conv2 · Conv2DBackpropFilter · 12.1 ms/step". With inter-op parallelism, ops overlap, so
the shares are of the summed op time, not of the wall time.

Example:

    rows = profile_steps(lambda: train_function(data), sync, steps=10, log_dir="/tmp/p")
"""

from __future__ import annotations

import collections
import glob
import os
import re
import shutil
from collections.abc import Callable, Iterable
from typing import Any

import tensorflow as tf

_MAX_ROWS = 12
_EXECUTOR_LINE = re.compile(r"^tf_(Compute|inter_op|intra_op)|Executor", re.IGNORECASE)


def profile_steps(
    step: Callable[[], Any],
    sync: Callable[[Any], None],
    steps: int,
    log_dir: str,
    layer_names: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """Traces `steps` calls of `step`; returns the top ops by time per step.

    Returns:
        [{"layer", "op", "kernel", "ms_per_step", "share"}, ...], largest first; `layer` is
        the model layer the op belongs to ("" for the optimizer, loss and metrics).
    """
    shutil.rmtree(log_dir, ignore_errors=True)
    tf.profiler.experimental.start(log_dir)
    try:
        for _ in range(steps):
            outputs = step()
        sync(outputs)
    finally:
        tf.profiler.experimental.stop()
    files = glob.glob(os.path.join(log_dir, "**", "*.xplane.pb"), recursive=True)
    rows = summarize_xspace(files[0], steps, set(layer_names)) if files else []
    shutil.rmtree(log_dir, ignore_errors=True)
    return rows


def summarize_xspace(path: str, steps: int, layer_names: set[str]) -> list[dict[str, Any]]:
    """Sums op durations of one XSpace trace: kernels on the device planes when there is an
    accelerator, else ops on the host's executor threads."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    host: collections.Counter = collections.Counter()
    device: collections.Counter = collections.Counter()
    for plane in space.planes:
        on_device = plane.name.startswith("/device:")
        if not on_device and not plane.name.startswith("/host:CPU"):
            continue
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            if not on_device and not _EXECUTOR_LINE.search(line.name):
                continue
            for event in line.events:
                name = names.get(event.metadata_id, "")
                if on_device:  # GPU kernels, under their own names
                    device[name] += event.duration_ps
                elif ":" in name and "::" not in name:  # "scope/op:Kernel"; not bookkeeping
                    host[name] += event.duration_ps
    # With an accelerator the time that matters is the device's; host ops only launch it.
    picoseconds = device or host
    total = sum(picoseconds.values()) or 1
    rows = []
    for name, duration in picoseconds.most_common(_MAX_ROWS):
        op_path, _, kernel = name.rpartition(":")
        rows.append({
            "layer": _layer_of(op_path, layer_names),
            "op": op_path.rsplit("/", 1)[-1],
            "kernel": kernel,
            "ms_per_step": duration / 1e9 / steps,
            "share": duration / total,
        })
    return rows


def _layer_of(op_path: str, layer_names: set[str]) -> str:
    # Keras names an op's scope after the layer, with a "_<n>" suffix when traced twice.
    for part in op_path.split("/"):
        base = re.sub(r"_\d+$", "", part)
        if part in layer_names or base in layer_names:
            return part if part in layer_names else base
    return ""

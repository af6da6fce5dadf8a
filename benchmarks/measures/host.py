"""What the benchmark ran on: CPU features, devices, versions, and the static rule `auto`
starts from (the Trainer's measured choice is the auto_check section's).

Example:

    host = describe_host()
    host["cpu"]["flags"], host["auto"]["precision"]
"""

from __future__ import annotations

import os
import platform
from typing import Any

# CPU flags that decide whether low precision can be fast on a CPU: bfloat16 dot products
# (AVX512_BF16, AMX-BF16), float16 arithmetic (AVX512_FP16, AMX-FP16), int8 (VNNI).
CPU_FLAGS_OF_INTEREST = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_fp16",
    "amx_int8",
)


def read_cpu_info(path: str = "/proc/cpuinfo") -> dict[str, Any]:
    """CPU model name, logical CPU count and the flags of interest that it reports."""
    model_name, flags = platform.processor() or "unknown", set()
    try:
        with open(path) as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model_name = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
    except OSError:
        pass
    return {
        "model_name": model_name,
        "logical_cpus": os.cpu_count(),
        "flags": [flag for flag in CPU_FLAGS_OF_INTEREST if flag in flags],
    }


def describe_host() -> dict[str, Any]:
    """Devices, versions and what `auto` resolves to by its static rules (before measuring).

    Imports TensorFlow; run it in a worker process.
    """
    import keras
    import tensorflow as tf

    from components.trainer.precision import (
        describe_devices,
        resolve_precision_policy,
        resolve_xla,
    )
    from models import available_models

    devices = describe_devices()
    on_gpu = any(d.kind == "GPU" for d in devices)
    policy, policy_reason = resolve_precision_policy("auto", devices)
    xla, xla_reason = resolve_xla("auto", devices)
    return {
        "cpu": read_cpu_info(),
        "device": "GPU" if on_gpu else "CPU",
        "devices": [
            {"kind": d.kind, "name": d.name, "compute_capability": d.compute_capability}
            for d in devices
        ],
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        # TF_ENABLE_ONEDNN_OPTS as TensorFlow read it (components/__init__.py sets it to 1
        # where unset); unset only when TensorFlow was imported without mptfx.
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS",
                                 "TensorFlow's default (on with AVX512_VNNI/BF16 or AMX)"),
        "threads": {
            "intra_op": tf.config.threading.get_intra_op_parallelism_threads() or "default",
            "inter_op": tf.config.threading.get_inter_op_parallelism_threads() or "default",
        },
        "auto": {
            "precision": policy,
            "precision_reason": policy_reason,
            "xla": xla,
            "xla_reason": xla_reason,
        },
        "models": available_models(),
    }

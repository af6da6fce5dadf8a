"""Which Keras dtype policy and whether XLA to use, decided from the devices present.

Mixed precision and XLA pay off on GPUs (tensor cores, compute capability >= 7.0) and
TPUs. On a CPU, float16 has no fast kernels (the seed CNN trains 20-100x slower under
mixed_float16) and XLA is slower too; bfloat16 is fast only where the CPU has bfloat16
dot-product instructions (AVX512_BF16 or AMX-BF16): measured on the CI machine (AMD EPYC
with AVX512_BF16), mixed_bfloat16 trains the seed CNN 1.2x (16x16) to 2.8x (64x64) faster
than float32, while on an AVX2-only EPYC it was 10x slower. So `auto` picks
mixed_bfloat16 on bfloat16-capable CPUs, float32 on other CPUs, and no XLA on any CPU.

Example:

    devices = describe_devices()
    policy, reason = resolve_precision_policy("auto", devices)
    keras.mixed_precision.set_dtype_policy(policy)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import keras
import tensorflow as tf

PRECISION_POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
_FLOAT16_MIN_CAPABILITY = (7, 0)  # Volta: tensor cores for float16.
_BFLOAT16_MIN_CAPABILITY = (8, 0)  # Ampere: tensor cores for bfloat16.
_XLA_CHOICES = {"auto": None, "on": True, "true": True, "off": False, "false": False}
# /proc/cpuinfo flags of CPUs with bfloat16 dot-product instructions that oneDNN uses.
CPU_BFLOAT16_FEATURES = frozenset({"avx512_bf16", "amx_bf16"})
_CPUINFO = "/proc/cpuinfo"


@dataclasses.dataclass(frozen=True)
class DeviceDescription:
    """One accelerator or CPU that TensorFlow can see.

    Attributes:
        kind: "CPU", "GPU" or "TPU".
        name: TensorFlow's device name, e.g. "/physical_device:GPU:0".
        compute_capability: (major, minor) for NVIDIA GPUs, else None.
        cpu_features: for a CPU, its lower-case instruction-set flags as /proc/cpuinfo
            names them (only those that matter here, e.g. "avx512_bf16"); else empty.
    """

    kind: str
    name: str
    compute_capability: tuple[int, int] | None = None
    cpu_features: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.kind not in ("CPU", "GPU", "TPU"):
            raise ValueError(f"kind must be CPU, GPU or TPU. Received: kind={self.kind!r}")


def describe_devices() -> list[DeviceDescription]:
    """Lists the physical CPU, GPU and TPU devices TensorFlow sees.

    This is the one place that asks the hardware; everything else takes the list, so
    tests describe other machines by passing their own `DeviceDescription`s.
    """
    devices = []
    for kind in ("CPU", "GPU", "TPU"):
        for device in tf.config.list_physical_devices(kind):
            capability = None
            features: frozenset[str] = frozenset()
            if kind == "GPU":
                details = tf.config.experimental.get_device_details(device)
                if details.get("compute_capability"):
                    capability = tuple(int(v) for v in details["compute_capability"])
            elif kind == "CPU":
                features = read_cpu_features()
            devices.append(DeviceDescription(kind, device.name, capability, features))
    return devices


def read_cpu_features(path: str = _CPUINFO) -> frozenset[str]:
    """The bfloat16-related flags (`CPU_BFLOAT16_FEATURES`) the CPU reports; empty when
    unknown (no /proc/cpuinfo, e.g. macOS), which `auto` treats as "no fast bfloat16"."""
    try:
        with open(path) as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return frozenset(value.split()) & CPU_BFLOAT16_FEATURES
    except OSError:
        pass
    return frozenset()


def resolve_precision_policy(
    requested: str, devices: Sequence[DeviceDescription], prefer_bfloat16: bool = False
) -> tuple[str, str]:
    """Returns the Keras dtype policy name to train with and why it was chosen.

    Args:
        requested: "auto" or one of `PRECISION_POLICIES` (used as is).
        devices: what `describe_devices()` returns (injectable for tests).
        prefer_bfloat16: with "auto" on GPUs that all have compute capability >= 8.0,
            choose mixed_bfloat16 (no loss scaling needed) instead of mixed_float16.

    "auto": a TPU -> mixed_bfloat16; GPUs all >= 7.0 -> mixed_float16 (or mixed_bfloat16,
    see `prefer_bfloat16`); any GPU below 7.0 -> float32 with a WARNING in the reason; no
    GPU -> mixed_bfloat16 if the CPU has bfloat16 instructions, else float32.

    Raises:
        ValueError: if `requested` is not "auto" or a known policy.
    """
    if requested in PRECISION_POLICIES:
        return requested, f"requested: {requested}"
    if requested != "auto":
        raise ValueError(
            f"Unknown precision. Received: precision={requested!r}; "
            f"expected 'auto' or one of {list(PRECISION_POLICIES)}"
        )
    if any(d.kind == "TPU" for d in devices):
        return "mixed_bfloat16", "TPU: bfloat16 is native; mixed_bfloat16"
    gpus = [d for d in devices if d.kind == "GPU"]
    if not gpus:
        return _resolve_cpu_policy([d for d in devices if d.kind == "CPU"])
    capabilities = [d.compute_capability or (0, 0) for d in gpus]
    lowest = min(capabilities)
    if lowest < _FLOAT16_MIN_CAPABILITY:
        weakest = gpus[capabilities.index(lowest)]
        return "float32", (
            f"WARNING: GPU {weakest.name} has compute capability "
            f"{_format_capability(weakest.compute_capability)} < 7.0 (no float16 tensor "
            "cores); mixed precision would be slower; float32"
        )
    if prefer_bfloat16 and lowest >= _BFLOAT16_MIN_CAPABILITY:
        return "mixed_bfloat16", (
            f"GPU: compute capability {_format_capability(lowest)} >= 8.0 and "
            "prefer_bfloat16; mixed_bfloat16"
        )
    return "mixed_float16", (
        f"GPU: compute capability {_format_capability(lowest)} >= 7.0; mixed_float16"
    )


def resolve_xla(requested: str | bool, devices: Sequence[DeviceDescription]) -> tuple[bool, str]:
    """Returns whether to JIT-compile the train step with XLA, and why.

    Args:
        requested: "auto", "on"/"off" or a bool. "auto" turns XLA on with a GPU or TPU
            and off on CPU only, where it was measured 2.5x slower.
        devices: what `describe_devices()` returns.

    Raises:
        ValueError: if `requested` is none of the above.
    """
    if isinstance(requested, bool):
        return requested, f"requested: {'on' if requested else 'off'}"
    key = str(requested).lower()
    if key not in _XLA_CHOICES:
        raise ValueError(
            f"Unknown xla setting. Received: xla={requested!r}; expected auto, on or off"
        )
    if _XLA_CHOICES[key] is not None:
        return _XLA_CHOICES[key], f"requested: {key}"
    accelerators = sorted({d.kind for d in devices if d.kind in ("GPU", "TPU")})
    if accelerators:
        return True, f"{'/'.join(accelerators)}: XLA on"
    return False, "CPU: XLA is slower here; off"


def static_auto_choice(
    devices: Sequence[DeviceDescription] | None = None,
) -> tuple[list[DeviceDescription], str, str, bool, str]:
    """What the static rules pick for `precision: auto` and `xla: auto` on `devices` (this
    machine's when None): (devices, policy, policy reason, xla, xla reason)."""
    devices = describe_devices() if devices is None else list(devices)
    policy, policy_reason = resolve_precision_policy("auto", devices)
    xla, xla_reason = resolve_xla("auto", devices)
    return devices, policy, policy_reason, xla, xla_reason


def _resolve_cpu_policy(cpus: Sequence[DeviceDescription]) -> tuple[str, str]:
    bfloat16_features = sorted(
        set.intersection(*(set(d.cpu_features) for d in cpus)) & CPU_BFLOAT16_FEATURES
        if cpus
        else set()
    )
    if bfloat16_features:
        flags = "/".join(flag.upper() for flag in bfloat16_features)
        return "mixed_bfloat16", (
            f"CPU with {flags}: bfloat16 measured faster than float32 here; mixed_bfloat16"
        )
    return "float32", "CPU: mixed precision is slower here; float32"


def _format_capability(capability: tuple[int, int] | None) -> str:
    return "unknown" if capability is None else f"{capability[0]}.{capability[1]}"


# Recurrent layers under mixed_float16: an LSTM's cell state accumulates over every time step,
# so float16's 10-bit mantissa and 65504 range lose precision or overflow on long sequences
# (bfloat16 has float32's range; float32 variables do not help the state).
RECURRENT_PRECISIONS = ("policy", "float32")


def find_recurrent_layers(model: keras.Model) -> list[keras.layers.Layer]:
    """The recurrent layers (LSTM, GRU, SimpleRNN, any keras RNN, Bidirectional) in `model`,
    nested models included."""
    found = []
    for layer in _all_layers(model):
        if isinstance(layer, (keras.layers.RNN, keras.layers.Bidirectional)):
            found.append(layer)
    return found


def recurrent_precision_warning(
    layers: Sequence[keras.layers.Layer], policy: str, recurrent_precision: str
) -> str | None:
    """The warning for recurrent layers under mixed_float16 (None when there is nothing to say).

    Args:
        layers: what `find_recurrent_layers` returned.
        policy: the resolved dtype policy name.
        recurrent_precision: `trainer.recurrent_precision` ("policy" or "float32").
    """
    if policy != "mixed_float16" or not layers:
        return None
    names = ", ".join(f"{layer.name!r} ({type(layer).__name__})" for layer in layers)
    if recurrent_precision == "float32":
        return (f"recurrent layer(s) {names} kept in float32 under mixed_float16 "
                "(trainer.recurrent_precision: float32)")
    return (
        f"WARNING: recurrent layer(s) {names} compute in float16 under mixed_float16: their "
        "state loses precision or overflows over long sequences. Choose "
        "trainer.precision: mixed_bfloat16 on hardware that has it (TPU, Ampere GPUs, CPUs "
        "with AVX512_BF16), or trainer.recurrent_precision: float32 to keep recurrent layers "
        "in float32 (a per-layer policy)"
    )


def apply_recurrent_precision(
    model: keras.Model, policy: str, recurrent_precision: str
) -> dict[str, str]:
    """Gives the recurrent layers the float32 policy when asked; returns their policies.

    Under mixed_float16 with `recurrent_precision="float32"`, each recurrent layer (and its
    cells, and a Bidirectional's two layers) computes in float32: Keras casts its float16
    inputs up and the next layer casts its output back down. Call after the lint (which
    reads the dtypes the model was built with) and before compiling.

    Returns:
        Recurrent layer name -> its dtype policy name, as it trains (for training_summary.json).

    Raises:
        ValueError: for an unknown `recurrent_precision`.
    """
    if recurrent_precision not in RECURRENT_PRECISIONS:
        raise ValueError(f"trainer.recurrent_precision must be one of "
                         f"{list(RECURRENT_PRECISIONS)}. "
                         f"Received: recurrent_precision={recurrent_precision!r}")
    layers = find_recurrent_layers(model)
    if policy == "mixed_float16" and recurrent_precision == "float32":
        for layer in layers:
            for part in _recurrent_parts(layer):
                part.dtype_policy = "float32"
    return {layer.name: layer.dtype_policy.name for layer in layers}


def _recurrent_parts(layer: keras.layers.Layer) -> list[keras.layers.Layer]:
    """A recurrent layer with everything that computes inside it: cells, wrapped layers."""
    parts = [layer]
    for attribute in ("forward_layer", "backward_layer", "cell"):
        inner = getattr(layer, attribute, None)
        if isinstance(inner, keras.layers.Layer):
            parts.extend(_recurrent_parts(inner))
    for cell in getattr(layer, "cells", None) or []:  # StackedRNNCells
        parts.extend(_recurrent_parts(cell))
    return parts


def _all_layers(model: keras.Model) -> list[keras.layers.Layer]:
    layers = []
    for layer in model.layers:
        layers.append(layer)
        if isinstance(layer, keras.Model):
            layers.extend(_all_layers(layer))
    return layers

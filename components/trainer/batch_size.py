"""`trainer.batch_size: auto`: the largest per-replica batch that fits, and its learning rate.

The search (doubling, then bisection between the last fit and the first failure) is the
one `mptfx bench` uses for its largest-batch table, so the Trainer and the benchmark agree.
What "fits" means depends on the device:

- GPU: one real training step at that batch, with TensorFlow's allocator peak from
  `tf.config.experimental.get_memory_info`; an out-of-memory error is "does not fit" (the
  step is retried smaller, nothing is lost), and `trainer.batch_memory_mb` (when > 0) caps
  the peak.
- CPU: TensorFlow keeps no allocator statistics for the CPU, and a process that grows past
  the machine's memory is killed, not told. So the batch is sized against
  `trainer.batch_memory_mb` with an estimate of the training step's memory: weights,
  gradients and Adam's two slots in float32, plus every layer's output at its compute dtype,
  kept for the backward pass and matched by its gradient. Under mixed_bfloat16 activations
  take half the bytes of float32, so a larger batch fits in the same cap.

Example:

    search_largest_batch(lambda b: b <= 300, start=32, max_batch=4096)
    # {"largest": 296, "first_failure": 304, ...} with resolution 1/32
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

LR_SCALING_RULES = ("linear", "sqrt", "none")
# Batches are multiples of this (or powers of two below it): tensor-core and vector widths.
BATCH_MULTIPLE = 8
_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
# Adam in float32: the weight, its gradient and two moment slots.
_BYTES_PER_PARAMETER = 4 * 4


def search_largest_batch(
    fits: Callable[[int], bool | None],
    start: int,
    max_batch: int,
    resolution: float = 1 / 32,
) -> dict[str, Any]:
    """Finds the largest batch in [1, max_batch] for which `fits` holds.

    Args:
        fits: probe; True fits, False does not, None unknown (stops the search).
        start: first batch tried; the search doubles up from it, or halves down if it fails.
        max_batch: never probe beyond this; reaching it is reported as `capped`.
        resolution: bisection stops when the gap is at most this fraction of the largest
            fitting batch (at least 1), to bound the number of probes.

    Returns:
        {"largest": last batch that fit (0 if none), "first_failure": smallest batch seen
        failing (None if none), "capped": reached max_batch, "unknown_at": batch whose probe
        could not tell (None if none), "probes": [[batch, True/False/None], ...]}.
    """
    probes: list[list] = []

    def probe(batch: int) -> bool | None:
        answer = fits(batch)
        probes.append([batch, answer])
        return answer

    largest, failure, unknown_at = 0, None, None
    batch = max(1, min(start, max_batch))
    answer = probe(batch)
    if answer is None:
        unknown_at = batch
    elif answer:  # double up
        largest = batch
        while largest < max_batch:
            batch = min(largest * 2, max_batch)
            answer = probe(batch)
            if answer is None:
                unknown_at = batch
                break
            if not answer:
                failure = batch
                break
            largest = batch
    else:  # halve down until something fits
        failure = batch
        while failure > 1:
            batch = failure // 2
            answer = probe(batch)
            if answer is None:
                unknown_at = batch
                break
            if answer:
                largest = batch
                break
            failure = batch
    if failure is not None and unknown_at is None and largest:
        while failure - largest > max(1, int(largest * resolution)):
            batch = (largest + failure) // 2
            answer = probe(batch)
            if answer is None:
                unknown_at = batch
                break
            if answer:
                largest = batch
            else:
                failure = batch
    return {
        "largest": largest,
        "first_failure": failure,
        "capped": failure is None and unknown_at is None and largest >= max_batch,
        "unknown_at": unknown_at,
        "probes": probes,
    }


def largest_aligned_batch(
    fits: Callable[[int], bool | None], start: int, max_batch: int
) -> dict[str, Any]:
    """The largest batch that fits among multiples of `BATCH_MULTIPLE` (powers of two
    below it), searched exactly (no resolution slack). Returns `search_largest_batch`'s
    dict with `largest` in batches."""
    if max_batch >= BATCH_MULTIPLE and fits(BATCH_MULTIPLE):
        search = search_largest_batch(
            lambda units: fits(units * BATCH_MULTIPLE),
            max(1, start // BATCH_MULTIPLE), max_batch // BATCH_MULTIPLE, resolution=0,
        )
        return {
            **search,
            "largest": search["largest"] * BATCH_MULTIPLE,
            "first_failure": (None if search["first_failure"] is None
                              else search["first_failure"] * BATCH_MULTIPLE),
            "probes": [[units * BATCH_MULTIPLE, ok] for units, ok in search["probes"]],
        }
    batch = 1 << max(0, min(max_batch, BATCH_MULTIPLE // 2).bit_length() - 1)
    probes = []
    while batch >= 1:
        answer = fits(batch)
        probes.append([batch, answer])
        if answer:
            return {"largest": batch, "first_failure": batch * 2, "capped": False,
                    "unknown_at": None, "probes": probes}
        batch //= 2
    return {"largest": 0, "first_failure": 1, "capped": False, "unknown_at": None,
            "probes": probes}


def estimate_training_memory_mb(model: Any, batch_size: int) -> float:
    """Estimated memory of one training step of `model` at `batch_size`, in MB.

    Parameters: weight + gradient + two Adam slots in float32. Activations: every layer's
    output at its compute dtype (its dtype policy), once for the forward pass kept for the
    backward one and once for its gradient. The input batch is float32.
    """
    parameter_bytes = _BYTES_PER_PARAMETER * int(model.count_params())
    per_sample = 4 * math.prod(int(d) for d in model.input_shape[1:])
    for layer in _leaf_layers(model):
        dtype = getattr(layer, "compute_dtype", "float32") or "float32"
        for shape in _output_shapes(layer):
            per_sample += 2 * _BYTES.get(str(dtype), 4) * math.prod(shape)
    return (parameter_bytes + per_sample * int(batch_size)) / 2**20


def _leaf_layers(model: Any) -> list[Any]:
    leaves = []
    for layer in getattr(model, "layers", []):
        leaves.extend(_leaf_layers(layer) if getattr(layer, "layers", None) else [layer])
    return leaves


def _output_shapes(layer: Any) -> list[tuple[int, ...]]:
    try:
        outputs = layer.output
    except (AttributeError, ValueError):  # a layer called more than once or never built
        return []
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    return [tuple(int(d or 1) for d in t.shape[1:]) for t in outputs if hasattr(t, "shape")]


def estimated_fits(estimate_mb: Callable[[int], float], cap_mb: float) -> Callable[[int], bool]:
    """A CPU `fits`: the estimated training memory at the batch is within `cap_mb`."""
    return lambda batch: estimate_mb(batch) <= cap_mb


def measured_fits(
    run_step: Callable[[int], None],
    memory_info: Callable[[], Mapping[str, int]],
    reset_peak: Callable[[], None],
    cap_mb: float,
    out_of_memory: type[BaseException],
) -> Callable[[int], bool]:
    """A GPU `fits`: one real step at the batch; an `out_of_memory` error does not fit, nor
    does an allocator peak above `cap_mb` (0 = no cap). `memory_info` is
    `tf.config.experimental.get_memory_info` for the GPU (bytes), `reset_peak` its reset."""

    def fits(batch: int) -> bool:
        reset_peak()
        try:
            run_step(batch)
        except out_of_memory:
            return False
        peak_mb = memory_info()["peak"] / 2**20
        return not cap_mb or peak_mb <= cap_mb

    return fits


def scale_learning_rate(learning_rate: float, base_batch: int, batch: int, rule: str) -> float:
    """The learning rate for `batch` when `learning_rate` was tuned for `base_batch`:
    linear (Goyal et al.: lr x batch/base), sqrt (lr x sqrt(batch/base)) or none.

    Raises:
        ValueError: naming an unknown rule.
    """
    if rule not in LR_SCALING_RULES:
        raise ValueError(f"trainer.batch_lr_scaling must be one of {list(LR_SCALING_RULES)}. "
                         f"Received: batch_lr_scaling={rule!r}")
    ratio = batch / base_batch
    if rule == "linear":
        return learning_rate * ratio
    if rule == "sqrt":
        return learning_rate * math.sqrt(ratio)
    return learning_rate


@dataclasses.dataclass(frozen=True)
class BatchChoice:
    """`batch_size: auto`'s per-replica batch under one precision, why, and the
    (batch, fits: True/False/None) probes that found it."""

    batch_size: int
    precision: str
    reason: str
    probes: tuple[tuple[int, bool | None], ...] = ()


def choose_batch_size(
    precision: str,
    fits: Callable[[int], bool | None],
    how: str,
    start: int,
    max_batch: int,
    max_reason: str,
) -> BatchChoice:
    """Picks the largest aligned per-replica batch that `fits` allows, with the reason.

    Args:
        precision: the dtype policy the batch is for (named in the reason).
        fits: `estimated_fits` (CPU) or `measured_fits` (GPU).
        how: what `fits` checks, e.g. "estimated training memory <= trainer.batch_memory_mb
            1024 MB", for the reason.
        start: the first batch tried (`trainer.base_batch_size`).
        max_batch: the largest batch worth having (the train split per replica).
        max_reason: why `max_batch` is the limit, for the reason.

    Raises:
        ValueError: naming the keys to change, when not even a batch of 1 fits.
    """
    search = largest_aligned_batch(fits, max(1, min(start, max_batch)), max(1, max_batch))
    largest = search["largest"]
    if not largest:
        raise ValueError(f"trainer.batch_size auto: not even a batch of 1 fits under "
                         f"{precision} ({how}); raise trainer.batch_memory_mb or set "
                         "trainer.batch_size")
    if search["capped"] or largest >= max_batch:
        why = f"{max_reason}; {how}"
    else:
        why = f"{search['first_failure']} would not fit: {how}"
    return BatchChoice(largest, precision, f"batch_size auto under {precision}: {largest} ({why})",
                       tuple(tuple(probe) for probe in search["probes"]))

"""One MFU cell: the bench's throughput cell, timed with a matmul ceiling between windows.

The model, the step and the timing are mptfx bench's (benchmarks/measures/training.py); a matmul
ceiling of the compute dtype (tools/lab/ceiling.py) is measured before every window, so
MFU = counted training FLOP/s (tools/lab/flops.py) ÷ ceiling compares numbers taken under
the same machine load. With `profile_steps`, the cell also traces that many steps with
TensorFlow's profiler (tools/lab/profile.py) and times each counted pass alone
(tools/lab/kernels.py), to say where the time goes.

Example:

    result = run_mfu_cell(CellSpec("seed_cnn", "float32", False, 32, (64, 64, 1)),
                          {"float32": 2048}, profile_steps=0)
    result["mfu"]
"""

from __future__ import annotations

import statistics
import tempfile
from typing import Any

from benchmarks.measures.training import (
    MemoryMeter,
    build_compiled_model,
    cell_facts,
    synthetic_batch,
    time_steps,
)
from benchmarks.plan import COMPUTE_DTYPES, CellSpec
from tools.lab.ceiling import MatmulCeiling
from tools.lab.flops import count_flops
from tools.lab.kernels import kernel_efficiency, optimizer_update_ms
from tools.lab.profile import profile_steps as trace_steps


def run_mfu_cell(cell: CellSpec, ceiling_sizes: dict[str, int],
                 profile_steps: int) -> dict[str, Any]:
    """Measures one cell; returns its throughput, memory, FLOPs and MFU (JSON-able)."""
    compute_dtype = COMPUTE_DTYPES[cell.precision]
    ceilings = {
        dtype: MatmulCeiling(dtype, ceiling_sizes.get(dtype, 2048))
        for dtype in sorted({"float32", compute_dtype})
    }
    samples: dict[str, list[float]] = {dtype: [] for dtype in ceilings}

    def measure_ceilings() -> None:
        for dtype, ceiling in ceilings.items():
            samples[dtype].append(ceiling.measure_gflops())

    memory = MemoryMeter()  # after the ceiling matrices, so they count as baseline
    model = build_compiled_model(
        cell.model, cell.input_shape, cell.num_classes, cell.precision, cell.xla
    )
    flops = count_flops(model)
    data = [synthetic_batch(model, cell.batch_size, cell.num_classes)]
    model.make_train_function()
    train_function = model.train_function
    timing = time_steps(lambda: train_function(data), lambda logs: float(logs["loss"]),
                        cell.batch_size, cell, between_windows=measure_ceilings)
    facts = cell_facts(model, cell, memory)  # before the profiler adds its own buffers
    profile = []
    if profile_steps:
        profile = trace_steps(lambda: train_function(data), lambda logs: float(logs["loss"]),
                              profile_steps, tempfile.mkdtemp(prefix="mptfx-profile-"),
                              [layer.name for layer in model.layers])
    ceiling_gflops = {dtype: statistics.median(v) for dtype, v in samples.items()}
    kernels, optimizer_ms = [], None
    if profile_steps:
        kernels = kernel_efficiency(model, cell.batch_size, ceiling_gflops[compute_dtype])
        optimizer_ms = optimizer_update_ms(model)
    achieved_gflops = timing["samples_per_sec"] * flops.training_per_sample / 1e9
    return {
        **timing,
        **facts,
        "training_flops_per_sample": flops.training_per_sample,
        "forward_flops_per_sample": flops.forward_per_sample,
        "achieved_gflops": achieved_gflops,
        "compute_dtype": compute_dtype,
        "ceiling_gflops": ceiling_gflops[compute_dtype],
        "ceiling_size": ceilings[compute_dtype].size,
        "mfu": achieved_gflops / ceiling_gflops[compute_dtype],
        "ceiling_float32_gflops": ceiling_gflops["float32"],
        "mfu_vs_float32": achieved_gflops / ceiling_gflops["float32"],
        "flops_by_layer": flops.to_dict()["layers"],
        "profile": profile,
        "kernels": kernels,
        "optimizer_update_ms": optimizer_ms,
    }

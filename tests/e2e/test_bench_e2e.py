"""`mptfx bench` end to end on a tiny configuration: one model, one cell, two short windows."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.e2e


def test_tiny_bench_writes_sane_table_json_and_charts(mptfx, tmp_path):
    result = mptfx(
        "bench", "--quick", "--workspace", str(tmp_path), "--sections", "throughput",
        "--models", "seed_cnn", "--precisions", "float32", "--xla", "off",
        "--input-shape", "16x16x1", "--batch-size", "8",
        "--windows", "2", "--window-seconds", "0.1", "--warmup-seconds", "0",
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    bench = tmp_path / "bench"
    results = json.loads((bench / "results.json").read_text())
    (cell,) = results["throughput"]
    assert cell["status"] == "ok"
    assert cell["speedup"] == 1.0  # the reference cell against itself, same run
    assert len(cell["window_rates"]) == 2
    for key in ("samples_per_sec", "step_ms", "peak_memory_mb", "training_memory_mb"):
        assert cell[key] > 0, key
    assert "mfu" not in cell and "ceilings" not in results["host"]  # the lab's instruments
    markdown = (bench / "results.md").read_text()
    assert "| seed_cnn | 16×16×1 | 8 | float32 | off |" in markdown
    assert "MFU" not in markdown
    for chart in ("throughput.png", "memory.png"):
        assert (bench / chart).read_bytes()[:4] == b"\x89PNG"
    assert "results.md" in result.stdout

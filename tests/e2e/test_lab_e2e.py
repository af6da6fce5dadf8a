"""The developer lab end to end, from the checkout: `python -m tools.lab --sections mfu` on
one tiny cell measures the matmul ceiling, the cell's MFU, each counted pass alone and the
profiler's top ops, through its own worker processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def test_the_lab_measures_mfu_and_explains_it(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "tools.lab", "--quick", "--workspace", str(tmp_path),
         "--sections", "mfu", "--models", "seed_cnn", "--precisions", "float32",
         "--xla", "off", "--input-shape", "16x16x1", "--batch-size", "8",
         "--windows", "2", "--window-seconds", "0.1", "--warmup-seconds", "0"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    lab = tmp_path / "lab" / "bench"
    results = json.loads((lab / "results.json").read_text())
    (cell,) = results["mfu"]
    assert cell["status"] == "ok"
    for key in ("samples_per_sec", "achieved_gflops", "ceiling_gflops", "mfu"):
        assert cell[key] > 0, key
    assert cell["mfu"] < 1.5  # a sane fraction of the ceiling measured beside it
    assert cell["training_flops_per_sample"] == 2 * (2 * 16 * 16 * 9 * 32) + 3 * (
        2 * 8 * 8 * 9 * 32 * 64 + 2 * (4 * 4 * 64) * 128 + 2 * 128 * 10
    )
    assert results["ceilings"]["float32"]["gflops"] > 0
    markdown = (lab / "results.md").read_text()
    assert "### MFU" in markdown and "MFU target (60% of the matmul ceiling)" in markdown
    # The MFU cell explains itself: each counted pass timed alone, and the profiler's ops.
    assert "| conv2 | weight gradient |" in markdown
    assert cell["optimizer_update_ms"] > 0 and cell["profile"]

"""`mptfx bench --model-file`: a user's model file is measured like a registered model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def test_bench_measures_the_model_file(mptfx, tmp_path):
    result = mptfx(
        "bench", "--quick", "--workspace", str(tmp_path), "--sections", "throughput",
        "--model-file", str(REPO / "examples" / "my_model.py"),
        "--precisions", "float32", "--xla", "off",
        "--input-shape", "16x16x1", "--batch-size", "8",
        "--windows", "2", "--window-seconds", "0.1", "--warmup-seconds", "0",
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    results = json.loads((tmp_path / "bench" / "results.json").read_text())
    (cell,) = results["throughput"]
    assert cell["model"].startswith("user:my_model.py:build_model@")
    assert cell["status"] == "ok" and cell["samples_per_sec"] > 0
    assert "user:my_model.py" in (tmp_path / "bench" / "results.md").read_text()


def test_bench_refuses_a_missing_model_file(mptfx, tmp_path):
    result = mptfx("bench", "--workspace", str(tmp_path), "--model-file",
                   str(tmp_path / "absent.py"), timeout=120)
    assert result.returncode == 2
    assert f"--model-file {tmp_path / 'absent.py'}: not an existing .py file" in result.stderr

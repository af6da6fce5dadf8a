"""End to end: the stock TFX pipeline `mptfx bench` times beside `mptfx run` and `mptfx
doctor`'s exit code, each as a user runs them (fresh processes). The bench sections
themselves: tests/e2e/test_bench_e2e.py; the batch a run chooses under `batch_size: auto`:
tests/e2e/test_tracking_e2e.py (its offline run asks for it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def test_the_stock_tfx_pipeline_trains_evaluates_and_pushes(tmp_path):
    from tests.trainer_testdata import write_digits_examples

    examples = write_digits_examples(str(tmp_path / "digits"), 1797)
    completed = subprocess.run(
        [sys.executable, "-m", "tools.lab.stock_tfx", examples, str(tmp_path / "work"),
         json.dumps({"epochs": 3, "batch_size": 32, "input_size": [16, 16]})],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    # The Evaluator blessed it (accuracy >= 0.5 after 3 epochs) and the Pusher published it.
    assert len(result["pushed_versions"]) == 1
    assert result["run_seconds"] > 0


def test_doctor_exits_0_on_this_cpu_machine(mptfx):
    result = mptfx("doctor", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "XLA compiles on /device:CPU:0" in result.stdout
    assert result.stdout.rstrip().endswith("nothing to fix")

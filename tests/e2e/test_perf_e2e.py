"""End to end: the stock TFX pipeline `mptfx bench` times beside `mptfx run`, `mptfx doctor`'s
exit code and the batch a run chooses, each as a user runs them (fresh processes). The bench
sections themselves: tests/e2e/test_bench_e2e.py."""

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


def test_a_pipeline_run_records_the_chosen_batch_and_the_probe_cost(mptfx, tmp_path):
    workspace = tmp_path / "ws"
    result = mptfx(
        "run", "--json", "--workspace", str(workspace),
        "--set", "data.builtin_per_class=30", "--set", "trainer.epochs=1",
        "--set", "trainer.batch_size=auto", "--set", "trainer.batch_memory_mb=16",
        "--set", "evaluator.min_accuracy=0", "--set", "tflite.variants=[fp32]",
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    trainer = json.loads(result.stdout)["trainer"]
    assert trainer["batch_size"] % 8 == 0
    assert trainer["batch_size_reason"].startswith(
        f"batch_size auto under {trainer['precision']}: {trainer['batch_size']} (")
    assert "trainer.batch_memory_mb 16 MB" in trainer["batch_size_reason"]
    assert trainer["autotune_probe_seconds"] >= 0
    tuning = trainer["autotune"]
    assert tuning["status"] in ("measured", "one candidate")
    if tuning["status"] == "measured":  # a CPU with bfloat16 instructions, or a GPU
        assert tuning["cache_file"].startswith(str(workspace / "autotune"))

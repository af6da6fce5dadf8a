"""End to end: `mptfx bench`'s auto_check section, the stock TFX pipeline it times beside
`mptfx run`, and `mptfx doctor`'s exit code, each as a user runs them (fresh processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def test_bench_auto_check_names_auto_fastest_and_ratio_per_model(mptfx, tmp_path):
    result = mptfx(
        "bench", "--quick", "--workspace", str(tmp_path),
        "--sections", "throughput,auto_check", "--models", "seed_cnn",
        "--precisions", "float32,mixed_bfloat16", "--xla", "off",
        "--input-shape", "16x16x1", "--batch-size", "8",
        "--windows", "2", "--window-seconds", "0.1", "--warmup-seconds", "0",
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    results = json.loads((tmp_path / "bench" / "results.json").read_text())
    (entry,) = results["auto_check"]
    assert entry["model"] == "seed_cnn"
    measured = {f"{r['precision']} xla off": r["samples_per_sec"]
                for r in results["throughput"] if r["status"] == "ok"}
    assert entry["fastest"] == max(measured, key=measured.get)
    assert entry["auto"] in measured
    assert entry["ratio"] == pytest.approx(measured[entry["auto"]] / measured[entry["fastest"]])
    assert "### auto check" in (tmp_path / "bench" / "results.md").read_text()
    # The verdict on auto is the auto check's own choice and ratio (issue 24).
    (verdict,) = [line for line in results["verdicts"] if "`auto`" in line]
    assert verdict.startswith(f"seed_cnn: `auto` ({entry['auto_status']}) chooses "
                              f"{entry['auto']}")
    assert ("the fastest cell." in verdict) == (entry["auto"] == entry["fastest"])
    if entry["auto"] != entry["fastest"]:
        assert f"runs at {entry['ratio']:.2f}× the fastest cell" in verdict


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

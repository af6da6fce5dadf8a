"""`mptfx bench` end to end: one `bench --quick` on a tiny configuration, read by every test
below. Two models (the registered seed_cnn and a user's model file, `--model-file`), two
precisions, one input shape and batch, two short windows per cell; the throughput section
and the auto_check section (what the Trainer's `auto` picks, against the fastest cell)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench(mptfx, tmp_path_factory):
    """(the bench folder, results.json, the command's result)."""
    workspace = tmp_path_factory.mktemp("bench")
    result = mptfx(
        "bench", "--quick", "--workspace", str(workspace),
        "--sections", "throughput,auto_check", "--models", "seed_cnn",
        "--model-file", str(REPO / "examples" / "my_model.py"),
        "--precisions", "float32,mixed_bfloat16", "--xla", "off",
        "--input-shape", "16x16x1", "--batch-size", "8",
        "--windows", "2", "--window-seconds", "0.1", "--warmup-seconds", "0",
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    folder = workspace / "bench"
    return folder, json.loads((folder / "results.json").read_text()), result


def _cells(results: dict, model: str, precision: str | None = None) -> list[dict]:
    return [cell for cell in results["throughput"] if cell["model"].startswith(model)
            and precision in (None, cell["precision"])]


def test_tiny_bench_writes_sane_table_json_and_charts(bench):
    folder, results, result = bench
    (cell,) = _cells(results, "seed_cnn", "float32")
    assert cell["status"] == "ok"
    assert cell["speedup"] == 1.0  # the reference cell against itself, same run
    assert len(cell["window_rates"]) == 2
    for key in ("samples_per_sec", "step_ms", "peak_memory_mb", "training_memory_mb"):
        assert cell[key] > 0, key
    assert "mfu" not in cell and "ceilings" not in results["host"]  # the lab's instruments
    markdown = (folder / "results.md").read_text()
    assert "| seed_cnn | 16×16×1 | 8 | float32 | off |" in markdown
    assert "MFU" not in markdown
    for chart in ("throughput.png", "memory.png"):
        assert (folder / chart).read_bytes()[:4] == b"\x89PNG"
    assert "results.md" in result.stdout


def test_bench_auto_check_names_auto_fastest_and_ratio_per_model(bench):
    folder, results, _ = bench
    (entry,) = [entry for entry in results["auto_check"] if entry["model"] == "seed_cnn"]
    measured = {f"{r['precision']} xla off": r["samples_per_sec"]
                for r in _cells(results, "seed_cnn") if r["status"] == "ok"}
    assert entry["fastest"] == max(measured, key=measured.get)
    assert entry["auto"] in measured
    assert entry["ratio"] == pytest.approx(measured[entry["auto"]] / measured[entry["fastest"]])
    assert "### auto check" in (folder / "results.md").read_text()
    # The verdict on auto is the auto check's own choice and ratio (issue 24).
    (verdict,) = [line for line in results["verdicts"]
                  if "`auto`" in line and line.startswith("seed_cnn:")]
    assert verdict.startswith(f"seed_cnn: `auto` ({entry['auto_status']}) chooses "
                              f"{entry['auto']}")
    assert ("the fastest cell." in verdict) == (entry["auto"] == entry["fastest"])
    if entry["auto"] != entry["fastest"]:
        assert f"runs at {entry['ratio']:.2f}× the fastest cell" in verdict


def test_bench_measures_the_model_file(bench):
    """`--model-file`: a user's model file is measured like a registered model."""
    folder, results, _ = bench
    (cell,) = _cells(results, "user:", "float32")
    assert cell["model"].startswith("user:my_model.py:build_model@")
    assert cell["status"] == "ok" and cell["samples_per_sec"] > 0
    assert "user:my_model.py" in (folder / "results.md").read_text()


def test_bench_refuses_a_missing_model_file(mptfx, tmp_path):
    result = mptfx("bench", "--workspace", str(tmp_path), "--model-file",
                   str(tmp_path / "absent.py"), timeout=120)
    assert result.returncode == 2
    assert f"--model-file {tmp_path / 'absent.py'}: not an existing .py file" in result.stderr

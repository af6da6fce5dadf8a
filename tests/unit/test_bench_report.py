"""The bench machinery that needs no TensorFlow: batch search, tables, verdicts, charts."""

from __future__ import annotations

import pytest

from benchmarks import charts, report
from benchmarks.measures.autocheck import auto_check_rows
from benchmarks.sections.throughput import add_speedups
from components.trainer.batch_size import search_largest_batch
from tools.lab.sections import SECTIONS as LAB_SECTIONS


def _probe_log(limit: int):
    tried = []

    def fits(batch: int) -> bool:
        tried.append(batch)
        return batch <= limit

    return fits, tried


def test_search_doubles_then_bisects_to_the_resolution():
    fits, tried = _probe_log(300)
    found = search_largest_batch(fits, start=32, max_batch=4096, resolution=1 / 32)
    assert tried[:5] == [32, 64, 128, 256, 512]
    assert found["first_failure"] - found["largest"] <= max(1, found["largest"] // 32)
    assert found["largest"] <= 300 < found["first_failure"]
    assert not found["capped"]


def test_search_halves_when_the_start_does_not_fit():
    fits, tried = _probe_log(5)
    found = search_largest_batch(fits, start=32, max_batch=4096, resolution=0)
    assert tried[:4] == [32, 16, 8, 4]
    assert (found["largest"], found["first_failure"]) == (5, 6)


def test_search_stops_at_max_batch_and_at_an_unknown_probe():
    fits, _ = _probe_log(10**9)
    assert search_largest_batch(fits, start=32, max_batch=100)["capped"]
    found = search_largest_batch(lambda b: None if b > 64 else True, start=32, max_batch=4096)
    assert (found["largest"], found["unknown_at"], found["capped"]) == (64, 128, False)


def _cell(precision: str, xla: bool, rate: float, **extra) -> dict:
    return {
        "model": "seed_cnn", "precision": precision, "xla": xla, "status": "ok",
        "batch_size": 32, "input_shape": [64, 64, 1], "unit": "images",
        "samples_per_sec": rate, "step_ms": 32000 / rate, "peak_memory_mb": 900.0,
        "training_memory_mb": 200.0,
        "memory_kind": "peak RSS", "achieved_gflops": rate * 0.13, "ceiling_gflops": 200.0,
        "mfu": rate * 0.13 / 200.0, "error": None, **extra,
    }


def _format_row(variant: str, size: int, ratio: float) -> dict:
    return {
        "format": f"TF Lite {variant}", "variant": variant, "bytes": size,
        "size_vs_tflite_fp32": ratio, "latency_ms_p50": 0.02, "latency_ms_p99": 0.03,
        "throughput_images_per_sec": 20000.0, "throughput_batch": 1, "threads": 1,
        "accuracy": 0.9, "agreement_with_savedmodel": 1.0, "input_size": [16, 16],
        "eval_images": 363,
    }


@pytest.fixture
def results() -> dict:
    rows = [
        _cell("float32", False, 600.0),
        _cell("float32", True, 200.0),
        _cell("mixed_bfloat16", False, 1200.0),
        {"model": "seed_cnn", "precision": "mixed_float16", "xla": False, "status": "timeout",
         "error": "timed out after 150 s", "batch_size": 32, "input_shape": [64, 64, 1],
         "unit": "images"},
    ]
    add_speedups(rows)
    return {
        "command": "mptfx bench --quick",
        "host": {
            "device": "CPU",
            "cpu": {"model_name": "Test CPU", "logical_cpus": 2, "flags": ["avx512_bf16"]},
            "devices": [{"kind": "CPU", "name": "/physical_device:CPU:0"}],
            "auto": {"precision": "float32", "precision_reason": "CPU", "xla": False,
                     "xla_reason": "CPU"},
        },
        "throughput": rows,
        "auto_check": auto_check_rows(rows, {"seed_cnn": {"auto": "float32 xla off",
                                                          "status": "measured"}}),
        "mfu": rows,
        "ceilings": {"float32": {"gflops": 200.0, "size": 2048}},
        "overhead": {
            "status": "ok", "model": "seed_cnn", "input_size": [16, 16], "batch_size": 32,
            "precision": "float32", "xla": False, "epochs": 4, "rounds": 2, "train_examples": 5748,
            "plain_fit_images_per_sec": 4000.0,
            "plain_fit_on_trainer_dataset_images_per_sec": 2000.0,
            "trainer_images_per_sec": 1900.0, "ratio": 0.475, "dataset_ratio": 0.5,
            "plain_runs": [{"images_per_sec_per_epoch": [900.0, 4000.0, 4000.0]}],
            "dataset_runs": [{"images_per_sec_per_epoch": [900.0, 2000.0, 2000.0]}],
            "trainer_runs": [{"images_per_sec_per_epoch": [900.0, 1800.0, 2000.0]}],
        },
        "publication": {"status": "ok", "rows": [
            _format_row("fp32", 1000, 1.0),
            _format_row("fp16", 600, 0.6),
        ]},
    }


def test_speedup_is_relative_to_float32_without_xla(results):
    speedups = [row["speedup"] for row in results["throughput"]]
    assert speedups == [1.0, pytest.approx(1 / 3), 2.0, None]


def test_verdicts_name_the_fastest_cell_and_auto_s_measured_choice(results):
    text = "\n".join(report.verdicts(results))
    assert "fastest cell is mixed_bfloat16 with XLA off" in text
    assert ("`auto` (measured) chooses float32 xla off, which runs at 0.50× the fastest "
            "cell (mixed_bfloat16 xla off)") in text
    assert "MFU" not in text and "Trainer" not in text and "TF Lite" not in text


def test_the_lab_s_verdicts_name_the_targets(results):
    text = "\n".join(report.verdicts(results, LAB_SECTIONS))
    assert "MFU target (60% of the matmul ceiling) does NOT hold" in text  # 39%
    assert "Trainer's own tf.data pipeline runs at 0.50" in text
    assert "the Trainer runs at 0.95 of that" in text
    assert "single epochs of one variant range over ±5% of its median" in text  # 1800-2000
    assert "TF Lite fp16: 0.600× the fp32 size > (misses) 0.52×" in text


def test_markdown_shows_every_cell_including_the_failed_one(results):
    markdown = report.render_markdown(results)
    assert "| seed_cnn | 64×64×1 | 32 | mixed_bfloat16 | off | 1,200.0 images/s |" in markdown
    assert "timeout: timed out after 150 s" in markdown
    markdown = report.render_markdown(results, LAB_SECTIONS)
    assert "| seed_cnn | 64×64×1 | 32 | mixed_bfloat16 | off | 1,200.0 | 156.0 | 78%" in markdown
    assert "| mptfx Trainer `run_fn` | 1,900 | 1,800–2,000 | 0.47 |" in markdown
    assert "| TF Lite fp16 | 0.6 | 0.600 |" in markdown


def test_charts_are_written(results, tmp_path):
    written = charts.write_charts(results, tmp_path)
    assert [path.name for path in written] == ["throughput.png", "memory.png"]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

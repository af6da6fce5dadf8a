"""The run report (components/tracking/report.py) from a summary as `mptfx run` writes it:
which figures it draws from what the run recorded, and one self-contained page holding
exactly those PNGs. (Rendered in a browser: tests/integration/test_report_page.py; of a real
run with its confusion matrix: tests/e2e/test_tracking_e2e.py.)"""

from __future__ import annotations

from components.tracking.report import REPORT_FILE, inlined_figures, write_report
from tests.run_summaries import fake_summary

PNG = b"\x89PNG\r\n\x1a\n"
INPUT_BOUND = {"wait_share": 0.8, "wait_share_per_epoch": [0.3, 0.8, 0.8],
               "steps_per_sec": 10.0, "model_steps_per_sec": 50.0, "threshold": 0.25,
               "model_steps_source": "autotune probe (measured)", "speedup_without_wait": 5.0,
               "input_bound": True, "advice": "input-bound: 80 % of each step <waited>"}


def _training(summary) -> dict:
    history = {"loss": [2.0, 1.0], "val_loss": [1.5, 0.9], "accuracy": [0.3, 0.6],
               "val_accuracy": [0.4, 0.7], "learning_rate": [1e-3, 1e-3],
               "loss_scale": [32768.0, 16384.0], "gradient_norm": [1.2, 0.8],
               "images_per_sec": [100.0, 250.0], "input_wait_share": [0.3, 0.8]}
    return {"history": history, "model": "seed_cnn", "precision": "mixed_float16",
            "label_names": [str(d) for d in range(10)], "input_bound": INPUT_BOUND,
            "autotune": {"status": "measured", "probe_seconds": 3.2,
                         "choice": {"precision": "mixed_float16", "xla": True},
                         "table": [{"precision": "mixed_float16", "xla": True, "batch_size": 64,
                                    "images_per_sec": 900.0, "step_ms": 71.1},
                                   {"precision": "float32", "xla": False, "batch_size": 64,
                                    "images_per_sec": None, "step_ms": None, "note": "NaN"}]}}


def test_every_recorded_part_is_a_png_inlined_in_one_page(tmp_path):
    summary = fake_summary(tmp_path)
    summary.infra = summary.infra.model_validate(
        {"blessed": True, "checked": True, "server": "model process", "p50_ms": 1.5,
         "p99_ms": 6.0, "load_seconds": 0.4, "requests": 20, "memory_limit": "4Gi"})
    series = {"system/cpu_utilization_percentage": [(0.0, 90.0), (2.0, 95.0)],
              "system/system_memory_usage_megabytes": [(0.0, 2000.0), (2.0, 2100.0)]}
    report = write_report(summary, _training(summary), series)

    assert report.path == tmp_path / "runs" / REPORT_FILE
    assert summary.report_path == str(report.path)
    assert sorted(report.figures) == sorted([
        "training_curves.png", "per_class_recall.png", "autotune.png", "input_bound.png",
        "tflite.png", "infra_latency.png", "system_metrics.png"])
    assert all(png.startswith(PNG) for png in report.figures.values())
    page = report.path.read_text()
    assert inlined_figures(page) == report.figures  # the same bytes MLflow gets
    assert "&lt;waited&gt;" in page and "<waited>" not in page  # text is escaped
    assert "http" not in page.replace("http-equiv", "")  # nothing fetched: self-contained


def test_a_run_that_recorded_little_says_so_instead_of_drawing(tmp_path):
    summary = fake_summary(tmp_path)
    summary.eval, summary.tflite = summary.eval.model_validate({}), {}
    report = write_report(summary, {})
    assert report.figures == {}
    page = report.path.read_text()
    for note in ("The Trainer recorded no epochs", "No Evaluator output", "No TF Lite variants",
                 "Input waits not recorded", "Not checked in this run"):
        assert note in page, note


def test_a_report_that_cannot_be_written_is_a_warning_not_a_failure(tmp_path, caplog):
    from components.tracking.recorder import write_report_quietly

    summary = fake_summary(tmp_path)
    (tmp_path / "blocked").write_text("a file where the run folder would be")
    summary.summary_path = str(tmp_path / "blocked" / "summary.json")
    assert write_report_quietly(summary, {}) is None
    assert "the run report could not be written" in caplog.text

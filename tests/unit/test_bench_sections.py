"""The bench's `auto_check` and `stock_tfx` sections: the entries results.json gets and the
tables results.md shows, from throughput rows and section results as the runner writes
them (benchmarks/autocheck.py, benchmarks/report.py)."""

from __future__ import annotations

import pytest

from benchmarks import report
from benchmarks.autocheck import auto_check_rows


def _cell(model, precision, xla, rate, status="ok"):
    return {"model": model, "precision": precision, "xla": xla, "status": status,
            "samples_per_sec": rate}


THROUGHPUT = [
    _cell("seed_cnn", "float32", False, 1000.0),
    _cell("seed_cnn", "mixed_bfloat16", False, 1200.0),
    _cell("seed_cnn", "float32", True, 400.0),
    _cell("resnet50", "float32", False, 50.0),
    _cell("resnet50", "mixed_bfloat16", False, 48.0),
    _cell("resnet50", "float32", True, None, status="skipped"),
]


def test_auto_check_has_one_entry_per_model_with_auto_fastest_and_ratio():
    rows = auto_check_rows(THROUGHPUT, {
        "seed_cnn": {"auto": "mixed_bfloat16 xla off", "status": "measured",
                     "probe_seconds": 3.0},
        "resnet50": {"auto": "mixed_bfloat16 xla off", "status": "measured"},
    })
    by_model = {row["model"]: row for row in rows}
    assert list(by_model) == ["seed_cnn", "resnet50"]
    assert by_model["seed_cnn"]["fastest"] == "mixed_bfloat16 xla off"
    assert by_model["seed_cnn"]["ratio"] == pytest.approx(1.0)
    assert by_model["resnet50"]["fastest"] == "float32 xla off"
    assert by_model["resnet50"]["ratio"] == pytest.approx(48 / 50)
    assert {"model", "auto", "fastest", "ratio"} <= set(rows[0])


def test_a_model_whose_auto_cell_was_not_measured_has_no_ratio():
    (row,) = auto_check_rows(THROUGHPUT, {"resnet50": {"auto": "float32 xla on",
                                                       "status": "measured"}})
    assert row["fastest"] == "float32 xla off" and row["ratio"] is None


def test_results_md_shows_both_sections():
    results = {
        "auto_check": auto_check_rows(THROUGHPUT, {"seed_cnn": {
            "auto": "float32 xla off", "status": "one candidate"}}),
        "stock_tfx": {"status": "ok", "mptfx_run_seconds": 50.0, "stock_tfx_seconds": 80.0,
                      "ratio": 50 / 80, "components": ["ImportExampleGen", "Pusher"]},
    }
    markdown = report.render_markdown(results)
    assert "| seed_cnn | float32 xla off | one candidate | mixed_bfloat16 xla off | 0.83× |" \
        in markdown
    assert "| stock TFX (ImportExampleGen, Pusher) | 80.0 |" in markdown
    assert "ratio (mptfx / stock): 0.62" in markdown

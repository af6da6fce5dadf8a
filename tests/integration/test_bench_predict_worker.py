"""`mptfx bench --sections predict`'s task in its own worker process, as the section runs it,
on a small photo set: both sides answer every photo, and every class is serving_default's."""

from __future__ import annotations

from benchmarks.launch import run_task
from benchmarks.sections.predict import PREDICT, PredictParams
from benchmarks.sections.tasks import to_json


def test_the_predict_worker_times_both_sides_and_agrees_with_serving_default(tmp_path):
    params = PredictParams(str(tmp_path / "predict"), photos=90, classes=3, seed=0,
                           input_size=[32, 32], batch_size=16, rounds=1)
    outcome = run_task(PREDICT.name, to_json(params), tmp_path / "bench", "predict",
                       timeout_seconds=600)
    assert outcome.ok, outcome.error
    result = outcome.result
    assert result["photos"] == result["rows"] == result["plain_rows"] == 90
    assert result["errors"] == 0 and result["agreement"] == 1.0
    assert result["ours_images_per_sec"] > 0 and result["plain_images_per_sec"] > 0
    assert result["ratio"] == result["ours_images_per_sec"] / result["plain_images_per_sec"]
    assert (tmp_path / "predict" / "out" / "serving" / "photos" / "1" / "saved_model.pb").exists()

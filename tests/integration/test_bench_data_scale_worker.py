"""`mptfx bench --sections data_scale`'s ingest task in its own worker process, as the
section runs it: restricted to one core before TensorFlow starts, and on all of them."""

from __future__ import annotations

import os

from benchmarks.launch import run_task
from benchmarks.measures import data_scale
from benchmarks.sections.data_scale import PHOTO_INGEST, PhotoIngestParams
from benchmarks.sections.tasks import to_json


def test_the_ingest_worker_runs_on_the_cores_it_was_given(tmp_path):
    photos = data_scale.photo_sets(str(tmp_path / "photos"), [30], 2, 0)["sets"][0]
    results = {}
    for cores in (1, 0):
        params = PhotoIngestParams(photos["root"], str(tmp_path / f"out-{cores}"), "mptfx",
                                   cores)
        outcome = run_task(PHOTO_INGEST.name, to_json(params), tmp_path / "bench",
                           f"ingest-{cores}", timeout_seconds=300)
        assert outcome.ok, outcome.error
        results[cores] = outcome.result

    assert results[1]["cores"] == 1
    assert results[0]["cores"] == len(os.sched_getaffinity(0))
    for result in results.values():
        assert result["images"] == 30 and result["reencoded"] == 0
        assert 0.8 < result["bytes_written"] / result["photo_bytes"] < 1.2
        assert result["peak_rss_mb"] > 100  # the worker's own, TensorFlow loaded

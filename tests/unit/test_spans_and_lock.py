"""Spans are discovered and windowed like TFX's span convention; the lock admits one run."""

from __future__ import annotations

import pytest

from components.ingest.listing import list_spans, read_folder
from components.ingest.spans import discover_spans, select_data
from pipelines.locking import RunLock


def _drop(root, name, classes):
    for cls in classes:
        (root / name / cls).mkdir(parents=True)
        (root / name / cls / f"{cls}.png").write_bytes(b"x")


def test_latest_span_and_rolling_window(tmp_path):
    for span in (1, 2, 10):
        _drop(tmp_path, f"span-{span}", ["a", "b"])
    (tmp_path / "span-notes").mkdir()
    assert discover_spans(read_folder(tmp_path)) == {1: "span-1", 2: "span-2", 10: "span-10"}
    latest = select_data(str(tmp_path))
    assert (latest.span, latest.span_dirs, latest.spans) == (10, ["span-10"], [10])
    window = select_data(str(tmp_path), window=2)
    assert window.span_dirs == ["span-2", "span-10"] and window.span == 10


def test_span_pattern_in_the_folder_name(tmp_path):
    for day in (20261128, 20261129):
        _drop(tmp_path, f"drop-{day}", ["a", "b"])
    chosen = select_data(str(tmp_path / "drop-{SPAN}"))
    assert chosen.root == str(tmp_path) and chosen.span == 20261129
    with pytest.raises(FileNotFoundError, match="no folder matching 'week-{SPAN}'"):
        select_data(str(tmp_path / "week-{SPAN}"))


def test_plain_folder_has_no_spans(tmp_path):
    _drop(tmp_path, "", ["a", "b"])
    plain = select_data(str(tmp_path))
    assert plain.span_dirs == [] and plain.span == 0 and plain.folders == [str(tmp_path)]


def test_window_of_spans_is_one_listing_with_the_union_of_classes(tmp_path):
    _drop(tmp_path, "span-1", ["cat", "dog"])
    _drop(tmp_path, "span-2", ["dog", "eel"])
    listing = list_spans(tmp_path, ["span-1", "span-2"]).image_listing(str(tmp_path))
    assert listing.label_names == ["cat", "dog", "eel"]
    assert dict(zip(listing.files, listing.labels, strict=True)) == {
        "span-1/cat/cat.png": 0, "span-1/dog/dog.png": 1,
        "span-2/dog/dog.png": 1, "span-2/eel/eel.png": 2,
    }


def test_lock_is_exclusive_and_released(tmp_path):
    path = tmp_path / "retrain.lock"
    with RunLock(path) as first:
        assert first.acquired and not first.took_over
        with RunLock(path) as second:
            assert not second.acquired
            assert "pid" in second.describe_holder() and "since" in second.describe_holder()
    assert path.read_text() == ""
    with RunLock(path) as again:
        assert again.acquired and not again.took_over


# --- the database lock, against the real PostgreSQL that .ci/run starts --------------------



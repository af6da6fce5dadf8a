"""`mptfx bench --sections data_scale` on a few real synthetic photos: the photo sets,
mptfx's ingest and the plain one, both training inputs, and the table and verdicts drawn
from what they measured (the worker processes themselves: tests/integration)."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf
from PIL import Image

from benchmarks import report
from benchmarks.measures import data_scale
from benchmarks.sections.data_scale import MEMORY_FACTOR, SECTION, summarise

PHOTOS = 16  # and MEMORY_FACTOR (10) times as many


@pytest.fixture(scope="module")
def photo_sets(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data-scale")
    return data_scale.photo_sets(str(folder), [PHOTOS, MEMORY_FACTOR * PHOTOS], 2, 0)["sets"]


@pytest.fixture(scope="module")
def ingests(photo_sets, tmp_path_factory):
    """Both ingests of both sets, as the section keys them (no 1-core runs in-process)."""
    out = tmp_path_factory.mktemp("ingests")
    small, large = (photo_set["root"] for photo_set in photo_sets)
    runs = {"mptfx": (small, "mptfx"), "plain": (small, "plain"),
            "mptfx_large": (large, "mptfx"), "plain_large": (large, "plain")}
    return {key: data_scale.ingest_photos(root, str(out / key), method)
            for key, (root, method) in runs.items()}


def test_photos_are_224_jpegs_in_class_folders_and_the_small_set_is_the_large_one_s_start(
        photo_sets):
    small, large = photo_sets
    assert (small["photos"], large["photos"]) == (PHOTOS, MEMORY_FACTOR * PHOTOS)
    files, labels = data_scale.labelled_photos(small["root"])
    assert len(files) == PHOTOS and sorted(set(labels)) == [0, 1]
    with Image.open(files[0]) as photo:
        assert (photo.format, photo.size) == ("JPEG", (224, 224))
    same = os.path.join(large["root"], *files[0].split(os.sep)[-2:])
    assert os.path.samefile(files[0], same)
    assert 0 < small["bytes"] < large["bytes"]


def test_both_ingests_keep_the_photos_bytes_and_count_every_photo(ingests):
    for key, result in ingests.items():
        assert result["images"] == (PHOTOS if "large" not in key else MEMORY_FACTOR * PHOTOS)
        assert result["images_per_sec"] > 0 and result["peak_rss_mb"] > 0
        assert 0.8 < result["bytes_written"] / result["photo_bytes"] < 1.2, key
    assert ingests["mptfx"]["reencoded"] == 0  # JPEGs stay the JPEGs the files hold
    assert ingests["mptfx"]["shards"] >= 2  # a train and an eval shard at least
    assert ingests["plain"]["shards"] == 1


def test_the_decode_alone_reads_every_photo_and_writes_nothing(photo_sets, tmp_path):
    result = data_scale.ingest_photos(photo_sets[0]["root"], str(tmp_path / "decode"),
                                      "decode")
    assert result["images"] == PHOTOS and result["bytes_written"] == 0
    entry = summarise(PHOTOS, {"decode_large": {**result, "images_per_sec": 300.0},
                               "decode_large_1core": {**result, "images_per_sec": 200.0},
                               "mptfx_large": {"images_per_sec": 290.0},
                               "mptfx_large_1core": {"images_per_sec": 190.0}},
                      {"cores": 2})
    assert entry["decode_core_speedup"] == 1.5
    verdicts = SECTION.verdicts({"data_scale": entry})
    assert any("scales 1.50× from 1 core to 2" in line and "map call, scales 1.53×" in line
               for line in verdicts), verdicts


def test_an_unknown_ingest_method_is_named():
    with pytest.raises(ValueError, match="method must be one of"):
        data_scale.ingest_photos("/nowhere", "/nowhere", "fast")


def test_restrict_cores_limits_this_process_and_zero_keeps_them_all():
    before = os.sched_getaffinity(0)
    try:
        assert data_scale.restrict_cores(0) == len(before)
        assert data_scale.restrict_cores(1) == 1 and len(os.sched_getaffinity(0)) == 1
    finally:
        os.sched_setaffinity(0, before)


def test_the_inputs_deliver_224_batches_and_the_section_renders_its_targets(
        photo_sets, ingests):
    images, labels = next(iter(data_scale.plain_input(photo_sets[0]["root"], [224, 224], 8)))
    assert images.shape == (8, 224, 224, 3) and labels.dtype == tf.int32

    rates = data_scale.input_rates(
        ingests["mptfx"]["examples_dir"], photo_sets[0]["root"], [224, 224], 8,
        warmup_batches=1, max_batches=3, seconds=1.0, rounds=1)
    assert rates["mptfx_images_per_sec"] > 0 and rates["plain_images_per_sec"] > 0

    entry = summarise(PHOTOS, ingests, rates)
    assert 0.8 < entry["mptfx_bytes_ratio"] < 1.2
    assert entry["mptfx_core_speedup"] is None  # no 1-core run here: not measured
    lines = SECTION.table({"data_scale": entry})
    assert lines[0].startswith(f"### Data scale ({MEMORY_FACTOR * PHOTOS} synthetic 224×224 "
                               f"JPEG photos")
    assert f"and the first {PHOTOS} of them" in lines[0]
    markdown = report.render_markdown({"data_scale": entry})
    assert "| Ingest bytes written ÷ photo bytes |" in markdown
    verdicts = SECTION.verdicts({"data_scale": entry})
    assert any("bytes written ÷ photo bytes" in line and line.endswith(": PASS.")
               for line in verdicts), verdicts
    assert any("(all ÷ 1 core)" in line and "not measured" in line for line in verdicts)
    assert any("cores with the Trainer's input" in line for line in verdicts)

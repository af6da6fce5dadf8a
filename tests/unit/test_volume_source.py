"""User volume folders: .npz pairs, the mask-less and malformed ones quarantined, ingested
by the real `ingest()` into the synthetic volumes' features."""

from __future__ import annotations

import json

import numpy as np
import tensorflow as tf

from components.ingest.headers import SizeLimits
from components.ingest.ingest import ingest
from components.ingest.listing import list_data
from components.ingest.synthetic_volumes import generate_volumes


def test_npz_pairs_are_ingested_with_depth_and_mask(tmp_path):
    volumes, masks, labels = generate_volumes(6, (8, 8, 8), seed=3)
    for name in ("a", "b"):
        (tmp_path / "data" / name).mkdir(parents=True)
    for index, (volume, mask, label) in enumerate(zip(volumes, masks, labels, strict=True)):
        np.savez(tmp_path / "data" / "ab"[label] / f"v{index}.npz", volume=volume, mask=mask)
    np.savez(tmp_path / "data" / "a" / "no_mask.npz", volume=volumes[0])
    np.savez(tmp_path / "data" / "b" / "flat.npz", volume=volumes[0][0], mask=masks[0][0])
    assert list_data(tmp_path / "data").kind == "volumes"

    result = ingest(str(tmp_path / "data"), str(tmp_path / "examples"), str(tmp_path / "q.json"),
                    max_bad_fraction=0.5, splits={"train": 0.5, "eval": 0.5})
    assert result.total == 8 and sum(result.split_counts.values()) == 6
    reasons = {e["path"]: e["reason"] for e in json.loads((tmp_path / "q.json").read_text())
               ["files"]}
    assert reasons["a/no_mask.npz"].startswith("unreadable: ValueError: has no array 'mask'")
    assert reasons["b/flat.npz"] == "volume must be 3D [D, H, W]. Received: shape=(8, 8)"

    masks_by_file = {f"{'ab'[label]}/v{i}.npz": m for i, (m, label) in
                     enumerate(zip(masks, labels, strict=True))}
    files = tf.io.gfile.glob(str(tmp_path / "examples" / "Split-*" / "*.gz"))
    seen = 0
    for record in tf.data.TFRecordDataset(files, compression_type="GZIP"):
        feature = tf.train.Example.FromString(record.numpy()).features.feature
        name = feature["filename"].bytes_list.value[0].decode()
        assert feature["depth"].int64_list.value == [8]
        assert feature["height"].int64_list.value == [64]  # 8 slices of 8 rows, stacked
        np.testing.assert_array_equal(np.array(feature["mask"].int64_list.value),
                                      masks_by_file[name].reshape(-1))
        seen += 1
    assert seen == 6


def test_stray_files_are_listed_as_ignored_and_oversized_volumes_quarantined(tmp_path):
    volumes, masks, _ = generate_volumes(4, (8, 8, 8), seed=5)
    (tmp_path / "data" / "a").mkdir(parents=True)
    for index, (volume, mask) in enumerate(zip(volumes, masks, strict=True)):
        np.savez(tmp_path / "data" / "a" / f"v{index}.npz", volume=volume, mask=mask)
    big = np.zeros((64, 128, 128), np.float32)
    np.savez(tmp_path / "data" / "a" / "huge.npz", volume=big, mask=big)
    (tmp_path / "data" / "a" / "README.txt").write_text("notes")

    result = ingest(str(tmp_path / "data"), str(tmp_path / "examples"), str(tmp_path / "q.json"),
                    max_bad_fraction=0.5, splits={"train": 0.5, "eval": 0.5},
                    limits=SizeLimits(max_file_mb=1))
    report = json.loads((tmp_path / "q.json").read_text())
    assert report["ignored"] == ["a/README.txt"]
    reasons = {e["path"]: e["reason"] for e in report["files"]}
    assert reasons == {"a/huge.npz": "file is 8.0 MB > data.max_file_mb 1"}
    assert result.channels == 1 and sum(result.split_counts.values()) == 4

"""Ingest: listing, splits, tf.data decoding, quarantine, TFRecord input, and a real TFX run."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from components.examples_format import decode_image
from components.ingest.errors import DataError
from components.ingest.ingest import ingest
from components.ingest.listing import ImageListing, list_data
from components.ingest.reader import UNDECODABLE
from components.ingest.splits import SplitAssigner, parse_split_ratios

RNG = np.random.default_rng(7)


def _encode(mode: str = "L", size: tuple[int, int] = (8, 10), fmt: str = "PNG") -> bytes:
    """A random image of PIL `mode` and (height, width) `size`, encoded as `fmt`."""
    shape = size if mode == "L" else (*size, len(mode))
    buffer = io.BytesIO()
    Image.fromarray(RNG.integers(0, 256, shape, dtype=np.uint8), mode).save(buffer, fmt)
    return buffer.getvalue()


def _save(path: Path, mode: str = "L", size: tuple[int, int] = (8, 10), fmt: str = "PNG"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_encode(mode, size, fmt))


def _image_tree(root: Path, per_class: int = 6, classes=("cat", "dog"), mode="L") -> Path:
    for name in classes:
        for index in range(per_class):
            _save(root / name / f"img_{index:03d}.png", mode)
    return root


def _read_split(examples_dir: Path, split: str) -> list[dict]:
    """Every stored example of `split` as a dict of Python values."""
    shards = sorted(str(path) for path in (examples_dir / f"Split-{split}").glob("*.gz"))
    rows = []
    for record in tf.data.TFRecordDataset(shards, compression_type="GZIP"):
        feature = tf.train.Example.FromString(record.numpy()).features.feature
        rows.append(
            {
                name: (
                    feature[name].int64_list.value[0]
                    if feature[name].WhichOneof("kind") == "int64_list"
                    else feature[name].bytes_list.value[0]
                )
                for name in feature
            }
        )
    return rows


def _run(root: Path, out: Path, **options) -> tuple:
    result = ingest(str(root), str(out / "examples"), str(out / "q" / "quarantine.json"), **options)
    rows = _read_split(out / "examples", "train") + _read_split(out / "examples", "eval")
    return result, rows


# --- listing ---------------------------------------------------------------------------


def scan_image_folder(root: Path) -> ImageListing:
    """The images of `root` as the one listing of a run finds them."""
    listing = list_data(root)
    assert listing.kind == "images"
    return listing.image_listing(str(root))


def test_scan_lists_sorted_classes_recursively_and_skips_hidden_files(tmp_path):
    _save(tmp_path / "b" / "deep" / "x.png")
    _save(tmp_path / "a" / "y.jpg", fmt="JPEG")
    (tmp_path / "a" / "notes.txt").write_text("not an image: ignored, as Keras ignores it")
    _save(tmp_path / "a" / "UPPER.PNG")
    (tmp_path / "a" / ".DS_Store").write_text("hidden")
    (tmp_path / ".cache").mkdir()

    listing = scan_image_folder(tmp_path)

    assert listing.label_names == ["a", "b"]
    assert listing.files == ["a/UPPER.PNG", "a/y.jpg", "b/deep/x.png"]
    assert listing.labels == [0, 0, 1]
    assert listing.ignored == ["a/notes.txt"]


def test_scan_walks_like_os_walk_and_does_not_follow_a_linked_folder(tmp_path):
    """The listing reads folders with os.scandir (no stat per file); it must list what
    os.walk lists, in its top-down order, and check a link to a folder without entering it
    (so an image is never listed twice)."""
    for name in ("a/z.png", "a/sub/b.png", "a/sub/deeper/c.png", "a/m.png", "b/1.png",
                 "b/.hidden/x.png", "b/sub/2.png"):
        _save(tmp_path / name)
    os.symlink(tmp_path / "a" / "sub", tmp_path / "b" / "linked")

    listing = scan_image_folder(tmp_path)

    expected = []
    for class_dir in ("a", "b"):
        for folder, dirnames, filenames in os.walk(tmp_path / class_dir):
            dirnames[:] = sorted(name for name in dirnames if not name.startswith("."))
            relative = Path(folder).relative_to(tmp_path).as_posix()
            expected += [f"{relative}/{name}" for name in sorted(filenames)]
    assert listing.files == expected
    assert listing.files == ["a/m.png", "a/z.png", "a/sub/b.png", "a/sub/deeper/c.png",
                             "b/1.png", "b/sub/2.png"]


def _file_not_dir(root: Path) -> Path:
    (root / "file").write_text("x")
    return root / "file"


def _loose_files_only(root: Path) -> Path:
    (root / "a.png").write_text("x")
    return root


def _with_empty_class(root: Path) -> Path:
    _image_tree(root, 1)
    (root / "empty").mkdir()
    return root


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda root: root / "missing", "does not exist"),
        (_file_not_dir, "is not a directory"),
        (lambda root: root, "is empty"),
        (lambda root: _image_tree(root, 1, classes=("7",)), "found only one class '7'"),
        (_loose_files_only, "no class sub-folders"),
        (_with_empty_class, "has no image files"),
    ],
)
def test_scan_rejects_unusable_roots_with_one_line_naming_the_path(tmp_path, make, expected):
    root = make(tmp_path)
    with pytest.raises(DataError, match=expected) as caught:
        scan_image_folder(root)
    message = str(caught.value)
    assert str(tmp_path) in message and "\n" not in message


def test_tfrecord_dir_is_detected_only_without_class_folders(tmp_path):
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "part-0.tfrecord.gz").write_bytes(b"")
    assert list_data(tmp_path / "records").kind == "tfrecords"
    with_classes = _image_tree(tmp_path / "images", 1)
    (with_classes / "stray.gz").write_bytes(b"")
    assert list_data(with_classes).kind == "images"


def test_input_fingerprint_changes_exactly_when_files_change(tmp_path):
    root = _image_tree(tmp_path, 2)
    first = list_data(root).fingerprint
    assert list_data(root).fingerprint == first
    _save(root / "cat" / "new.png")
    assert list_data(root).fingerprint != first


def test_input_fingerprint_is_the_digest_earlier_runs_stored(tmp_path):
    """The digest of every class folder's file (relative path, size, mtime_ns, in os.walk's
    order) that earlier versions stored as `input_fingerprint`: a workspace made before the
    one listing still says "no new data" to `mptfx retrain` for an unchanged folder."""
    root = _image_tree(tmp_path, 3)
    (root / "cat" / "notes.txt").write_text("ignored, still part of the folder's state")
    digest = hashlib.sha256()
    for folder, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(folder, name)
            stat = path.stat()
            relative = path.relative_to(root).as_posix()
            digest.update(f"{relative}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    assert list_data(root).fingerprint == digest.hexdigest()


# --- splits ----------------------------------------------------------------------------


def test_split_is_deterministic_independent_of_order_and_follows_ratios():
    keys = [f"class_{i % 3}/img_{i:05d}.png" for i in range(3000)]
    assign = SplitAssigner(parse_split_ratios('{"train": 0.8, "eval": 0.2}'))
    forward = {key: assign(key) for key in keys}
    backward = {key: SplitAssigner({"train": 0.8, "eval": 0.2})(key) for key in reversed(keys)}

    assert forward == backward
    assert list(forward.values()).count("eval") / len(keys) == pytest.approx(0.2, abs=0.03)


@pytest.mark.parametrize(
    "splits", ['{"train": 0.8, "eval": 0.3}', '{"train": 1.0, "eval": 0}', "{train: 1}", "{}"]
)
def test_bad_split_ratios_are_rejected_naming_the_value(splits):
    with pytest.raises(DataError, match="Received"):
        parse_split_ratios(splits)


# --- decoding, quarantine ----------------------------------------------------------------


def test_corrupt_png_is_quarantined_and_text_file_ignored_not_counted(tmp_path):
    root = _image_tree(tmp_path / "data", per_class=10)
    (root / "cat" / "readme.txt").write_text("hello")
    (root / "dog" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)

    # 1 bad of 21 images is under 0.05; counting readme.txt too (2 of 22) would not be.
    result, rows = _run(root, tmp_path / "out", max_bad_fraction=0.05)

    report = json.loads((tmp_path / "out" / "q" / "quarantine.json").read_text())
    assert {entry["path"] for entry in report["files"]} == {"dog/broken.png"}
    assert all(entry["reason"].startswith(UNDECODABLE) for entry in report["files"])
    assert report["ignored"] == ["cat/readme.txt"]
    assert (report["total"], report["bad"]) == (21, 1)
    assert report["bad_fraction"] == pytest.approx(1 / 21)
    assert len(rows) == 20 and sum(result.split_counts.values()) == 20
    assert b"dog/broken.png" not in {row["filename"] for row in rows}


def test_a_corrupt_file_costs_its_decode_batch_nothing(tmp_path):
    """The decode validates images in batches and a corrupt file fails its whole batch;
    the batch's good images, RGBA ones re-encoded included, must be stored exactly as an
    ingest without the corrupt files stores them, in the same order."""
    clean, dirty = tmp_path / "clean", tmp_path / "dirty"
    for index in range(40):
        mode, fmt = [("L", "PNG"), ("RGBA", "PNG"), ("RGB", "JPEG")][index % 3]
        data = _encode(mode, (12, 9), fmt)
        name = f"{'ab'[index % 2]}/img_{index:03d}.{fmt.lower()}"
        for root in (clean, dirty):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
    for name in ("a/img_004b.png", "b/img_027b.jpeg"):  # each inside a batch of good ones
        (dirty / name).write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40 if name.endswith(".png")
                                   else b"\xff\xd8\xff\xe0" + b"\0" * 30)

    _, expected = _run(clean, tmp_path / "out-clean", max_bad_fraction=0.1)
    _, rows = _run(dirty, tmp_path / "out-dirty", max_bad_fraction=0.1)

    report = json.loads((tmp_path / "out-dirty" / "q" / "quarantine.json").read_text())
    assert sorted(entry["path"] for entry in report["files"]) == ["a/img_004b.png",
                                                                  "b/img_027b.jpeg"]
    assert rows == expected and len(rows) == 40
    assert sum(row["image_format"] == b"png" and row["channels"] == 3 for row in rows) > 0


def test_too_many_bad_files_fail_naming_count_files_and_report(tmp_path):
    root = _image_tree(tmp_path / "data", per_class=4)
    (root / "dog" / "zz_bad.jpg").write_bytes(b"definitely not a jpeg")
    failure_report = tmp_path / "kept" / "quarantine.json"

    with pytest.raises(DataError) as caught:
        ingest(
            str(root),
            str(tmp_path / "examples"),
            str(tmp_path / "q" / "quarantine.json"),
            max_bad_fraction=0.05,
            failure_report_path=str(failure_report),
        )

    message = str(caught.value)
    assert "1 of 9 files" in message and "dog/zz_bad.jpg" in message
    assert "0.05" in message and str(failure_report) in message
    assert json.loads(failure_report.read_text())["files"][0]["path"] == "dog/zz_bad.jpg"


def test_mixed_gray_rgb_rgba_of_different_sizes_become_rgb(tmp_path):
    root = tmp_path / "data"
    _save(root / "a" / "gray.png", "L", (5, 7))
    _save(root / "a" / "rgb.jpg", "RGB", (9, 4), fmt="JPEG")
    _save(root / "b" / "pal.gif", "L", (6, 6), fmt="GIF")
    _save(root / "b" / "bmp.bmp", "RGB", (3, 8), fmt="BMP")
    clear = np.zeros((4, 4, 4), np.uint8)  # fully transparent: must come out white
    Image.fromarray(clear, "RGBA").save(root / "b" / "clear.png")

    result, rows = _run(root, tmp_path / "out", splits={"train": 0.5, "eval": 0.5})

    assert result.channels == 3 and len(rows) == 5
    by_name = {row["filename"].decode(): row for row in rows}
    for row in rows:
        # What the Trainer, the serving signature and TF Lite decode the stored bytes with.
        pixels = decode_image(row["image"], row["channels"]).numpy()
        assert pixels.shape == (row["height"], row["width"], 3) and row["channels"] == 3
    assert (by_name["a/gray.png"]["height"], by_name["a/gray.png"]["width"]) == (5, 7)
    # Each file keeps its own bytes and format; only the one with alpha is re-encoded (PNG).
    assert {name: row["image_format"] for name, row in by_name.items()} == {
        "a/gray.png": b"png", "a/rgb.jpg": b"jpeg", "b/pal.gif": b"gif", "b/bmp.bmp": b"bmp",
        "b/clear.png": b"png"}
    for name in ("a/gray.png", "a/rgb.jpg", "b/pal.gif", "b/bmp.bmp"):
        assert by_name[name]["image"] == (root / name).read_bytes()
    assert by_name["b/clear.png"]["image"] != (root / "b" / "clear.png").read_bytes()
    assert tf.io.decode_png(by_name["b/clear.png"]["image"]).numpy().min() == 255
    assert {name: row["label_name"] for name, row in by_name.items()}["b/pal.gif"] == b"b"


def test_all_gray_images_are_stored_with_one_channel(tmp_path):
    root = _image_tree(tmp_path / "data", per_class=4, mode="L")
    result, rows = _run(root, tmp_path / "out", splits={"train": 0.5, "eval": 0.5})
    assert result.channels == 1
    assert {tf.io.decode_png(row["image"]).shape[-1] for row in rows} == {1}


@pytest.mark.parametrize("method", ["stretch", "pad"])
def test_resize_to_fixed_size(tmp_path, method):
    root = tmp_path / "data"
    white = np.full((4, 16, 3), 255, np.uint8)  # wide: "pad" must add black rows above/below
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        for index in range(3):
            Image.fromarray(white).save(root / name / f"{index}.png")

    _, rows = _run(
        root,
        tmp_path / "out",
        splits={"train": 0.5, "eval": 0.5},
        image_size=(8, 8),
        resize_method=method,
    )

    pixels = tf.io.decode_png(rows[0]["image"]).numpy()
    assert pixels.shape == (8, 8, 3) and (rows[0]["height"], rows[0]["width"]) == (8, 8)
    corner = pixels[0, 0, 0]
    assert corner == (0 if method == "pad" else 255)


def test_empty_split_is_an_error_naming_the_split(tmp_path):
    root = _image_tree(tmp_path / "data", per_class=1)
    with pytest.raises(DataError, match="split 'eval' is empty"):
        _run(root, tmp_path / "out", splits={"train": 0.999, "eval": 0.001})


# --- TFRecord input --------------------------------------------------------------------


def _record(label: int | None, image: bytes, **extra: bytes) -> bytes:
    feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image]))}
    if label is not None:
        feature["label"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))
    for name, value in extra.items():
        feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def test_tfrecord_dir_is_ingested_filling_missing_features(tmp_path):
    records_dir = tmp_path / "records"
    records_dir.mkdir()
    plain = [
        _record(i % 2, _encode("RGB", (6, 5)), label_name=b"odd" if i % 2 else b"even")
        for i in range(6)
    ]
    with tf.io.TFRecordWriter(str(records_dir / "a.tfrecord")) as writer:
        for record in plain:
            writer.write(record)
    # Deliberately misnamed: compression must be detected from the bytes, not the name.
    with tf.io.TFRecordWriter(str(records_dir / "b.tfrecords"), options="GZIP") as writer:
        for index in range(6):
            writer.write(
                _record(index % 2, _encode("L", (6, 5)), filename=f"b/{index}.png".encode())
            )
        writer.write(_record(None, _encode("L", (6, 5))))  # no label: quarantined

    result, rows = _run(
        records_dir, tmp_path / "out", max_bad_fraction=0.1, splits={"train": 0.5, "eval": 0.5}
    )

    assert len(rows) == 12 and result.channels == 3
    assert result.label_names == ["even", "odd"]
    assert {row["label_name"] for row in rows if row["label"] == 1} == {b"odd"}
    assert b"a.tfrecord#0" in {row["filename"] for row in rows}
    assert all(row["channels"] == 3 and row["height"] == 6 for row in rows)
    assert json.loads((tmp_path / "out" / "examples" / "labels.json").read_text()) == {
        "label_names": ["even", "odd"]
    }
    report = json.loads((tmp_path / "out" / "q" / "quarantine.json").read_text())
    assert report["files"] == [
        {"path": "b.tfrecords#6", "reason": "missing required feature 'label' (one int64 value)"}
    ]
    assert gzip.open(records_dir / "b.tfrecords").read(1)  # the input was really GZIP

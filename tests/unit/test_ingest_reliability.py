"""Bad input files and folders: one line naming the path, or a quarantine with the reason;
never a traceback, an out-of-memory kill or a silently shifted label (docs/RELIABILITY.md)."""

from __future__ import annotations

import io
import json
import os
import struct
import zlib
from pathlib import Path

import pytest
import tensorflow as tf
from PIL import Image

from components.ingest.errors import DataError
from components.ingest.headers import SizeLimits
from components.ingest.ingest import ingest
from components.ingest.listing import list_data
from components.ingest.selection import select_folder
from components.ingest.sources import MAX_LABEL


def _png(size=(8, 10), mode="L") -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, color=90).save(buffer, format="PNG")
    return buffer.getvalue()


def _tree(root: Path, per_class: int = 10) -> Path:
    for name in ("cat", "dog"):
        (root / name).mkdir(parents=True, exist_ok=True)
        for index in range(per_class):
            (root / name / f"{index}.png").write_bytes(_png())
    return root


def _huge_header_png(width: int, height: int) -> bytes:
    """A 1 kB PNG whose IHDR claims width x height gray pixels (a decompression bomb)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\0" * 1024)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def _ingest(root: Path, out: Path, **options) -> dict:
    ingest(str(root), str(out / "examples"), str(out / "quarantine.json"), **options)
    return json.loads((out / "quarantine.json").read_text())


def _one_line_naming(error: pytest.ExceptionInfo, *names: str) -> None:
    message = str(error.value)
    assert "\n" not in message
    for name in names:
        assert name in message, message


def test_dangling_symlink_is_refused_by_name_by_the_listing(tmp_path):
    root = _tree(tmp_path / "data")
    os.symlink(tmp_path / "gone.png", root / "cat" / "link.png")
    with pytest.raises(DataError, match="dangling symbolic link") as caught:
        list_data(root)
    _one_line_naming(caught, "cat/link.png")


def test_symlink_leaving_the_data_root_is_refused_by_name(tmp_path):
    root = _tree(tmp_path / "data")
    (tmp_path / "outside.png").write_bytes(_png())
    os.symlink(tmp_path / "outside.png", root / "dog" / "escape.png")
    os.symlink(root / "cat" / "0.png", root / "dog" / "inside.png")  # allowed: stays inside
    with pytest.raises(DataError, match="points outside the data root") as caught:
        list_data(root)
    _one_line_naming(caught, "dog/escape.png", str(tmp_path / "outside.png"))
    (root / "dog" / "escape.png").unlink()
    assert "dog/inside.png" in [listed.path for listed in list_data(root).files]


def test_non_utf8_file_name_is_refused_by_name(tmp_path):
    root = _tree(tmp_path / "data")
    with open(os.fsencode(root / "cat") + b"/caf\xe9.png", "wb") as handle:
        handle.write(_png())
    with pytest.raises(DataError, match="not valid UTF-8") as caught:
        list_data(root)
    _one_line_naming(caught, "caf\\xe9.png")


def test_a_file_removed_after_the_listing_is_quarantined_as_unreadable(tmp_path):
    # The run's one listing is what the Ingest reads: it never lists the folder again.
    root = _tree(tmp_path / "data")
    selection = select_folder(root)
    (root / "dog" / "3.png").unlink()
    (root / "dog" / "new.png").write_bytes(_png())  # arrived after the listing: next run
    ingest(selection, str(tmp_path / "examples"), str(tmp_path / "q.json"),
           max_bad_fraction=0.1)
    report = json.loads((tmp_path / "q.json").read_text())
    assert report["files"] == [{"path": "dog/3.png",
                                "reason": "unreadable file: No such file or directory"}]
    assert report["total"] == 20 and sum(report["split_counts"].values()) == 19


def test_class_folder_with_a_line_break_is_refused_so_labels_cannot_shift(tmp_path):
    root = _tree(tmp_path / "data")
    (root / "bad\nname").mkdir()
    (root / "bad\nname" / "0.png").write_bytes(_png())
    with pytest.raises(DataError, match="control character") as caught:
        list_data(root)
    _one_line_naming(caught, "'bad\\nname'")


def test_oversized_header_is_quarantined_without_decoding(tmp_path):
    root = _tree(tmp_path / "data")
    # 60000 x 60000 gray = 3.6 GB once decoded; the header check must stop it first.
    (root / "cat" / "bomb.png").write_bytes(_huge_header_png(60000, 60000))
    (root / "dog" / "big.png").write_bytes(_png(size=(40, 40)))
    report = _ingest(root, tmp_path / "out", max_bad_fraction=0.2,
                     limits=SizeLimits(max_pixels=1000))
    reasons = {entry["path"]: entry["reason"] for entry in report["files"]}
    assert set(reasons) == {"cat/bomb.png", "dog/big.png"}
    assert "data.max_pixels 1000" in reasons["cat/bomb.png"]
    assert reasons["dog/big.png"] == "image is 40x40 = 1600 pixels > data.max_pixels 1000"
    assert report["total"] == 22 and report["split_counts"]["train"] + \
        report["split_counts"]["eval"] == 20


def test_bomb_is_quarantined_at_the_default_limit_too(tmp_path):
    root = _tree(tmp_path / "data")
    (root / "cat" / "bomb.png").write_bytes(_huge_header_png(20000, 20000))
    report = _ingest(root, tmp_path / "out", max_bad_fraction=0.1)
    assert report["files"] == [{"path": "cat/bomb.png",
                                "reason": "image is 20000x20000 = 400000000 pixels > "
                                          "data.max_pixels 89478485"}]


def test_file_over_max_file_mb_is_quarantined_unread(tmp_path):
    root = _tree(tmp_path / "data")
    (root / "dog" / "large.png").write_bytes(_png() + b"\0" * 300_000)
    report = _ingest(root, tmp_path / "out", max_bad_fraction=0.1,
                     limits=SizeLimits(max_file_mb=0.25))
    assert report["files"] == [{"path": "dog/large.png",
                                "reason": "file is 0.3 MB > data.max_file_mb 0.25"}]


def test_the_header_pass_reads_ahead_every_file_but_one_over_max_file_mb(tmp_path,
                                                                          monkeypatch):
    """The kernel is asked (posix_fadvise WILLNEED, recorded here before it runs) to read
    the files ahead of the header check; a file quarantined unread is not among them."""
    root = _tree(tmp_path / "data")
    (root / "dog" / "large.png").write_bytes(_png() + b"\0" * 300_000)
    advised, real = [], os.posix_fadvise

    def record(fd, offset, length, advice):
        advised.append(os.fstat(fd).st_ino)
        return real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", record)
    _ingest(root, tmp_path / "out", max_bad_fraction=0.1, limits=SizeLimits(max_file_mb=0.25))
    files = [path for path in root.rglob("*.png")]
    assert sorted(advised) == sorted(path.stat().st_ino for path in files
                                     if path.name != "large.png")


def test_channels_auto_comes_from_the_headers(tmp_path):
    root = _tree(tmp_path / "data")
    _ingest(root, tmp_path / "gray")
    (root / "dog" / "color.png").write_bytes(_png(mode="RGB"))
    _ingest(root, tmp_path / "rgb")
    for out, channels in ((tmp_path / "gray", 1), (tmp_path / "rgb", 3)):
        shard = next((out / "examples" / "Split-train").glob("*.gz"))
        record = next(iter(tf.data.TFRecordDataset(str(shard), compression_type="GZIP")))
        example = tf.train.Example.FromString(record.numpy())
        assert example.features.feature["channels"].int64_list.value[0] == channels


def _records_dir(tmp_path: Path, labels_and_names: list[tuple[int, bytes | None]]) -> Path:
    folder = tmp_path / "records"
    folder.mkdir()
    with tf.io.TFRecordWriter(str(folder / "part-0.tfrecord")) as writer:
        for label, name in labels_and_names:
            feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[_png()])),
                       "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))}
            if name is not None:
                feature["label_name"] = tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[name]))
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
    return folder


def test_tfrecord_label_out_of_range_is_quarantined_not_a_huge_list(tmp_path):
    folder = _records_dir(tmp_path, [(i % 2, None) for i in range(20)] + [(2**40, None)])
    report = _ingest(folder, tmp_path / "out", max_bad_fraction=0.1)
    assert report["files"] == [{"path": "part-0.tfrecord#20",
                                "reason": f"label must be in [0, {MAX_LABEL}]. "
                                          f"Received: {2**40}"}]
    labels = json.loads((tmp_path / "out" / "examples" / "labels.json").read_text())
    assert labels == {"label_names": ["0", "1"]}


def test_tfrecord_label_name_with_a_line_break_is_refused(tmp_path):
    folder = _records_dir(tmp_path, [(0, b"cat"), (1, b"do\ng")] * 3)
    with pytest.raises(DataError, match="control character") as caught:
        _ingest(folder, tmp_path / "out")
    _one_line_naming(caught, "part-0.tfrecord")

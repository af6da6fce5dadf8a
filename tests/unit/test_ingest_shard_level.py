"""The Ingest deflates a shard only when deflate pays: photo bytes are stored, the rest shrink."""

from __future__ import annotations

import glob
import os

import numpy as np
import tensorflow as tf

from components.examples_format import COMPRESSION
from components.ingest.reader import DecodedImage
from components.ingest.writer import SplitWriters, build_example, example_record


def _write(tmp_path: str, payloads: list[bytes]) -> tuple[int, int, list[bytes]]:
    with SplitWriters(str(tmp_path), ["train"], shard_mb=64) as writers:
        for index, payload in enumerate(payloads):
            image = DecodedImage(index, payload, 8, 8, 3)
            writers.write("train", build_example(image, 0, "a", f"f{index}.jpg"))
    (shard,) = glob.glob(os.path.join(str(tmp_path), "Split-train", "*.gz"))
    records = [bytes(r.numpy()) for r in tf.data.TFRecordDataset(shard, COMPRESSION)]
    stored = [tf.train.Example.FromString(r).features.feature["image"].bytes_list.value[0]
              for r in records]
    return os.path.getsize(shard), sum(len(r) for r in records), stored


def test_incompressible_images_are_stored_and_read_back(tmp_path):
    rng = np.random.default_rng(0)
    # 1.6 MB: past the 1 MB sample
    payloads = [b"\xff\xd8\xff" + rng.bytes(20_000) for _ in range(80)]
    size, record_bytes, stored = _write(tmp_path, payloads)
    assert stored == payloads
    assert record_bytes <= size <= 1.01 * record_bytes + 1024


def test_compressible_images_are_deflated(tmp_path):
    # under the sample
    payloads = [b"\xff\xd8\xff" + bytes([index % 7]) * 20_000 for index in range(10)]
    size, record_bytes, stored = _write(tmp_path, payloads)
    assert stored == payloads
    assert size < 0.1 * record_bytes


def test_the_ingests_own_record_parses_to_the_example_protobuf_builds():
    """`example_record` writes the wire bytes itself (a fifth of protobuf's cost); every
    reader parses them to the same Example, whatever the sizes of the values."""
    rng = np.random.default_rng(1)
    for size, label, name, height in ((3, 0, "a", 1), (200, 7, "dahlia ✿", 224),
                                      (70_000, 65535, "x" * 300, 40_000)):
        png = b"\x89PNG" + rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        image = DecodedImage(0, png, height, 2**31, 3)
        expected = build_example(image, label, name, f"{name}/IMG_{size}.png")
        record = example_record(image, label, name, f"{name}/IMG_{size}.png")
        assert tf.train.Example.FromString(record) == expected
        parsed = tf.io.parse_single_example(record, {
            "image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64),
            "width": tf.io.FixedLenFeature([], tf.int64)})
        assert parsed["image"].numpy() == png and int(parsed["label"]) == label
        assert int(parsed["width"]) == 2**31

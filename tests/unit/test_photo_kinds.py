"""Each kind of file a photo folder holds, followed from the Ingest to the readers' decoder.

The Trainer, the serving signature (and so the Evaluator) and TF Lite's representative data
all decode stored bytes with `examples_format.decode_image` (the one decoder), so what it
gives for a stored image is what every one of them sees. These tests ingest one file of each
kind and check that decoder's pixels against what Pillow, an image viewer's library, shows
for the source file: the same within a JPEG decoder's rounding, alpha composited onto white,
16-bit scaled to 8, and no EXIF rotation (serving does not rotate either).
"""

from __future__ import annotations

import glob
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from components.examples_format import (
    FILENAME_KEY,
    IMAGE_KEY,
    decode_image,
    split_pattern,
)
from components.ingest.ingest import ingest
from tests.photo_kinds import KINDS, encoded, image

# libjpeg-turbo (TensorFlow) and Pillow's libjpeg round the inverse DCT differently.
JPEG_TOLERANCE = 4
_SUFFIX = {"jpeg": ".jpg", "png": ".png", "gif": ".gif", "bmp": ".bmp"}


def _file_name(kind: str) -> str:
    return kind.replace(" ", "_").replace("+", "_") + _SUFFIX[kind.split()[0]]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes], dict]:
    """One ingest of a folder holding one file of every kind (class `kinds`) and plain
    photos (class `other`); the stored bytes by file name, and the quarantine report."""
    root = tmp_path_factory.mktemp("data") / "photos"
    (root / "kinds").mkdir(parents=True)
    (root / "other").mkdir()
    for kind, make in KINDS.items():
        (root / "kinds" / _file_name(kind)).write_bytes(make())
    for index in range(12):
        (root / "other" / f"IMG_{index}.jpg").write_bytes(encoded(image("RGB"), "JPEG"))
    out = tmp_path_factory.mktemp("out")
    ingest(str(root), str(out / "examples"), str(out / "quarantine.json"))
    records = tf.data.TFRecordDataset(
        sorted(glob.glob(split_pattern(str(out / "examples"), "*"))), "GZIP")
    by_name = {}
    for record in records:
        features = tf.train.Example.FromString(record.numpy()).features.feature
        name = features[FILENAME_KEY].bytes_list.value[0].decode()
        by_name[os.path.basename(name)] = features[IMAGE_KEY].bytes_list.value[0]
    return root, by_name, json.loads((out / "quarantine.json").read_text())


def _as_viewed(data: bytes) -> np.ndarray:
    """The RGB pixels Pillow shows for a file: alpha composited onto white (as the Ingest
    does), 16-bit gray scaled to 8 bits (as TensorFlow's PNG decoder does)."""
    with Image.open(io.BytesIO(data)) as picture:
        if picture.mode == "I;16":
            gray = np.round(np.asarray(picture, dtype=np.float64) / 257.0)
            return np.repeat(gray[..., np.newaxis], 3, axis=-1)
        rgba = np.asarray(picture.convert("RGBA"), dtype=np.float64)
    alpha = rgba[..., 3:] / 255.0
    return np.round(rgba[..., :3] * alpha + 255.0 * (1.0 - alpha))


def test_every_kind_is_ingested_and_none_quarantined(stored):
    _, by_name, report = stored
    assert report["bad"] == 0, report["files"]
    assert {_file_name(kind) for kind in KINDS} <= set(by_name)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_readers_decoder_gives_the_pixels_a_viewer_shows(kind, stored):
    root, by_name, _ = stored
    source = (root / "kinds" / _file_name(kind)).read_bytes()
    pixels = decode_image(tf.constant(by_name[_file_name(kind)]), 3).numpy().astype(float)
    expected = _as_viewed(source)
    assert pixels.shape == expected.shape == (23, 37, 3)  # EXIF orientation 6: not rotated
    tolerance = JPEG_TOLERANCE if kind.startswith("jpeg") else 1
    assert np.abs(pixels - expected).max() <= tolerance


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_only_images_with_alpha_are_reencoded(kind, stored):
    root, by_name, _ = stored
    source = (root / "kinds" / _file_name(kind)).read_bytes()
    with Image.open(io.BytesIO(source)) as picture:
        has_alpha = "A" in picture.mode or "transparency" in picture.info
    kept = by_name[_file_name(kind)] == source
    # A palette with a transparent entry decodes as RGBA in TensorFlow: composited too.
    assert kept != has_alpha, (kind, picture.mode, picture.info.keys())

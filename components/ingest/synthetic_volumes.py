"""`synthetic:volumes`: small 3D volumes with voxel masks, for segmentation models (unet3d).

Each volume is D x H x W voxels of noise with one bright object, a cube or a sphere (its
class, so the ingest sees two labels), of random size and position; the mask marks the
object's voxels. It stands in for the seed's medical-imaging example (organs in CT
volumes) at a size a CPU trains in seconds.

The volumes are written as tf.Example TFRecords that the ingest reads unchanged (see
`components/examples_format.py`): `image` is a PNG of the D slices stacked vertically
([D*H, W], grayscale), `depth` is D, `mask` holds the D*H*W voxel labels (0/1, int64),
plus `label`, `label_name` and `filename`.

Example:

    folder = export_volumes(workspace / "data" / "volumes", per_class=50, shape=(16, 16, 16))
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from components.examples_format import (
    COMPRESSION,
    DEPTH_KEY,
    FILENAME_KEY,
    IMAGE_KEY,
    LABEL_KEY,
    LABEL_NAME_KEY,
    MASK_KEY,
)

DEFAULT_PER_CLASS = 100
CLASS_NAMES = ("cube", "sphere")
RECORDS_FILE = "volumes.tfrecord.gz"
_DONE_MARKER = ".export-complete"


def generate_volumes(
    count: int, shape: Sequence[int], seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns `count` volumes (uint8 [N, D, H, W]), masks (uint8 0/1) and labels (0 cube,
    1 sphere, alternating).

    Raises:
        ValueError: for a non-positive count or a side shorter than 8 voxels.
    """
    depth, height, width = (int(d) for d in shape)
    if count < 1 or min(depth, height, width) < 8:
        raise ValueError(
            f"need count >= 1 and every side >= 8. Received: count={count}, shape={tuple(shape)}"
        )
    rng = np.random.default_rng(seed)
    grid = np.stack(np.meshgrid(np.arange(depth), np.arange(height), np.arange(width),
                                indexing="ij"), axis=-1).astype(np.float32)
    sides = np.array([depth, height, width], dtype=np.float32)
    volumes = np.empty((count, depth, height, width), np.uint8)
    masks = np.empty((count, depth, height, width), np.uint8)
    labels = np.arange(count) % len(CLASS_NAMES)
    for i, label in enumerate(labels):
        radius = rng.uniform(0.2, 0.35) * sides.min()
        center = rng.uniform(radius + 1, sides - radius - 1)
        offset = np.abs(grid - center)
        if label == 0:
            inside = (offset <= radius).all(axis=-1)
        else:
            inside = np.sqrt((offset**2).sum(axis=-1)) <= radius
        background = rng.normal(60.0, 25.0, size=inside.shape)
        foreground = rng.normal(rng.uniform(150.0, 200.0), 25.0, size=inside.shape)
        volumes[i] = np.clip(np.where(inside, foreground, background), 0, 255).astype(np.uint8)
        masks[i] = inside
    return volumes, masks, labels


def export_volumes(
    destination: str | os.PathLike, per_class: int = 0, shape: Sequence[int] = (16, 16, 16)
) -> Path:
    """Writes `2 * per_class` volumes as TFRecords in `destination`; returns the folder.

    `per_class` 0 means `DEFAULT_PER_CLASS`. A folder already exported with the same count
    and shape is reused; the export goes to a temporary sibling first and is renamed into
    place, so a killed export never leaves a half-written data set.
    """
    import tensorflow as tf
    from PIL import Image

    per_class = int(per_class) or DEFAULT_PER_CLASS
    shape = tuple(int(d) for d in shape)
    destination = Path(destination)
    stamp = json.dumps({"per_class": per_class, "shape": list(shape)})
    marker = destination / _DONE_MARKER
    if marker.exists() and marker.read_text().strip() == stamp:
        return destination

    volumes, masks, labels = generate_volumes(per_class * len(CLASS_NAMES), shape)
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".volumes-", dir=destination.parent))
    depth, height, width = shape
    with tf.io.TFRecordWriter(str(staging / RECORDS_FILE), options=COMPRESSION) as writer:
        for index, (volume, mask, label) in enumerate(zip(volumes, masks, labels, strict=True)):
            png = _png_bytes(Image.fromarray(volume.reshape(depth * height, width), mode="L"))
            name = CLASS_NAMES[int(label)]
            feature = {
                IMAGE_KEY: _bytes_feature(png),
                LABEL_KEY: _int_feature([int(label)]),
                LABEL_NAME_KEY: _bytes_feature(name.encode()),
                FILENAME_KEY: _bytes_feature(f"{name}/volume_{index:04d}".encode()),
                DEPTH_KEY: _int_feature([depth]),
                MASK_KEY: _int_feature(mask.reshape(-1).astype(np.int64).tolist()),
            }
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
    (staging / _DONE_MARKER).write_text(stamp)
    if destination.exists():
        shutil.rmtree(destination)
    staging.rename(destination)
    return destination


def _png_bytes(image: object) -> bytes:
    import io

    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _bytes_feature(value: bytes):
    import tensorflow as tf

    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int_feature(values: list[int]):
    import tensorflow as tf

    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

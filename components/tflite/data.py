"""Read images and label names from the ingest `Examples` artifact.

The layout is the one in docs/INTERFACES.md ("Ingest output"): GZIP TFRecords of
`tf.train.Example` under `<uri>/Split-<split>/` with a PNG `image` and an int64 `label`,
and `<uri>/labels.json`.

Example:

    images, labels = load_split_images(examples.uri, "eval", (64, 64), 3, limit=500)
"""

from __future__ import annotations

import json
import os

import numpy as np
import tensorflow as tf

_FEATURES = {
    "image": tf.io.FixedLenFeature([], tf.string),
    "label": tf.io.FixedLenFeature([], tf.int64),
}


def split_files(examples_uri: str, split: str) -> list[str]:
    """Lists the GZIP TFRecord files of one split, sorted for a reproducible order.

    Raises:
        FileNotFoundError: when the split folder holds no `*.gz` file.
    """
    pattern = os.path.join(examples_uri, f"Split-{split}", "*.gz")
    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        raise FileNotFoundError(f"No TFRecord files match {pattern!r} (split {split!r}).")
    return files


def load_split_images(
    examples_uri: str,
    split: str,
    input_size: tuple[int, int],
    channels: int,
    limit: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Reads one split's images, resized to `input_size` and scaled to [0, 1].

    This is the input `predict_normalized` expects: bilinear resize, then division by 255,
    like the Trainer's in-graph preprocessing.

    Args:
        examples_uri: the Examples artifact's uri.
        split: split name, e.g. `"eval"` or `"train"`.
        input_size: `(height, width)` to resize to.
        channels: channels to decode the PNGs to (1 or 3).
        limit: read at most this many examples (in file order); None or 0 reads all.

    Returns:
        `(images, labels)`: float32 `[N, H, W, C]` and int64 `[N]`.

    Raises:
        FileNotFoundError: when the split has no files.
        ValueError: when the split has no examples.
    """
    height, width = input_size

    def decode(serialized: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        example = tf.io.parse_single_example(serialized, _FEATURES)
        image = tf.io.decode_png(example["image"], channels=channels)
        image = tf.cast(image, tf.float32) / 255.0
        image = tf.image.resize(image, (height, width), method="bilinear")
        # Bilinear resizing stays within the input range except for float round-off.
        return tf.clip_by_value(image, 0.0, 1.0), example["label"]

    files = split_files(examples_uri, split)
    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP")
    if limit:
        dataset = dataset.take(limit)
    dataset = dataset.map(decode, num_parallel_calls=tf.data.AUTOTUNE).batch(256)
    image_batches, label_batches = [], []
    for images, labels in dataset.as_numpy_iterator():
        image_batches.append(images)
        label_batches.append(labels)
    if not image_batches:
        raise ValueError(f"Split {split!r} of {examples_uri!r} has no examples in {files}.")
    return np.concatenate(image_batches), np.concatenate(label_batches).astype(np.int64)


def read_label_names(examples_uri: str) -> list[str]:
    """Reads the class names, in label index order, from `<examples_uri>/labels.json`.

    Raises:
        FileNotFoundError: when labels.json is missing.
        ValueError: when it has no `label_names` list of strings.
    """
    path = os.path.join(examples_uri, "labels.json")
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"Label names file {path!r} does not exist.")
    with tf.io.gfile.GFile(path) as f:
        content = json.load(f)
    names = content.get("label_names") if isinstance(content, dict) else None
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ValueError(
            f'{path!r} must hold {{"label_names": [str, ...]}}; received {content!r:.200}.'
        )
    return names

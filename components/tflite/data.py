"""Read images from the ingest `Examples` artifact, laid out as
`components/examples_format.py` says (docs/INTERFACES.md, "Ingest output"); the label
names are its `read_label_names`.

Example:

    images, labels = load_split_images(examples.uri, "eval", (64, 64), 3, limit=500)
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from components.examples_format import (
    COMPRESSION,
    IMAGE_KEY,
    LABEL_KEY,
    decode_image,
    parse_spec,
    split_pattern,
)


def split_files(examples_uri: str, split: str) -> list[str]:
    """Lists the GZIP TFRecord files of one split, sorted for a reproducible order.

    Raises:
        FileNotFoundError: when the split folder holds no `*.gz` file.
    """
    pattern = split_pattern(examples_uri, split)
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
        channels: channels to decode the stored images to (1 or 3).
        limit: read at most this many examples (in file order); None or 0 reads all.

    Returns:
        `(images, labels)`: float32 `[N, H, W, C]` and int64 `[N]`.

    Raises:
        FileNotFoundError: when the split has no files.
        ValueError: when the split has no examples.
    """
    height, width = input_size
    spec = parse_spec()

    def decode(serialized: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        example = tf.io.parse_single_example(serialized, spec)
        image = decode_image(example[IMAGE_KEY], channels)  # the Trainer's own decoder
        image = tf.cast(image, tf.float32) / 255.0
        image = tf.image.resize(image, (height, width), method="bilinear")
        # Bilinear resizing stays within the input range except for float round-off.
        return tf.clip_by_value(image, 0.0, 1.0), example[LABEL_KEY]

    files = split_files(examples_uri, split)
    dataset = tf.data.TFRecordDataset(files, compression_type=COMPRESSION)
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

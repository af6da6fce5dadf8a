"""The Examples format: what the Ingest writes and the Trainer, TF Lite and the bench read.

The one place that spells it (docs/INTERFACES.md, "Ingest output"):

    <examples_uri>/labels.json                                {"label_names": [...]}
    <examples_uri>/Split-<split>/data_tfrecord-00000-of-00004.gz    GZIP TFRecords, in
                                                              shards of about data.shard_mb

of `tf.train.Example` with the features named by the `*_KEY` constants below. A leaf:
it imports nothing from mptfx, and TensorFlow only inside the functions that need it, so
importing the names costs nothing.

Example:

    files = tf.io.gfile.glob(split_pattern(examples_uri, EVAL_SPLIT))
    dataset = tf.data.TFRecordDataset(files, compression_type=COMPRESSION)
    features = tf.io.parse_single_example(record, parse_spec())
    label_names = read_label_names(examples_uri)
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

# The features of one tf.train.Example.
IMAGE_KEY = "image"  # bytes: the file's own encoding (IMAGE_FORMAT_KEY); volumes: PNG of the
#                      D slices stacked vertically ([D*H, W, C])
IMAGE_FORMAT_KEY = "image_format"  # bytes: "jpeg", "png", "gif" or "bmp" (IMAGE_FORMATS)
LABEL_KEY = "label"  # int64: the class index, the position of its name in label_names
LABEL_NAME_KEY = "label_name"  # bytes: the class (folder) name
HEIGHT_KEY = "height"  # int64: of the stored image
WIDTH_KEY = "width"
CHANNELS_KEY = "channels"
FILENAME_KEY = "filename"  # bytes: the path relative to the data root
DEPTH_KEY = "depth"  # int64, volumes only: D
MASK_KEY = "mask"  # int64 list, volumes only: the D*H*W voxel labels (0/1)

# Split folders: TFX's own layout, `Split-<name>`, GZIP shards named as ExampleGen names them.
TRAIN_SPLIT = "train"
EVAL_SPLIT = "eval"
SPLIT_DIR_PREFIX = "Split-"
COMPRESSION = "GZIP"  # tf.io.TFRecordWriter options / TFRecordDataset compression_type
SHARD_PATTERN = "*.gz"
# A shard being written ends in ".partial" (not matched by SHARD_PATTERN) until the split is
# complete and it is renamed to its final `-of-<count>` name.
PARTIAL_SUFFIX = ".partial"
DEFAULT_SHARD_MB = 128.0  # data.shard_mb: serialized Example bytes per shard, about

# The encodings the readers decode (tf.io.decode_image), by their magic bytes.
IMAGE_FORMATS = {b"\xff\xd8\xff": "jpeg", b"\x89PNG": "png", b"GIF8": "gif", b"BM": "bmp"}

# The class names, in label index order, beside the split folders.
LABELS_FILE = "labels.json"
LABEL_NAMES_FIELD = "label_names"
MIN_LABEL_NAMES = 2


class LabelNamesMissing(FileNotFoundError, ValueError):
    """labels.json is not there (a ValueError too, as a bad Examples artifact is one)."""


def split_dir(examples_uri: str, split: str) -> str:
    """`<examples_uri>/Split-<split>`, the folder TFX readers look in."""
    return os.path.join(examples_uri, f"{SPLIT_DIR_PREFIX}{split}")


def split_pattern(examples_uri: str, split: str) -> str:
    """The glob of one split's TFRecord shards; `split="*"` matches every split."""
    return os.path.join(split_dir(examples_uri, split), SHARD_PATTERN)


def shard_name(index: int, count: int) -> str:
    """`data_tfrecord-00002-of-00004.gz`: shard `index` (from 0) of `count`."""
    return f"data_tfrecord-{index:05d}-of-{count:05d}.gz"


def image_format_of(data: bytes) -> str:
    """The IMAGE_FORMATS name of encoded image bytes.

    Raises:
        ValueError: when the bytes start with none of their signatures.
    """
    for magic, name in IMAGE_FORMATS.items():
        if data.startswith(magic):
            return name
    raise ValueError(f"Not a JPEG, PNG, GIF or BMP. Received: first bytes {data[:8]!r}")


def decode_image(encoded: object, channels: int) -> object:
    """Stored image bytes (any of IMAGE_FORMATS) → uint8 `[h, w, channels]`.

    The one decoder of the Trainer, the serving signature (and so the Evaluator) and TF
    Lite's representative data, so each sees the same pixels. Gray files become RGB by
    replicating the channel, as the Ingest does; a GIF gives its first frame. GIF and BMP
    (whose TensorFlow decoders give RGB only) become gray with `rgb_to_grayscale`.
    """
    import tensorflow as tf

    def codec() -> tf.Tensor:
        return tf.io.decode_image(encoded, channels=channels, expand_animations=False)

    if channels == 3:  # every codec decodes to RGB itself
        image = codec()
    else:
        # TensorFlow's GIF and BMP decoders give only RGB (BMP also RGBA): convert from it.
        def from_rgb() -> tf.Tensor:
            rgb = tf.io.decode_image(encoded, channels=3, expand_animations=False)
            if channels == 1:
                return tf.image.rgb_to_grayscale(rgb)
            return tf.concat([rgb, tf.fill(tf.concat([tf.shape(rgb)[:2], [1]], 0),
                                           tf.constant(255, tf.uint8))], axis=-1)

        head = tf.strings.substr(encoded, 0, 3)
        rgb_only = tf.logical_or(tf.equal(head, b"GIF"),
                                 tf.equal(tf.strings.substr(encoded, 0, 2), b"BM"))
        image = tf.cond(rgb_only, from_rgb, codec)
    image.set_shape([None, None, channels])
    return image


def labels_path(examples_uri: str) -> str:
    """`<examples_uri>/labels.json`."""
    return os.path.join(examples_uri, LABELS_FILE)


def examples_uri_of(train_files: Sequence[str]) -> str:
    """The Examples uri above the `Split-train` folder of the first pattern of
    `fn_args.train_files` (e.g. `<examples_uri>/Split-train/*`).

    Raises:
        ValueError: naming the patterns when no `Split-train` folder is on that path.
    """
    train_dir = f"{SPLIT_DIR_PREFIX}{TRAIN_SPLIT}"
    folder = train_files[0] if train_files else ""
    while os.path.basename(folder) != train_dir:
        parent = os.path.dirname(folder)
        if parent == folder:
            raise ValueError(
                f"No {train_dir} folder in the first train file pattern. "
                f"Received: train_files={list(train_files)}"
            )
        folder = parent
    return os.path.dirname(folder)


def parse_spec(*, label: bool = True, mask_voxels: int | None = None) -> dict:
    """The tf.io feature spec of the readers: `image` always, `label` unless `label=False`,
    and `mask` (`mask_voxels` int64 values) for volumes."""
    import tensorflow as tf

    spec = {IMAGE_KEY: tf.io.FixedLenFeature([], tf.string)}
    if label:
        spec[LABEL_KEY] = tf.io.FixedLenFeature([], tf.int64)
    if mask_voxels is not None:
        spec[MASK_KEY] = tf.io.FixedLenFeature([mask_voxels], tf.int64)
    return spec


def read_label_names(examples_uri: str) -> list[str]:
    """Reads the class names, in label index order, from `<examples_uri>/labels.json`.

    The Trainer finds `examples_uri` with `examples_uri_of(fn_args.train_files)`.

    Raises:
        LabelNamesMissing: (a FileNotFoundError and a ValueError) naming the path when the
            file is missing.
        ValueError: when it does not hold `label_names`, a list of at least 2 names.
    """
    import tensorflow as tf  # tf.io.gfile: the Examples may live in any filesystem TF reads

    path = labels_path(examples_uri)
    if not tf.io.gfile.exists(path):
        raise LabelNamesMissing(f"{LABELS_FILE} not found. Received: path={path}")
    with tf.io.gfile.GFile(path) as f:
        content = json.load(f)
    label_names = content.get(LABEL_NAMES_FIELD) if isinstance(content, dict) else None
    if not isinstance(label_names, list) or len(label_names) < MIN_LABEL_NAMES:
        raise ValueError(
            f"{LABELS_FILE} needs '{LABEL_NAMES_FIELD}' with at least {MIN_LABEL_NAMES} "
            f"names. Received: label_names={label_names!r} in {path}"
        )
    return [str(name) for name in label_names]

"""tf.data input from the ingest Examples: GZIP TFRecord shards of tf.Example whose images
are their files' own bytes (JPEG, PNG, GIF, BMP; `examples_format.decode_image`).

Reads interleave the shards; a multi-worker Trainer gives each worker its own shards when
a split has at least as many files as workers (FILE sharding), else every worker reads all
files and keeps its share of the examples (DATA), and the log says which. Training may
augment (`trainer.augment`): a horizontal flip, or random-resized-crop (scale 0.08-1,
aspect 3/4-4/3; JPEGs decode only the crop) then a flip. Evaluation and serving use the
same deterministic resize.

Training and serving share `preprocess_images` (and `preprocess_volumes`), so a served
image goes through exactly the resize/normalisation the model was trained on.

Volumes (segmentation, e.g. `synthetic:volumes`) are stored the same way: the `image` PNG
holds the D slices stacked vertically ([D*H, W, C]), the int64 `depth` feature is D, and
the int64 list `mask` holds the D*H*W voxel labels (0 background, 1 foreground).

Example:

    dataset = make_dataset(fn_args.train_files, input_size=(16, 16), channels=1,
                           batch_size=32, shuffle=True, seed=42)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf
from absl import logging

from components import examples_format
from components.examples_format import (
    CHANNELS_KEY,
    COMPRESSION,
    DEPTH_KEY,
    HEIGHT_KEY,
    IMAGE_KEY,
    LABEL_KEY,
    MASK_KEY,
    WIDTH_KEY,
    parse_spec,
)

# Decoded examples are kept in memory when they take at most this much (trainer.cache_max_mb).
from components.trainer.config import DEFAULT_CACHE_MAX_MB
from models.choice import ImageProfile

_SHUFFLE_BUFFER = 10_000  # examples; the digits set fits whole
_PARSE_BATCH = 64  # records parsed by one parse_example
AUGMENTS = ("none", "flip", "crop_flip")
# Models of small images that `augment: auto` leaves unaugmented.
SMALL_IMAGE_MODELS = ("seed_cnn",)
# Random-resized-crop as the Keras and NVIDIA ResNet-50 references sample it.
_CROP_AREA = (0.08, 1.0)
_CROP_ASPECT = (3 / 4, 4 / 3)


def list_files(file_patterns: Sequence[str]) -> list[str]:
    """Returns the sorted files matched by `file_patterns`.

    Raises:
        ValueError: naming the patterns if they match no file.
    """
    files = sorted({f for pattern in file_patterns for f in tf.io.gfile.glob(pattern)})
    if not files:
        raise ValueError(f"No files match. Received: file_patterns={list(file_patterns)}")
    return files


def read_channels(file_patterns: Sequence[str]) -> int:
    """Returns the `channels` feature of the first example in `file_patterns`."""
    return _first_example_int(file_patterns, CHANNELS_KEY)


def read_volume_shape(file_patterns: Sequence[str]) -> tuple[int, int, int]:
    """Returns (depth, height, width) of the first example's volume.

    Raises:
        ValueError: naming the file if the example has no `depth` feature (it is not a
            volume) or the stored image height is not a multiple of the depth.
    """
    depth = _first_example_int(file_patterns, DEPTH_KEY)
    stacked_height = _first_example_int(file_patterns, HEIGHT_KEY)
    width = _first_example_int(file_patterns, WIDTH_KEY)
    if depth < 1 or stacked_height % depth:
        raise ValueError(
            f"A volume's image height must be depth x slice height. Received: "
            f"height={stacked_height}, depth={depth} in {list_files(file_patterns)[0]}"
        )
    return depth, stacked_height // depth, width


def _first_example_int(file_patterns: Sequence[str], key: str) -> int:
    files = list_files(file_patterns)
    for record in tf.data.TFRecordDataset(files[:1], compression_type=COMPRESSION).take(1):
        example = tf.train.Example.FromString(record.numpy())
        values = example.features.feature[key].int64_list.value
        if values:
            return int(values[0])
        raise ValueError(f"First example has no '{key}' feature. Received: {files[0]}")
    raise ValueError(f"No examples in the first file. Received: {files[0]}")


def read_image_profile(file_patterns: Sequence[str]) -> ImageProfile:
    """The stored images' count, median height and width, and channels, from the `height`,
    `width`, `channels` and `depth` features the Ingest wrote with every example (a volume's
    height is its slices stacked: divided by its depth)."""
    import numpy as np

    spec = {key: tf.io.FixedLenFeature([], tf.int64, default_value=0)
            for key in (HEIGHT_KEY, WIDTH_KEY, CHANNELS_KEY, DEPTH_KEY)}
    dataset = tf.data.TFRecordDataset(list_files(file_patterns), compression_type=COMPRESSION)
    columns: dict[str, list] = {key: [] for key in spec}
    for batch in dataset.batch(4096).map(lambda records: tf.io.parse_example(records, spec)):
        for key in spec:
            columns[key].append(batch[key].numpy())
    values = {key: np.concatenate(parts) if parts else np.zeros(0, np.int64)
              for key, parts in columns.items()}
    count = len(values[HEIGHT_KEY])
    if not count:
        raise ValueError(f"No examples. Received: file_patterns={list(file_patterns)}")
    depth = values[DEPTH_KEY]
    volumes = bool(depth.max() > 0)
    heights = values[HEIGHT_KEY] // np.maximum(depth, 1) if volumes else values[HEIGHT_KEY]
    return ImageProfile(images=count, height=int(np.median(heights)),
                        width=int(np.median(values[WIDTH_KEY])),
                        channels=int(np.max(values[CHANNELS_KEY])), volumes=volumes)


def count_examples(file_patterns: Sequence[str]) -> int:
    """Counts the records in `file_patterns` (reads them without decoding)."""
    dataset = tf.data.TFRecordDataset(list_files(file_patterns), compression_type=COMPRESSION)
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))


def decode_image(encoded: tf.Tensor, channels: int) -> tf.Tensor:
    """Decodes one stored image (JPEG, PNG, GIF or BMP) to uint8 [h, w, channels]: the
    Examples format's own decoder (`examples_format.decode_image`)."""
    return examples_format.decode_image(encoded, channels)


def preprocess_images(images: tf.Tensor, input_size: Sequence[int]) -> tf.Tensor:
    """uint8 images ([h, w, c] or [n, h, w, c]) -> float32 in [0, 1] at `input_size`.

    Images already at `input_size` are only scaled: a bilinear resize to the same size is
    the identity, so skipping it (and the clip it needs) gives the same values at a third
    of the memory passes.
    """
    height, width = int(input_size[0]), int(input_size[1])

    def resized() -> tf.Tensor:
        scaled = tf.image.convert_image_dtype(images, tf.float32)
        return tf.clip_by_value(tf.image.resize(scaled, [height, width]), 0.0, 1.0)

    shape = tf.shape(images)
    same = tf.logical_and(tf.equal(shape[-3], height), tf.equal(shape[-2], width))
    result = tf.cond(same, lambda: tf.image.convert_image_dtype(images, tf.float32), resized)
    result.set_shape(images.shape[:-3].concatenate([height, width])
                     .concatenate(images.shape[-1:]))
    return result


def random_resized_crop(encoded: tf.Tensor, channels: int, seed: int) -> tf.Tensor:
    """A random crop of the stored image (area 8-100 %, aspect 3/4-4/3) as uint8 [h, w, c].

    A JPEG decodes only the crop (`decode_and_crop_jpeg`); other formats decode, then slice.
    """
    whole = tf.constant([[[0.0, 0.0, 1.0, 1.0]]])

    def window(shape: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            shape, whole, seed=seed, min_object_covered=0.0,
            aspect_ratio_range=_CROP_ASPECT, area_range=_CROP_AREA, max_attempts=10,
            use_image_if_no_bounding_boxes=True)
        return begin, size

    def jpeg() -> tf.Tensor:
        begin, size = window(tf.image.extract_jpeg_shape(encoded))
        crop = tf.stack([begin[0], begin[1], size[0], size[1]])
        return tf.io.decode_and_crop_jpeg(encoded, crop, channels=channels)

    def other() -> tf.Tensor:
        image = decode_image(encoded, channels)
        begin, size = window(tf.shape(image))
        return tf.slice(image, begin, size)

    if channels not in (1, 3):
        return other()
    image = tf.cond(tf.io.is_jpeg(encoded), jpeg, other)
    image.set_shape([None, None, channels])
    return image


def check_augment(augment: str) -> str:
    """`augment` if it is one of AUGMENTS.

    Raises:
        ValueError: naming trainer.augment otherwise.
    """
    if augment not in AUGMENTS:
        raise ValueError(f"trainer.augment must be one of {list(AUGMENTS)}. "
                         f"Received: augment={augment!r}")
    return augment


def resolve_augment(augment: str, model_name: str, channels: int) -> str:
    """trainer.augment as trained: "auto" is crop_flip for colour images (photos) unless the
    model is the seed CNN (digits-sized images), else none; any other value as given
    (checked)."""
    if augment == "auto":
        return "crop_flip" if channels == 3 and model_name not in SMALL_IMAGE_MODELS else "none"
    return check_augment(augment)


def worker_files(files: Sequence[str], workers: tuple[int, int] | None) -> list[str] | None:
    """The files worker `index` of `count` reads alone (`workers=(count, index)`), or None
    when every worker must read all of them (one worker, or fewer files than workers)."""
    if workers is None or workers[0] <= 1 or len(files) < workers[0]:
        return None
    count, index = workers
    return list(files[index::count])


def preprocess_volumes(stacked: tf.Tensor, depth: int) -> tf.Tensor:
    """uint8 stacked slices ([D*H, W, C] or [n, D*H, W, C]) -> float32 [.., D, H, W, C]
    in [0, 1]."""
    volumes = tf.image.convert_image_dtype(stacked, tf.float32)
    shape = tf.shape(volumes)
    height = shape[-3] // depth
    new_shape = tf.concat([shape[:-3], [depth, height], shape[-2:]], axis=0)
    return tf.reshape(volumes, new_shape)


def make_dataset(
    file_patterns: Sequence[str],
    input_size: Sequence[int],
    channels: int,
    batch_size: int,
    shuffle: bool,
    seed: int = 42,
    num_examples: int | None = None,
    repeat: bool = False,
    cache_max_mb: float = DEFAULT_CACHE_MAX_MB,
    augment: str = "none",
    workers: tuple[int, int] | None = None,
) -> tf.data.Dataset:
    """Returns batches of (float32 images [b, H, W, C] in [0, 1], int64 labels [b]).

    Args:
        file_patterns: `fn_args.train_files` or `fn_args.eval_files`.
        input_size: [H, W] the model expects.
        channels: 1, 3 or 4; PNGs are converted to it.
        batch_size: the global batch size.
        shuffle: shuffle with `seed`, reshuffled every epoch (training only).
        num_examples: the record count, if known (`count_examples`); it tells Keras the
            steps per epoch up front, and a wrong count fails loudly.
        repeat: repeat forever (multi-worker training, where every worker must run the
            same number of steps: pass `steps_per_epoch` to fit).
        cache_max_mb: when `num_examples` is known and the decoded float32 examples take
            at most this many MB, they are decoded once and kept in memory, and later
            epochs only shuffle and batch them; otherwise every epoch reads and decodes
            the files again. 0 never caches.
        augment: training only (`shuffle=True`): "none", "flip" (random horizontal flip)
            or "crop_flip" (random-resized-crop, then flip; never cached).
        workers: `(count, index)` of a multi-worker Trainer: see `worker_files`.
    """
    if channels not in (1, 3, 4):
        raise ValueError(f"channels must be 1, 3 or 4. Received: channels={channels}")
    augment = check_augment(augment) if shuffle else "none"
    spec = parse_spec()
    size = [int(input_size[0]), int(input_size[1])]

    def parse(features: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        if augment == "crop_flip":
            image = random_resized_crop(features[IMAGE_KEY], channels, seed)
        else:
            image = decode_image(features[IMAGE_KEY], channels)
        return preprocess_images(image, size), features[LABEL_KEY]

    def flip(image: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return tf.image.random_flip_left_right(image, seed=seed), label

    example_bytes = 4 * size[0] * size[1] * channels + 8
    if augment == "crop_flip":
        cache_max_mb = 0  # a new crop every epoch
    return _batched(file_patterns, spec, parse, example_bytes, batch_size, shuffle, seed,
                    num_examples, repeat, cache_max_mb,
                    augment=flip if augment != "none" else None, workers=workers)


def make_volume_dataset(
    file_patterns: Sequence[str],
    volume_shape: Sequence[int],
    channels: int,
    batch_size: int,
    shuffle: bool,
    seed: int = 42,
    num_examples: int | None = None,
    repeat: bool = False,
    cache_max_mb: float = DEFAULT_CACHE_MAX_MB,
    workers: tuple[int, int] | None = None,
) -> tf.data.Dataset:
    """Returns batches of (float32 volumes [b, D, H, W, C] in [0, 1], float32 masks
    [b, D, H, W, 1] of 0/1); the other arguments are those of `make_dataset`."""
    depth, height, width = (int(d) for d in volume_shape)
    spec = parse_spec(label=False, mask_voxels=depth * height * width)

    def parse(features: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        stacked = decode_image(features[IMAGE_KEY], channels)
        volume = preprocess_volumes(stacked, depth)
        volume = tf.ensure_shape(volume, [depth, height, width, channels])
        mask = tf.reshape(tf.cast(features[MASK_KEY], tf.float32), [depth, height, width, 1])
        return volume, mask

    example_bytes = 4 * depth * height * width * (channels + 1)
    return _batched(file_patterns, spec, parse, example_bytes, batch_size, shuffle, seed,
                    num_examples, repeat, cache_max_mb, workers=workers)


def _batched(
    file_patterns: Sequence[str],
    spec: dict,
    parse: Callable[[dict[str, tf.Tensor]], tuple[tf.Tensor, tf.Tensor]],
    example_bytes: int,
    batch_size: int,
    shuffle: bool,
    seed: int,
    num_examples: int | None,
    repeat: bool,
    cache_max_mb: float,
    augment: Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]] | None = None,
    workers: tuple[int, int] | None = None,
) -> tf.data.Dataset:
    """Read -> parse `spec` (batched) -> (cache: `parse` once, keep in memory ->) shuffle
    -> repeat -> `parse` (decode) -> augment -> batch.

    The records' features are parsed `_PARSE_BATCH` at a time (`parse_example`, much
    cheaper per record than one `parse_single_example` each) and unbatched again, in
    order, so the data order is the one per-record parsing gives. The cache is used when
    `num_examples` parsed examples of `example_bytes` each fit in `cache_max_mb`. Without
    it the encoded images are shuffled (cheap to hold) and decoded every epoch; with it
    the decoded examples are shuffled, so each epoch still sees a new order. A worker that
    reads only its own files counts their examples itself.
    """
    if cache_max_mb < 0:
        raise ValueError(f"cache_max_mb must be >= 0. Received: cache_max_mb={cache_max_mb}")
    files = list_files(file_patterns)
    own_files = worker_files(files, workers)
    policy = tf.data.experimental.AutoShardPolicy.DATA
    if workers is not None and workers[0] > 1:
        how = "FILE" if own_files is not None else "DATA"
        logging.info(
            "Multi-worker input: %d files for %d workers, sharded by %s: worker %d reads %s",
            len(files), workers[0], how, workers[1],
            f"{len(own_files)} of them" if own_files is not None
            else f"every file and keeps 1/{workers[0]} of the examples")
    if own_files is not None:
        files = own_files
        num_examples = count_examples(files)
        policy = tf.data.experimental.AutoShardPolicy.OFF  # already this worker's share
    cache = num_examples is not None and num_examples * example_bytes <= cache_max_mb * 2**20
    dataset = tf.data.TFRecordDataset(
        files,
        compression_type=COMPRESSION,
        num_parallel_reads=min(len(files), 16) if len(files) > 1 else None,
    )
    dataset = dataset.batch(_PARSE_BATCH).map(
        lambda records: tf.io.parse_example(records, spec)).unbatch()
    if num_examples is not None:
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(num_examples))
    if cache:
        dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE).cache()
    if shuffle:
        dataset = dataset.shuffle(_SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    if not cache:
        dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    if augment is not None:
        dataset = dataset.map(augment, num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = policy
    # deterministic stays on (TensorFlow's default): the same seed gives the same order.
    return dataset.with_options(options)

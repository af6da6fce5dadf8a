"""Validate images with tf.data, and keep each file's own bytes unless its pixels must change.

bytes → decode (to validate, and to read the shape) → the file's bytes as they are; only an
image whose stored pixels differ from the file's (alpha composited onto white, RGB turned
gray, a `data.image_size` resize) is re-encoded: JPEG (`jpeg_quality`) when the file was a
JPEG, PNG otherwise. A JPEG photo stays the JPEG the camera wrote, as TFX's ExampleGen and
ImageNet's conversion scripts keep it.

The pipeline takes a dataset of `(index, encoded image bytes)` (or of file paths, read in
the same step) and validates them `_DECODE_BATCH` at a time: one parallel map call decodes a
small batch in a loop. Per image, each hand-over between tf.data's threads costs a wake-up
on another core, which on a 2-vCPU VM cost 20 % more CPU per photo on 2 cores than on 1;
batched, tf.data's read -> decode_jpeg ran 6,500-6,700 photos/s on 2 cores where a map per
photo ran 4,600-5,300 (measured 2026-12-04, AMD EPYC 2 vCPU). A batch with one undecodable
image fails whole and `Dataset.ignore_errors` drops it, which keeps the map fast but forgets
which element failed. The caller therefore sees which indices are missing from the output
and gives each of those few to `decode_one`, which decodes it alone: the batch's good images
are stored as the pipeline would have stored them, the bad one gets its reason.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import tensorflow as tf

from components.core.text import one_line

RESIZE_METHODS = ("stretch", "pad")
CHANNEL_CHOICES = ("auto", "1", "3")
UNDECODABLE = "not a decodable image (PNG/JPEG/BMP/GIF)"

# The map functions hold no Python control flow on tensors (every branch is a tf.cond or a
# Python value of the policy), so AutoGraph has nothing to convert; converting them anyway
# cost 0.7-0.8 s per ingest (its AST transforms), 40 % of a 2,000-photo ingest on 2 cores.
_as_written = tf.autograph.experimental.do_not_convert
# Images a map call decodes in one loop. Small, so a failing image sends few good ones
# down the slow path (`decode_one`); large enough that hand-overs cost little per image.
_DECODE_BATCH = 16
_PREFETCH_BATCHES = 16
# Autotuning off, parallelism set to the cores: with it on, deleting the iterator at the end
# of an ingest waited for tf.data's autotuning thread (py-spy: the main thread in
# ~LogicalThreadWrapper under RootDataset::Iterator::~Iterator), whose wake-ups grow to
# seconds apart: 20,000 photos on 2 cores took 10.4 s in 4 of 6 runs, 5.9-6.4 s in the
# others; with it off, 5.7-7.3 s in 12 of 12. Every map gets the cores this process may use:
# the decode is CPU-bound, and so are reads from local disks and the page cache.
_WITHOUT_AUTOTUNE = tf.data.Options()
_WITHOUT_AUTOTUNE.autotune.enabled = False

@dataclass(frozen=True)
class ImagePolicy:
    """How every stored image is shaped.

    `channels` is 1 (grayscale) or 3 (RGB). Alpha is dropped by compositing onto white, since
    transparent pixels of icons and scans are meant to show the paper, not black.
    `image_size` None keeps each image's own size; `(height, width)` resizes with bilinear
    interpolation, either stretching (`"stretch"`) or keeping the aspect ratio and padding with
    black (`"pad"`).
    """

    channels: int = 3
    image_size: tuple[int, int] | None = None
    resize_method: str = "stretch"
    jpeg_quality: int = 95  # for the JPEGs that must be re-encoded (data.jpeg_quality)

    def __post_init__(self) -> None:
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError(
                f"jpeg_quality must be in [1, 100]. Received: jpeg_quality={self.jpeg_quality!r}"
            )
        if self.channels not in (1, 3):
            raise ValueError(f"channels must be 1 or 3. Received: channels={self.channels!r}")
        if self.resize_method not in RESIZE_METHODS:
            raise ValueError(
                f"resize_method must be one of {RESIZE_METHODS}. "
                f"Received: resize_method={self.resize_method!r}"
            )


@dataclass(frozen=True)
class DecodedImage:
    """One successfully decoded image, ready to store: `encoded` is the file's own bytes, or
    its re-encoding when `reencoded`."""

    index: int
    encoded: bytes
    height: int
    width: int
    channels: int
    reencoded: bool = False


def parse_image_size(text: str) -> tuple[int, int] | None:
    """Parse the JSON parameter `"null"` or `"[height, width]"` (positive ints)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    if value is None:
        return None
    valid = (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(side, int) and not isinstance(side, bool) and side > 0 for side in value)
    )
    if not valid:
        raise ValueError(f"image_size must be null or [height, width]. Received: {text!r}")
    return value[0], value[1]


def resolve_channels(requested: str, native_channels: Iterable[int]) -> int:
    """The stored channel count: `"1"`/`"3"` as asked; `"auto"` is 1 only if every image is gray.

    Gray-with-alpha (2 channels) counts as gray.
    """
    if requested not in CHANNEL_CHOICES:
        raise ValueError(f"channels must be one of {CHANNEL_CHOICES}. Received: {requested!r}")
    if requested != "auto":
        return int(requested)
    return 1 if all(count <= 2 for count in native_channels) else 3


def skip_indices(dataset: tf.data.Dataset, skip: Sequence[bool]) -> tf.data.Dataset:
    """Drop the `(index, ...)` elements whose `skip[index]` is true, before they are read:
    files the header check quarantined must never reach a decoder."""
    if not any(skip):
        return dataset
    mask = tf.constant(list(skip), dtype=tf.bool)
    return dataset.filter(lambda index, *_: tf.logical_not(tf.gather(mask, index)))


def parallel_calls() -> int:
    """The cores this process may run on: the parallelism of every map of the Ingest."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1


def _decode(data: tf.Tensor) -> tf.Tensor:
    # expand_animations=False turns a GIF into its first frame, so every image is 3-D.
    return tf.io.decode_image(data, channels=0, dtype=tf.uint8, expand_animations=False)


def _drop_alpha(image: tf.Tensor) -> tf.Tensor:
    """uint8 image without alpha: 2 (gray+alpha) and 4 (RGBA) channels composite onto white.

    Only images with alpha pass through float32; the others stay uint8, so a large image
    costs no 4-byte-per-pixel copy.
    """

    def composite() -> tf.Tensor:
        pixels = tf.cast(image, tf.float32)
        alpha = pixels[..., -1:] / 255.0
        flat = pixels[..., :-1] * alpha + 255.0 * (1.0 - alpha)
        return tf.cast(tf.clip_by_value(tf.round(flat), 0.0, 255.0), tf.uint8)

    return tf.cond(tf.shape(image)[-1] % 2 == 0, composite, lambda: image)


def _to_channels(pixels: tf.Tensor, channels: int) -> tf.Tensor:
    is_gray = tf.shape(pixels)[-1] == 1
    if channels == 3:
        converted = tf.cond(is_gray, lambda: tf.tile(pixels, [1, 1, 3]), lambda: pixels)
    else:
        # rgb_to_grayscale works in float and rounds back to the input's uint8.
        converted = tf.cond(
            is_gray, lambda: pixels, lambda: tf.image.rgb_to_grayscale(pixels[..., :3])
        )
    return tf.ensure_shape(converted, [None, None, channels])


def _resize(pixels: tf.Tensor, policy: ImagePolicy) -> tf.Tensor:
    if policy.image_size is None:
        return pixels
    height, width = policy.image_size
    # antialias keeps large photos from aliasing when they shrink to a small training size.
    if policy.resize_method == "pad":
        return tf.image.resize_with_pad(pixels, height, width, antialias=True)
    return tf.image.resize(pixels, [height, width], method="bilinear", antialias=True)


def _pixels(decoded: tf.Tensor, policy: ImagePolicy) -> tf.Tensor:
    """Decoded uint8 image → the stored pixels (channels, then size, of the policy)."""
    image = _to_channels(_drop_alpha(decoded), policy.channels)
    if policy.image_size is not None:
        resized = _resize(tf.cast(image, tf.float32), policy)
        image = tf.cast(tf.clip_by_value(tf.round(resized), 0.0, 255.0), tf.uint8)
    return image


def _must_reencode(decoded: tf.Tensor, policy: ImagePolicy) -> tf.Tensor:
    """True when the readers' `decode_image(bytes, channels)` would not give the stored pixels:
    alpha (readers drop it, the ingest composites it onto white), RGB stored as gray (the
    ingest's rounding, not the codec's), or a resize. Gray files stored as RGB are kept: the
    codecs replicate the gray channel exactly as the ingest does."""
    if policy.image_size is not None:
        return tf.constant(True)
    native = tf.shape(decoded)[-1]
    has_alpha = native % 2 == 0
    return tf.logical_or(has_alpha, tf.logical_and(policy.channels == 1, native >= 3))


def _encode(data: tf.Tensor, policy: ImagePolicy) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Encoded bytes → (bytes to store, stored shape, re-encoded?)."""
    decoded = _decode(data)
    image = _pixels(decoded, policy)
    reencode = _must_reencode(decoded, policy)

    def reencoded() -> tf.Tensor:
        return tf.cond(
            tf.io.is_jpeg(data),
            lambda: tf.io.encode_jpeg(image, quality=policy.jpeg_quality),
            lambda: tf.io.encode_png(image),
        )

    stored = tf.cond(reencode, reencoded, lambda: data)
    return stored, tf.shape(image, out_type=tf.int64), reencode


_STORED_SIGNATURE = (tf.TensorSpec([], tf.string), tf.TensorSpec([3], tf.int64),
                     tf.TensorSpec([], tf.bool))


def decode_images(source: tf.data.Dataset, policy: ImagePolicy, *,
                  read_paths: bool = False) -> Iterator[DecodedImage]:
    """Validate each `(index, bytes)` element (`read_paths`: `(index, path)`, the file read
    here) and yield the bytes to store, in order. An element that fails takes the rest of
    its batch (`_DECODE_BATCH`) with it: the caller gives the missing indices to
    `decode_one`."""

    def encode_one(data: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        return _encode(tf.io.read_file(data) if read_paths else data, policy)

    def encode(indices: tf.Tensor, data: tf.Tensor) -> tuple[tf.Tensor, ...]:
        # One thread decodes the batch in order (parallel_iterations=1): the parallelism is
        # the map's, across batches.
        stored, shapes, reencoded = tf.map_fn(_as_written(encode_one), data,
                                              fn_output_signature=_STORED_SIGNATURE,
                                              parallel_iterations=1)
        return indices, stored, shapes, reencoded

    decoded = (
        source.batch(_DECODE_BATCH)
        .map(_as_written(encode), num_parallel_calls=parallel_calls())
        .ignore_errors(log_warning=False)
        .prefetch(_PREFETCH_BATCHES)
        .with_options(_WITHOUT_AUTOTUNE)
    )
    for indices, stored, shapes, reencoded in decoded.as_numpy_iterator():
        for index, data, shape, again in zip(indices.tolist(), stored, shapes.tolist(),
                                             reencoded.tolist(), strict=True):
            height, width, channels = shape
            yield DecodedImage(index, data, height, width, channels, again)


@functools.lru_cache(maxsize=8)
def _one_image_encoder(policy: ImagePolicy) -> Callable[[tf.Tensor], tuple[tf.Tensor, ...]]:
    # Traced once per policy: the same ops as the pipeline, so the same stored bytes.
    return tf.function(_as_written(lambda data: _encode(data, policy)),
                       input_signature=[tf.TensorSpec([], tf.string)])


def decode_one(index: int, data: bytes, policy: ImagePolicy) -> DecodedImage | str:
    """One element as `decode_images` stores it, or why it cannot be stored (one line)."""
    try:
        stored, shape, again = _one_image_encoder(policy)(tf.constant(data))
    except tf.errors.OpError:
        return describe_decode_failure(data, policy)
    height, width, channels = shape.numpy().tolist()
    return DecodedImage(index, stored.numpy(), height, width, channels, bool(again))


def describe_decode_failure(data: bytes, policy: ImagePolicy) -> str:
    """Why `data` does not make it through the pipeline, as one line for the quarantine report."""
    if not data:
        return "empty file (0 bytes)"
    try:
        decoded = _decode(tf.constant(data))
    except tf.errors.OpError as error:
        return f"{UNDECODABLE}: {one_line(error)}"
    try:
        _pixels(decoded, policy)  # the decoded pixels, not a second decode
    except tf.errors.OpError as error:
        return f"decoded but could not be converted: {one_line(error)}"
    return "dropped by the tf.data pipeline (it decodes on its own; please report this file)"

"""Write the Examples layout TFX's own ExampleGen writes (components/examples_format.py),
plus labels.json and quarantine.json.

Each split is written as GZIP shards of about `shard_mb` MB of serialized Examples, so the
Trainer reads several files in parallel and a multi-worker Trainer gives each worker its own
files. A shard is written as `<name>.partial` and renamed to `data_tfrecord-<i>-of-<n>.gz`
once its split is complete: a killed Ingest leaves no file a reader would take as whole.

Deflate cannot shrink what is already compressed (JPEG photos), yet it is the slowest step
of such an ingest. So each shard's first MB of records is tried with zlib first
(`shard_options`): a shard whose sample deflate saves under 10 % of (JPEGs: 3-4 %) is
written as GZIP of stored (level 0) deflate blocks: the same GZIP file format every reader
reads, at a small fraction of the CPU; every other shard keeps zlib's default level.
"""

from __future__ import annotations

import functools
import json
import os
import zlib
from collections.abc import Iterable
from types import TracebackType

import tensorflow as tf

from components.examples_format import (
    CHANNELS_KEY,
    COMPRESSION,
    DEFAULT_SHARD_MB,
    FILENAME_KEY,
    HEIGHT_KEY,
    IMAGE_FORMAT_KEY,
    IMAGE_KEY,
    LABEL_KEY,
    LABEL_NAME_KEY,
    PARTIAL_SUFFIX,
    WIDTH_KEY,
    image_format_of,
    shard_name,
    split_dir,
)
from components.ingest.reader import DecodedImage

_SAMPLE_BYTES = 2**20  # the records of a shard that pick its deflate level
_STORE_BELOW_SAVING = 0.10  # deflate saving less than this of the sample: stored blocks


def shard_options(sample: bytes) -> tf.io.TFRecordOptions:
    """The GZIP options of a shard whose first records are `sample`: deflate level 0
    (stored blocks) when level 1 saves less than 10 % of the sample, else zlib's default."""
    saving = 1.0 - len(zlib.compress(sample, 1)) / len(sample) if sample else 1.0
    level = 0 if saving < _STORE_BELOW_SAVING else None
    return tf.io.TFRecordOptions(compression_type=COMPRESSION, compression_level=level)


def _set_bytes(example: tf.train.Example, name: str, value: bytes) -> None:
    feature = example.features.feature[name]
    feature.Clear()
    feature.bytes_list.value.append(value)


def _set_int(example: tf.train.Example, name: str, value: int) -> None:
    feature = example.features.feature[name]
    feature.Clear()
    feature.int64_list.value.append(value)


def build_example(
    image: DecodedImage,
    label: int,
    label_name: str,
    filename: str,
    base: tf.train.Example | None = None,
) -> tf.train.Example:
    """The contract's tf.Example; other features of `base` (a TFRecord input) are kept."""
    example = tf.train.Example()
    if base is not None:
        example.CopyFrom(base)
    _set_bytes(example, IMAGE_KEY, image.encoded)
    _set_bytes(example, IMAGE_FORMAT_KEY, image_format_of(image.encoded).encode("ascii"))
    _set_int(example, LABEL_KEY, label)
    _set_bytes(example, LABEL_NAME_KEY, label_name.encode("utf-8"))
    _set_int(example, HEIGHT_KEY, image.height)
    _set_int(example, WIDTH_KEY, image.width)
    _set_int(example, CHANNELS_KEY, image.channels)
    _set_bytes(example, FILENAME_KEY, filename.encode("utf-8"))
    return example


_ONE_BYTE = [bytes((value,)) for value in range(0x80)]


def _varint(value: int) -> bytes:
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _entry_head(name: bytes, feature_head: bytes, value_length: int) -> bytes:
    """Everything of one `Features.feature` map entry before its value's bytes: the entry
    (field 1) holds the key (1) and the Feature (2), whose list holds the value."""
    feature_length = len(feature_head) + value_length
    entry = b"\x0a" + _varint(len(name)) + name + b"\x12" + _varint(feature_length)
    return b"\x0a" + _varint(len(entry) + feature_length) + entry + feature_head


def _bytes_head(name: bytes, value: bytes) -> bytes:
    # Feature.bytes_list (1) -> BytesList.value (1): the value's bytes follow.
    inner = b"\x0a" + _varint(len(value))
    return _entry_head(name, b"\x0a" + _varint(len(inner) + len(value)) + inner, len(value))


def _int_entry(name: bytes, value: int) -> bytes:
    # Feature.int64_list (3) -> Int64List.value (1), packed; a negative int64 is written as
    # its 64-bit two's complement, as protobuf writes it.
    packed = _varint(value if value >= 0 else value + (1 << 64))
    inner = b"\x0a" + _varint(len(packed)) + packed
    return _entry_head(name, b"\x1a" + _varint(len(inner)) + inner, 0)


def _bytes_entry(name: bytes, value: bytes) -> bytes:
    return _bytes_head(name, value) + value


@functools.lru_cache(maxsize=4096)
def _class_entries(label: int, label_name: str, image_format: str, channels: int) -> bytes:
    """The entries every image of one class and format shares, serialized once."""
    return (_int_entry(LABEL_KEY.encode(), label)
            + _bytes_entry(LABEL_NAME_KEY.encode(), label_name.encode("utf-8"))
            + _bytes_entry(IMAGE_FORMAT_KEY.encode(), image_format.encode())
            + _int_entry(CHANNELS_KEY.encode(), channels))


def example_record(
    image: DecodedImage,
    label: int,
    label_name: str,
    filename: str,
    base: tf.train.Example | None = None,
) -> bytes:
    """`build_example(...).SerializeToString()`: the serialized Example the writers store.

    Without `base`, the bytes are put together here, the image's bytes copied once and the
    entries a class shares serialized once: building and serializing the protobuf message
    took 36 us a photo on the AVX2 EPYC, this 15 us, in the Ingest's one Python thread, which the
    decode threads do not share. It parses to the message `build_example` makes
    (tests/unit/test_ingest_shard_level.py).
    """
    if base is not None:
        return build_example(image, label, label_name, filename, base).SerializeToString()
    image_head = _bytes_head(_IMAGE_NAME, image.encoded)
    rest = b"".join((
        _class_entries(label, label_name, image_format_of(image.encoded), image.channels),
        _int_entry(_HEIGHT_NAME, image.height),
        _int_entry(_WIDTH_NAME, image.width),
        _bytes_entry(_FILENAME_NAME, filename.encode("utf-8")),
    ))
    features_length = len(image_head) + len(image.encoded) + len(rest)
    # Example.features (1), then Features' entries.
    return b"".join((b"\x0a", _varint(features_length), image_head, image.encoded, rest))


_IMAGE_NAME, _HEIGHT_NAME = IMAGE_KEY.encode(), HEIGHT_KEY.encode()
_WIDTH_NAME, _FILENAME_NAME = WIDTH_KEY.encode(), FILENAME_KEY.encode()


class SplitWriters:
    """GZIP TFRecord shards of about `shard_mb` MB per split; counts what it wrote.

    >>> with SplitWriters(uri, ["train", "eval"], shard_mb=128) as writers:
    ...     writers.write("train", example)
    """

    def __init__(self, examples_dir: str, split_names: Iterable[str],
                 shard_mb: float = DEFAULT_SHARD_MB):
        if not shard_mb > 0:
            raise ValueError(f"shard_mb must be > 0. Received: shard_mb={shard_mb!r}")
        self.counts = {name: 0 for name in split_names}
        self._dirs = {name: split_dir(examples_dir, name) for name in self.counts}
        self._shard_bytes = shard_mb * 2**20
        self._writers: dict[str, tf.io.TFRecordWriter | None] = {}
        self._written: dict[str, float] = {}  # bytes in the split's open shard
        self._partials: dict[str, list[str]] = {name: [] for name in self.counts}
        # The open shard's first records, held until they choose its options.
        self._pending: dict[str, list[bytes]] = {}

    def __enter__(self) -> SplitWriters:
        for name, folder in self._dirs.items():
            tf.io.gfile.makedirs(folder)
            self._open_shard(name)
        return self

    def _open_shard(self, split: str) -> None:
        index = len(self._partials[split])
        path = f"{self._dirs[split]}/shard-{index:05d}{PARTIAL_SUFFIX}"
        self._partials[split].append(path)
        self._writers[split] = None
        self._pending[split] = []
        self._written[split] = 0

    def _start_writer(self, split: str) -> tf.io.TFRecordWriter:
        pending = self._pending[split]
        writer = tf.io.TFRecordWriter(self._partials[split][-1],
                                      options=shard_options(b"".join(pending)))
        for record in pending:
            writer.write(record)
        self._writers[split], self._pending[split] = writer, []
        return writer

    def _close_shard(self, split: str) -> None:
        (self._writers[split] or self._start_writer(split)).close()

    def write(self, split: str, example: tf.train.Example) -> None:
        """Append `example` to the open shard of `split`, starting a new one when full."""
        self.write_record(split, example.SerializeToString())

    def write_record(self, split: str, record: bytes) -> None:
        """Append a serialized Example (`example_record`) to the open shard of `split`."""
        if self._written[split] and self._written[split] + len(record) > self._shard_bytes:
            self._close_shard(split)
            self._open_shard(split)
        writer = self._writers[split]
        if writer is not None:
            writer.write(record)
        else:
            self._pending[split].append(record)
            if self._written[split] + len(record) >= _SAMPLE_BYTES:
                self._start_writer(split)
        self._written[split] += len(record)
        self.counts[split] += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for split in self._writers:
            self._close_shard(split)
        if exc_type is not None:
            return  # the .partial files stay behind, matched by no reader
        for split, partials in self._partials.items():
            for index, path in enumerate(partials):
                final = f"{self._dirs[split]}/{shard_name(index, len(partials))}"
                tf.io.gfile.rename(path, final, overwrite=True)

    def shard_counts(self) -> dict[str, int]:
        """The number of shards of each split."""
        return {split: len(partials) for split, partials in self._partials.items()}


def write_json(path: str, content: dict) -> None:
    """Write `content` as indented JSON; `path` may be any tf.io.gfile URI."""
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path, "w") as handle:
        handle.write(json.dumps(content, indent=2) + "\n")

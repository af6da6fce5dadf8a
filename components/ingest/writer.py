"""Write the Examples layout TFX's own ExampleGen writes (components/examples_format.py),
plus labels.json and quarantine.json."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from types import TracebackType

import tensorflow as tf

from components.examples_format import (
    CHANNELS_KEY,
    COMPRESSION,
    FILENAME_KEY,
    HEIGHT_KEY,
    IMAGE_KEY,
    LABEL_KEY,
    LABEL_NAME_KEY,
    WIDTH_KEY,
    shard_path,
)
from components.ingest.reader import DecodedImage


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
    _set_bytes(example, IMAGE_KEY, image.png)
    _set_int(example, LABEL_KEY, label)
    _set_bytes(example, LABEL_NAME_KEY, label_name.encode("utf-8"))
    _set_int(example, HEIGHT_KEY, image.height)
    _set_int(example, WIDTH_KEY, image.width)
    _set_int(example, CHANNELS_KEY, image.channels)
    _set_bytes(example, FILENAME_KEY, filename.encode("utf-8"))
    return example


class SplitWriters:
    """One GZIP TFRecord shard per split; counts what it wrote.

    >>> with SplitWriters(uri, ["train", "eval"]) as writers:
    ...     writers.write("train", example)
    """

    def __init__(self, examples_dir: str, split_names: Iterable[str]):
        self.counts = {name: 0 for name in split_names}
        self._paths = {name: shard_path(examples_dir, name) for name in self.counts}
        self._writers: dict[str, tf.io.TFRecordWriter] = {}

    def __enter__(self) -> SplitWriters:
        for name, path in self._paths.items():
            tf.io.gfile.makedirs(os.path.dirname(path))
            self._writers[name] = tf.io.TFRecordWriter(path, options=COMPRESSION)
        return self

    def write(self, split: str, example: tf.train.Example) -> None:
        """Append `example` to the shard of `split`."""
        self._writers[split].write(example.SerializeToString())
        self.counts[split] += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for writer in self._writers.values():
            writer.close()


def write_json(path: str, content: dict) -> None:
    """Write `content` as indented JSON; `path` may be any tf.io.gfile URI."""
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path, "w") as handle:
        handle.write(json.dumps(content, indent=2) + "\n")

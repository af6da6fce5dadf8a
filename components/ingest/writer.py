"""Write the Examples layout TFX's own ExampleGen writes, plus labels.json and quarantine.json."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from types import TracebackType

import tensorflow as tf

from components.ingest.reader import DecodedImage

SHARD_NAME = "data_tfrecord-00000-of-00001.gz"


def split_dir(examples_dir: str, split: str) -> str:
    """`<examples_dir>/Split-<split>`, the folder TFX readers look in."""
    return os.path.join(examples_dir, f"Split-{split}")


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
    _set_bytes(example, "image", image.png)
    _set_int(example, "label", label)
    _set_bytes(example, "label_name", label_name.encode("utf-8"))
    _set_int(example, "height", image.height)
    _set_int(example, "width", image.width)
    _set_int(example, "channels", image.channels)
    _set_bytes(example, "filename", filename.encode("utf-8"))
    return example


class SplitWriters:
    """One GZIP TFRecord shard per split; counts what it wrote.

    >>> with SplitWriters(uri, ["train", "eval"]) as writers:
    ...     writers.write("train", example)
    """

    def __init__(self, examples_dir: str, split_names: Iterable[str]):
        self.counts = {name: 0 for name in split_names}
        self._paths = {
            name: os.path.join(split_dir(examples_dir, name), SHARD_NAME) for name in self.counts
        }
        self._writers: dict[str, tf.io.TFRecordWriter] = {}

    def __enter__(self) -> SplitWriters:
        for name, path in self._paths.items():
            tf.io.gfile.makedirs(os.path.dirname(path))
            self._writers[name] = tf.io.TFRecordWriter(path, options="GZIP")
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

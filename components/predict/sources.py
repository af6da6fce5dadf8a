"""What `mptfx predict` reads, in order: image files and TFRecord files of tf.Examples.

    sources = plan_sources(["photos/", "extra.jpg"], files_from=None)
    for source in sources:            # FileSource (a run of image files) or RecordSource
        ...

A folder is walked in sorted order, hidden files and folders left out; a file whose name
contains `tfrecord` (`*.tfrecord`, `*.tfrecord.gz`, the Ingest's `data_tfrecord-*.gz`) is a
TFRecord of tf.Examples (GZIP when its first bytes say so), any other file an image. Only
the names are listed up front; images and records are read while the model runs.

Each source gives tf.data its `(index, payload)` elements (a file's path, or a record's
bytes); an element the pipeline drops (it could not be read or decoded) leaves a gap in the
indices of its results, and `dropped` describes what is in that gap, so it becomes a row
with its reason instead of vanishing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from components.core.text import one_line
from components.examples_format import FILENAME_KEY, IMAGE_KEY, image_format_of

TFRECORD_MARK = "tfrecord"
GZIP_MAGIC = b"\x1f\x8b"


class InputError(ValueError):
    """An input named on the command line cannot be used; nothing was predicted."""


@dataclass
class FileSource:
    """A run of image files, predicted in the order given."""

    paths: list[str]

    @property
    def count(self) -> int | None:
        """How many images it holds (known up front)."""
        return len(self.paths)

    def elements(self) -> Any:
        """A tf.data.Dataset of `(index, path)` in order."""
        import tensorflow as tf

        return tf.data.Dataset.from_tensor_slices(
            (tf.range(len(self.paths), dtype=tf.int64), self.paths))

    def dropped(self, start: int, stop: int | None, channels: int
                ) -> Iterator[tuple[str, str]]:
        """(row name, reason) of the files from `start` to `stop` (None: the last), which
        the pipeline dropped."""
        for path in self.paths[start:stop]:
            yield path, describe_file(path, channels)


@dataclass
class RecordSource:
    """One TFRecord file of tf.Examples (the Ingest's format: the image's file in `image`,
    its name in `filename`); a record without `filename` is named `<path>#<record>`.

    The pipeline reads the file in tf.data; a record it drops is read again here, alone,
    to say why, and after the pipeline ends the file is read on from its last answered
    record to its end (in TensorFlow, without decoding) so that records dropped at the
    end, and a file cut short, are reported too.
    """

    path: str
    _cursor: Any = field(default=None, repr=False)
    _position: int = 0

    @property
    def count(self) -> int | None:
        """Unknown until read."""
        return None

    @property
    def compression(self) -> str:
        """"GZIP" when the file starts as gzip does, else "" (uncompressed)."""
        with open(self.path, "rb") as handle:
            return "GZIP" if handle.read(2) == GZIP_MAGIC else ""

    def elements(self) -> Any:
        """A tf.data.Dataset of `(index, record)` in order."""
        import tensorflow as tf

        return tf.data.TFRecordDataset(self.path, compression_type=self.compression).enumerate()

    def name_of(self, index: int) -> str:
        """A record's row name when it carries no `filename`."""
        return f"{self.path}#{index}"

    def _records_from(self, start: int) -> Iterator[tuple[int, bytes]]:
        """(index, record) from `start` on, reading forward from where the last call
        stopped (or afresh, skipping in TensorFlow, when `start` is behind it)."""
        import tensorflow as tf

        if self._cursor is None or start < self._position:
            dataset = tf.data.TFRecordDataset(self.path, compression_type=self.compression)
            self._cursor, self._position = dataset.skip(start).as_numpy_iterator(), start
        for record in self._cursor:  # on from where the last call left it
            self._position += 1
            if self._position > start:
                yield self._position - 1, record

    def dropped(self, start: int, stop: int | None, channels: int
                ) -> Iterator[tuple[str, str]]:
        """(row name, reason) of the records from `start` to `stop` (None: the end of the
        file, and the file itself when it is cut short or corrupt)."""
        import tensorflow as tf

        read = start
        try:
            for index, record in self._records_from(start):
                if stop is not None and index >= stop:
                    break
                yield self.describe(index, record, channels)
                read = index + 1
        except tf.errors.OpError as error:
            yield self.path, (f"truncated or corrupt TFRecord after {read} records "
                              f"({one_line(error, limit=200)}); the records before it were "
                              f"read")
        finally:
            if stop is None:
                self._cursor = None

    def describe(self, index: int, record: bytes, channels: int) -> tuple[str, str]:
        """(row name, reason) of a record the pipeline dropped."""
        from google.protobuf.message import DecodeError
        from tensorflow.core.example import example_pb2

        try:
            features = example_pb2.Example.FromString(record).features.feature
        except DecodeError:
            return self.name_of(index), "a record that is not a tf.Example"
        name = features[FILENAME_KEY].bytes_list.value[:1] if FILENAME_KEY in features else []
        images = features[IMAGE_KEY].bytes_list.value if IMAGE_KEY in features else []
        row_name = name[0].decode("utf-8", "replace") if name else self.name_of(index)
        if not images:
            return row_name, f"a tf.Example without an '{IMAGE_KEY}' feature"
        return row_name, describe_image(images[0], channels)


Source = FileSource | RecordSource


def is_tfrecord(path: str) -> bool:
    """Whether `path` is read as a TFRecord of tf.Examples (by its name)."""
    return TFRECORD_MARK in os.path.basename(path).lower()


def _walk(folder: str) -> Iterator[str]:
    """Every file under `folder` in sorted order, hidden names left out."""
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.startswith("."):
                yield os.path.join(root, name)


def _listed(files_from: str) -> list[str]:
    """The paths of a list file (one per line, blank lines skipped; `-`: stdin)."""
    import sys

    try:
        if files_from == "-":
            lines = sys.stdin.read().splitlines()
        else:
            with open(files_from, encoding="utf-8") as handle:
                lines = handle.read().splitlines()
    except OSError as error:
        raise InputError(f"--files-from {files_from}: {error.strerror}") from None
    return [line.strip() for line in lines if line.strip()]


def plan_sources(paths: Sequence[str], files_from: str | None = None) -> list[Source]:
    """The sources of `paths` (files and folders, in the order given) then of the list in
    `files_from`; consecutive image files make one FileSource.

    Raises:
        InputError: naming a path given on the command line that does not exist, or a
            list that cannot be read, or when nothing at all is to be read.
    """
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            files.extend(_walk(path))
        elif os.path.exists(path):
            files.append(path)
        else:
            raise InputError(f"{path}: no such file or folder")
    if files_from is not None:
        files.extend(_listed(files_from))  # a missing listed file is a row of its own
    if not files:
        shown = ", ".join([*paths, *([f"--files-from {files_from}"] if files_from else [])])
        raise InputError(f"nothing to predict: no files in {shown or 'the input'}")
    sources: list[Source] = []
    for path in files:
        if is_tfrecord(path) and os.path.isfile(path):
            sources.append(RecordSource(path))
        elif sources and isinstance(sources[-1], FileSource):
            sources[-1].paths.append(path)
        else:
            sources.append(FileSource([path]))
    return sources


def describe_image(data: bytes, channels: int) -> str:
    """Why encoded bytes give no image for the model, in one line."""
    if not data:
        return "empty file (0 bytes)"
    try:
        encoding = image_format_of(data)
    except ValueError:
        return f"not an image: not a JPEG, PNG, GIF or BMP (first bytes {data[:8]!r})"
    import tensorflow as tf

    from components.examples_format import decode_image

    try:
        decode_image(tf.constant(data), channels)
    except tf.errors.OpError as error:
        return f"undecodable {encoding.upper()}: {one_line(error, limit=200)}"
    return f"a {encoding.upper()} the pipeline dropped although it decodes alone (please report)"


def describe_file(path: str, channels: int) -> str:
    """Why the file at `path` gives no image for the model, in one line."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        return f"cannot read: {error.strerror or one_line(error)}"
    return describe_image(data, channels)

"""Where images come from: a class-folder tree, or existing tf.Example TFRecord files.

Both sources offer the same three things to the writer: a tf.data dataset of
`(index, encoded image bytes)` (a folder: of file paths, `read_paths`) for the decode
pipeline, the per-element metadata in the same index order (`items()`), and an element's
bytes again (`item_data`) for one the batched decode did not return.
Both check every image's header first (`headers.py`): an element over the size limits is
quarantined with the reason and never reaches the decoder, and the headers' channel
counts answer `channels: auto` without a decode pass.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf
from google.protobuf.message import DecodeError

from components.core.text import one_line
from components.examples_format import FILENAME_KEY, IMAGE_KEY, LABEL_KEY, LABEL_NAME_KEY
from components.ingest.errors import DataError
from components.ingest.headers import HeaderCheck, HeaderPass, SizeLimits, check_bytes
from components.ingest.listing import ImageListing
from components.ingest.reader import parallel_calls, skip_indices

# Class indices become the width of the Trainer's output layer and lines of labels.txt;
# a record claiming label 2**40 must not make either that large.
MAX_LABEL = 65535
# Files handed to tf.data at a time, once the header pass has checked them all.
_CHECKED_CHUNK = 256


@dataclass(frozen=True)
class SourceItem:
    """One input element; `problem` set means it is quarantined whatever its image is."""

    path: str  # what the quarantine report shows, relative to the data root
    split_key: str | bytes  # hashed to pick the split
    filename: str
    label: int = -1
    label_name: str = ""
    problem: str | None = None
    example: tf.train.Example | None = field(default=None, compare=False)


class FolderSource:
    """The images of an `ImageListing` (listing.py); the split key is the relative path."""

    read_paths = True  # dataset() gives paths: the decode reads each file in the same step

    def __init__(self, listing: ImageListing, limits: SizeLimits | None = None):
        self.listing = listing
        self.label_names = list(listing.label_names)
        self.description = f"image folder {listing.root}"
        self.ignored = list(listing.ignored)
        self._paths = [os.path.join(listing.root, f) for f in listing.files]
        self._limits = limits or SizeLimits()
        self._header_pass: HeaderPass | None = None

    @property
    def _headers(self) -> HeaderPass:
        # Started on first use, on its own thread; the decode follows it (dataset()). The
        # Beam engine's driver only plans shards from the listing and never starts it.
        if self._header_pass is None:
            self._header_pass = HeaderPass(self._paths, self._limits)
        return self._header_pass

    def __len__(self) -> int:
        return len(self.listing.files)

    def dataset(self) -> tf.data.Dataset:
        """`(index, file path)` of the files whose header passed, handed over
        `_CHECKED_CHUNK` at a time as the header pass checks them: a refused file never
        reaches a decoder, and the decode need not wait for the last header."""
        paths, headers = self._paths, self._headers

        def checked() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for start in range(0, len(paths), _CHECKED_CHUNK):
                stop = min(start + _CHECKED_CHUNK, len(paths))
                checks = headers.checks(start, stop)
                kept = [start + offset for offset, check in enumerate(checks)
                        if check.problem is None]
                yield (np.asarray(kept, dtype=np.int64),
                       np.asarray([paths[index].encode("utf-8") for index in kept],
                                  dtype=object))
                if start + len(checks) < stop:
                    return  # the pass was stopped

        listed = tf.data.Dataset.from_generator(checked, output_signature=(
            tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.string)))
        return listed.unbatch()

    def native_channels(self) -> Iterator[int]:
        """The decoded channel count of every file whose header passed, as the header pass
        finds them (`resolve_channels` stops at the first colour image)."""
        return self._headers.channels()

    def items(self) -> Iterator[SourceItem]:
        """One item per listed file, in index order."""
        rows = zip(self.listing.files, self.listing.labels, strict=True)
        for index, (relative, label) in enumerate(rows):
            yield SourceItem(
                path=relative,
                split_key=relative,
                filename=relative,
                label=label,
                label_name=self.label_names[label],
                problem=self._headers.check(index).problem,
            )

    def close(self) -> None:
        """Stops the header pass if it is still running."""
        if self._header_pass is not None:
            self._header_pass.stop()

    def item_data(self, index: int, item: SourceItem) -> bytes | str:
        """The file's bytes, for an item the batched decode did not return; or why it
        cannot be read."""
        try:
            with open(self._paths[index], "rb") as handle:
                return handle.read()
        except OSError as error:
            return f"unreadable file: {error.strerror or error}"


def _known_channels(headers: list[HeaderCheck]) -> list[int]:
    return [h.channels for h in headers if h.problem is None and h.channels is not None]


def _check_label_name(name: str, label: int, where: str) -> str:
    # A line break in a name would shift every following line of labels.txt.
    if any(not char.isprintable() for char in name):
        raise DataError(f"label_name {name!r} of label {label} ({where}) has a control "
                        "character (e.g. a line break)")
    return name


def _compression(path: str) -> str:
    """ "GZIP" when the file starts with the gzip magic bytes, whatever its name says (an
    input file's compression: TF's name for gzip, not the Examples' own setting)."""
    with tf.io.gfile.GFile(path, "rb") as handle:
        return "GZIP" if handle.read(2) == b"\x1f\x8b" else ""


def _single_bytes(example: tf.train.Example, name: str) -> bytes | None:
    feature = example.features.feature.get(name)
    if feature is None or feature.WhichOneof("kind") != "bytes_list":
        return None
    values = feature.bytes_list.value
    return values[0] if len(values) == 1 else None


def _check_record(example: tf.train.Example) -> str | None:
    """The reason a parsed record cannot be used, or None."""
    if _single_bytes(example, IMAGE_KEY) is None:
        return f"missing required feature '{IMAGE_KEY}' (one bytes value)"
    label = example.features.feature.get(LABEL_KEY)
    is_int64 = label is not None and label.WhichOneof("kind") == "int64_list"
    if not is_int64 or len(label.int64_list.value) != 1:
        return f"missing required feature '{LABEL_KEY}' (one int64 value)"
    if not 0 <= label.int64_list.value[0] <= MAX_LABEL:
        return f"label must be in [0, {MAX_LABEL}]. Received: {label.int64_list.value[0]}"
    return None


class TFRecordSource:
    """tf.Example records (GZIP or not, detected per file) holding `image` and `label`.

    Missing `label_name` / `filename` are filled in (`str(label)`, `<file>#<record index>`);
    `height`/`width`/`channels`/`image` are always rewritten from the decode pipeline so they
    describe the stored image. The split key is `filename` when the record has one, otherwise
    the record's bytes.
    """

    read_paths = False  # dataset() gives the images' bytes

    def __init__(self, files: list[str], limits: SizeLimits | None = None):
        self.files = files
        self.description = f"{len(files)} TFRecord files in {os.path.dirname(files[0])}"
        self.ignored: list[str] = []
        self._limits = limits or SizeLimits()
        self._headers: list[HeaderCheck] = []
        self._compression = {path: _compression(path) for path in files}
        self._count, names = self._scan()
        self.label_names = [names.get(label, str(label)) for label in range(max(names) + 1)]

    def _records(self) -> Iterator[tuple[str, int, bytes]]:
        for path in self.files:
            dataset = tf.data.TFRecordDataset(path, compression_type=self._compression[path])
            position = 0
            try:
                for record in dataset.as_numpy_iterator():
                    yield path, position, record
                    position += 1
            except tf.errors.OpError as error:
                raise DataError(f"TFRecord file {path} is corrupt after record {position}: "
                                f"{one_line(error)}") from None

    def _scan(self) -> tuple[int, dict[int, str]]:
        """Count the records and learn each label's name, refusing contradictory names."""
        count = 0
        names: dict[int, str | None] = {}
        for path, position, record in self._records():
            count += 1
            example = self._parse(record)
            if example is None or _check_record(example) is not None:
                self._headers.append(HeaderCheck())
                continue  # quarantined later, with its reason
            self._headers.append(check_bytes(_single_bytes(example, IMAGE_KEY), self._limits))
            label = example.features.feature[LABEL_KEY].int64_list.value[0]
            name = _single_bytes(example, LABEL_NAME_KEY)
            name = name.decode("utf-8", "replace") if name is not None else None
            if name is not None:
                _check_label_name(name, label, f"record {position} of {path}")
            known = names.get(label)
            if known is not None and name is not None and name != known:
                raise DataError(
                    f"label {label} is named both '{known}' and '{name}' "
                    f"(record {position} of {path})"
                )
            names[label] = known or name
        folder = os.path.dirname(self.files[0])
        if count == 0:
            raise DataError(f"the TFRecord files in {folder} hold no records")
        if len(names) < 2:
            raise DataError(
                f"the TFRecord files in {folder} hold {len(names)} usable label(s); "
                "a classifier needs at least 2"
            )
        return count, {label: name or str(label) for label, name in names.items()}

    @staticmethod
    def _parse(record: bytes) -> tf.train.Example | None:
        try:
            return tf.train.Example.FromString(record)
        except DecodeError:
            return None

    def __len__(self) -> int:
        return self._count

    def dataset(self) -> tf.data.Dataset:
        """`(index, image bytes)` parsed from the records by tf.data."""
        datasets = [
            tf.data.TFRecordDataset(path, compression_type=self._compression[path])
            for path in self.files
        ]
        records = functools.reduce(lambda first, second: first.concatenate(second), datasets)

        def image_bytes(index: tf.Tensor, record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            spec = {IMAGE_KEY: tf.io.FixedLenFeature([], tf.string, default_value="")}
            return index, tf.io.parse_single_example(record, spec)[IMAGE_KEY]

        skip = [bool(header.problem) for header in self._headers]
        return skip_indices(records.enumerate(), skip).map(
            tf.autograph.experimental.do_not_convert(image_bytes),
            num_parallel_calls=parallel_calls())

    def native_channels(self) -> list[int]:
        """The decoded channel count of every usable record whose header passed."""
        return _known_channels(self._headers)

    def items(self) -> Iterator[SourceItem]:
        """One item per record, in index order, carrying the parsed record."""
        for index, (path, position, record) in enumerate(self._records()):
            where = f"{os.path.basename(path)}#{position}"
            example = self._parse(record)
            if example is None:
                yield SourceItem(where, record, where, problem="not a serialized tf.train.Example")
                continue
            problem = _check_record(example) or self._headers[index].problem
            filename = _single_bytes(example, FILENAME_KEY)
            filename = filename.decode("utf-8", "replace") if filename is not None else None
            label = -1 if _check_record(example) else \
                example.features.feature[LABEL_KEY].int64_list.value[0]
            yield SourceItem(
                path=filename or where,
                split_key=filename if filename is not None else record,
                filename=filename or where,
                label=label,
                label_name=self.label_names[label] if label >= 0 else "",
                problem=problem,
                example=example,
            )

    def item_data(self, index: int, item: SourceItem) -> bytes:
        """The record's `image` bytes, for an item the batched decode did not return."""
        data = _single_bytes(item.example, IMAGE_KEY) if item.example is not None else None
        return data or b""

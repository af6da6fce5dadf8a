"""The predictions of `mptfx predict`: the Trainer's decoder in tf.data, the model over its
batches, one row per input, written as they come.

    for row in predict_rows(sources, predictor, batch_size=64, top_k=3):
        writer.write(row)                       # RowWriter: CSV or JSON Lines

Each source's elements are read, decoded with the Examples format's decoder and resized
with the Trainer's `preprocess_images` (so the pixels are those `serving_default` computes
for the same file) on every core in parallel, in order, then batched; the model runs on a
batch while the next ones decode. An element that cannot be read or decoded is dropped by
the pipeline (`ignore_errors`), and the rows are walked in index order beside the results,
so each missing index becomes a row with its reason (`sources.describe_*`) where it belongs.
Nothing is held but the listed names and the batches in flight: rows stream out as each
batch is answered.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from components.examples_format import FILENAME_KEY, IMAGE_KEY
from components.predict.served import Predictor
from components.predict.sources import FileSource, Source

FORMATS = ("csv", "jsonl")
DEFAULT_BATCH_SIZE = 64
_PREFETCH_BATCHES = 2


@dataclass(frozen=True)
class Row:
    """One input's answer: its classes best first (`top`: (name, probability)), or why it
    has none (`error`)."""

    file: str
    top: list[tuple[str, float]]
    error: str | None = None


def _dataset(source: Source, predictor: Predictor, batch_size: int) -> Any:
    """Batches of (indices, row names, float32 images) of one source, in order."""
    import tensorflow as tf

    from components.ingest.reader import parallel_calls
    from components.trainer.data import decode_image, preprocess_images

    size, channels = predictor.input_size, predictor.channels

    def image(encoded: tf.Tensor) -> tf.Tensor:
        return preprocess_images(decode_image(encoded, channels), size)

    if isinstance(source, FileSource):
        def load(index: tf.Tensor, path: tf.Tensor) -> tuple[tf.Tensor, ...]:
            return index, path, image(tf.io.read_file(path))
    else:
        spec = {IMAGE_KEY: tf.io.FixedLenFeature([], tf.string),
                FILENAME_KEY: tf.io.FixedLenFeature([], tf.string, default_value="")}

        def load(index: tf.Tensor, record: tf.Tensor) -> tuple[tf.Tensor, ...]:
            features = tf.io.parse_single_example(record, spec)
            unnamed = tf.strings.join([source.path, "#", tf.strings.as_string(index)])
            name = tf.where(tf.equal(features[FILENAME_KEY], ""), unnamed,
                            features[FILENAME_KEY])
            return index, name, image(features[IMAGE_KEY])

    options = tf.data.Options()
    # Parallelism set to the cores, as the Ingest does: with autotuning on, deleting the
    # iterator waits for tf.data's autotuning thread (components/ingest/reader.py).
    options.autotune.enabled = False
    return (
        source.elements()
        .map(tf.autograph.experimental.do_not_convert(load),
             num_parallel_calls=parallel_calls(), deterministic=True)
        .ignore_errors(log_warning=False)
        .batch(batch_size)
        .prefetch(_PREFETCH_BATCHES)
        .with_options(options)
    )


def _dropped(source: Source, start: int, stop: int | None, channels: int) -> Iterator[Row]:
    """Rows for the inputs from `start` to `stop` (None: the end) that the pipeline
    dropped, each described alone."""
    for name, reason in source.dropped(start, stop, channels):
        yield Row(name, [], reason)


def _source_rows(source: Source, predictor: Predictor, batch_size: int, top_k: int
                 ) -> Iterator[Row]:
    import numpy as np

    labels, channels = predictor.label_names, predictor.channels
    expected = 0  # the next index in order: a larger one means the ones between were dropped
    for indices, names, images in _dataset(source, predictor, batch_size):
        probabilities = predictor(images)
        best = np.argsort(-probabilities, axis=1, kind="stable")[:, :top_k]
        for index, name, probs, order in zip(indices.numpy().tolist(), names.numpy(),
                                             probabilities, best, strict=True):
            if index > expected:
                yield from _dropped(source, expected, index, channels)
            yield Row(os.fsdecode(name), [(labels[k], float(probs[k])) for k in order])
            expected = index + 1
    yield from _dropped(source, expected, None, channels)


def predict_rows(sources: list[Source], predictor: Predictor,
                 batch_size: int = DEFAULT_BATCH_SIZE, top_k: int = 1) -> Iterator[Row]:
    """One row per input of `sources`, in their order, as each batch is answered."""
    if batch_size < 1 or top_k < 1:
        raise ValueError(f"batch_size and top_k must be at least 1. Received: "
                         f"batch_size={batch_size}, top_k={top_k}")
    top_k = min(top_k, len(predictor.label_names))
    for source in sources:
        yield from _source_rows(source, predictor, batch_size, top_k)


class RowWriter:
    """Rows as CSV (`file,class,probability[,class_2,probability_2,...],error`) or JSON
    Lines (`{"file", "class", "probability"[, "top_k"], "error"}`), flushed by the caller."""

    def __init__(self, stream: TextIO, output_format: str, top_k: int) -> None:
        if output_format not in FORMATS:
            raise ValueError(f"format must be one of {list(FORMATS)}. "
                             f"Received: {output_format!r}")
        self.stream = stream
        self.format = output_format
        self.top_k = top_k
        self._csv = csv.writer(stream, lineterminator="\n") if output_format == "csv" else None
        if self._csv is not None:
            ranks = [name for k in range(2, top_k + 1)
                     for name in (f"class_{k}", f"probability_{k}")]
            self._csv.writerow(["file", "class", "probability", *ranks, "error"])

    def write(self, row: Row) -> None:
        """One row, in the writer's format."""
        if self._csv is not None:
            cells = [cell for name, p in row.top for cell in (name, f"{p:.6f}")]
            cells += [""] * (2 * self.top_k - len(cells))
            self._csv.writerow([row.file, *cells, row.error or ""])
            return
        first = row.top[0] if row.top else (None, None)
        record: dict[str, Any] = {"file": row.file, "class": first[0],
                                  "probability": None if first[1] is None else round(first[1], 6)}
        if self.top_k > 1:
            record["top_k"] = [{"class": name, "probability": round(p, 6)} for name, p in row.top]
        record["error"] = row.error
        self.stream.write(json.dumps(record, ensure_ascii=False) + "\n")

"""The photo-scale data path, each measurement beside a plain tf.data reference.

- `photo_sets` (`synthesise_photos`): JPEG "photos" without internet: random 224x224
  crops (half of them flipped) of scikit-learn's two bundled sample photographs
  (china.jpg, flower.jpg, 427x640), saved by PIL at JPEG quality 90 into class folders.
- `ingest_photos`: images/s, bytes written and the process's peak RSS of mptfx's
  `ingest()` (the function the Ingest component runs) on such a folder, or of the plain
  reference (`plain_ingest`: list files -> read_file -> decode_jpeg to validate -> each
  file's bytes into one GZIP TFRecord of Examples).
- `decode_only`: tf.data's read_file -> decode_jpeg alone, a map call per photo, nothing
  written: how that form (the TensorFlow guides') scales from 1 core to all on the machine.
- `input_rates`: images/s the Trainer's `make_dataset` delivers from the Ingest's shards
  (decoding every epoch: photos at scale do not fit its cache) against the plain input
  (`plain_input`: list files -> read_file -> decode_jpeg -> resize -> batch), alternating.

The cores a measurement may use are set by its worker before TensorFlow is imported
(`restrict_cores`), so TensorFlow's and tf.data's thread pools are sized to them.

Example:

    small, large = photo_sets("/ws/bench/data-scale", [300, 1200], classes=3, seed=0)["sets"]
    ingest_photos(small["root"], "/ws/bench/out", "mptfx")["images_per_sec"]
"""

from __future__ import annotations

import glob
import logging
import os
import re
import resource
import shutil
import time
from collections.abc import Sequence
from typing import Any

PHOTO_SIDE = 224
PHOTO_QUALITY = 90
METHODS = ("mptfx", "plain", "decode")
_REENCODED = re.compile(r"(\d+) re-encoded")


def restrict_cores(cores: int) -> int:
    """Limits this process to its first `cores` CPUs (0: all it may use); returns how many
    it may use now. Call before importing TensorFlow."""
    allowed = sorted(os.sched_getaffinity(0))
    if 0 < cores < len(allowed):
        os.sched_setaffinity(0, allowed[:cores])
    return len(os.sched_getaffinity(0))


def folder_bytes(root: str, suffix: str = "") -> int:
    """Total size of the files below `root` whose names end with `suffix`."""
    return sum(os.path.getsize(os.path.join(folder, name))
               for folder, _, names in os.walk(root) for name in names
               if name.endswith(suffix))


def _photo_path(root: str, index: int, classes: int) -> str:
    return os.path.join(root, f"class_{index % classes}", f"photo_{index:06d}.jpg")


def synthesise_photos(root: str, photos: int, classes: int, seed: int) -> dict[str, Any]:
    """Writes `photos` JPEGs into `root/class_<k>/` (once per root; photo i depends only
    on `seed` and i)."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_sample_images

    if not os.path.isdir(root):
        staging = root + ".partial"
        shutil.rmtree(staging, ignore_errors=True)
        for label in range(classes):
            os.makedirs(os.path.join(staging, f"class_{label}"))
        sources = load_sample_images().images
        for index in range(photos):
            rng = np.random.default_rng([seed, index])
            source = sources[index % len(sources)]
            top = int(rng.integers(0, source.shape[0] - PHOTO_SIDE + 1))
            left = int(rng.integers(0, source.shape[1] - PHOTO_SIDE + 1))
            crop = source[top:top + PHOTO_SIDE, left:left + PHOTO_SIDE]
            if rng.random() < 0.5:
                crop = crop[:, ::-1]
            Image.fromarray(np.ascontiguousarray(crop)).save(
                _photo_path(staging, index, classes), quality=PHOTO_QUALITY)
        os.rename(staging, root)
    return {"root": root, "photos": photos, "classes": classes,
            "bytes": folder_bytes(root, ".jpg")}


def photo_sets(folder: str, counts: list[int], classes: int, seed: int) -> dict[str, Any]:
    """One photo folder per count below `folder`: the largest synthesised, the smaller ones
    hard links to its first photos (the same photos a synthesis of that count makes)."""
    largest = synthesise_photos(os.path.join(folder, f"photos-{max(counts)}"), max(counts),
                                classes, seed)
    sets = []
    for count in counts:
        root = os.path.join(folder, f"photos-{count}")
        if not os.path.isdir(root):
            staging = root + ".partial"
            shutil.rmtree(staging, ignore_errors=True)
            for label in range(classes):
                os.makedirs(os.path.join(staging, f"class_{label}"))
            for index in range(count):
                os.link(_photo_path(largest["root"], index, classes),
                        _photo_path(staging, index, classes))
            os.rename(staging, root)
        sets.append({"root": root, "photos": count, "classes": classes,
                     "bytes": folder_bytes(root, ".jpg")})
    return {"sets": sets}


def labelled_photos(photo_dir: str) -> tuple[list[str], list[int]]:
    """The JPEGs below `photo_dir`'s class folders, sorted, and their class indices."""
    files = sorted(glob.glob(os.path.join(photo_dir, "*", "*.jpg")))
    names = sorted({os.path.basename(os.path.dirname(path)) for path in files})
    return files, [names.index(os.path.basename(os.path.dirname(path))) for path in files]


def plain_ingest(photo_dir: str, out_path: str) -> int:
    """The plain tf.data reference: every JPEG read and decoded (to validate it) by
    tf.data, its bytes written as they are into one GZIP TFRecord; returns the count."""
    import tensorflow as tf

    files, labels = labelled_photos(photo_dir)

    def load(path: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, ...]:
        data = tf.io.read_file(path)
        return data, label, tf.shape(tf.io.decode_jpeg(data))

    dataset = (tf.data.Dataset.from_tensor_slices((files, labels))
               .map(load, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))
    written = 0
    with tf.io.TFRecordWriter(out_path, options="GZIP") as writer:
        for data, label, shape in dataset.as_numpy_iterator():
            feature = {
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                "height": tf.train.Feature(int64_list=tf.train.Int64List(value=[shape[0]])),
                "width": tf.train.Feature(int64_list=tf.train.Int64List(value=[shape[1]])),
            }
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
            written += 1
    return written


def decode_only(photo_dir: str) -> int:
    """tf.data alone, writing nothing: list -> read_file -> decode_jpeg, a map call per
    photo on as many threads as cores, handed over in batches, autotuning off; returns the
    count. Its speed-up from 1 core to all is how that form scales on the machine."""
    import tensorflow as tf

    files, _ = labelled_photos(photo_dir)

    def decode(path: tf.Tensor) -> tf.Tensor:
        return tf.shape(tf.io.decode_jpeg(tf.io.read_file(path)))

    options = tf.data.Options()
    options.autotune.enabled = False
    dataset = (tf.data.Dataset.from_tensor_slices(files)
               .map(tf.autograph.experimental.do_not_convert(decode),
                    num_parallel_calls=len(os.sched_getaffinity(0)))
               .batch(256).prefetch(2).with_options(options))
    return sum(int(shapes.shape[0]) for shapes in dataset)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def ingest_photos(photo_dir: str, out_dir: str, method: str) -> dict[str, Any]:
    """Ingests `photo_dir` into `out_dir` with `method` ("mptfx" or "plain"); times it.

    Returns examples_dir (mptfx: the Examples it wrote), images, seconds, images_per_sec,
    photo_bytes, bytes_written (the TFRecord files), shards, reencoded (mptfx: from the
    Ingest's log line), cores and peak_rss_mb (this process's, `ru_maxrss`: run it in a
    fresh process).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}. Received: {method!r}")
    from components.ingest import ingest as ingest_module

    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    lines = _Lines()
    reencoded, examples_dir = None, os.path.join(out_dir, "examples")
    started = time.perf_counter()
    if method == "mptfx":
        ingest_module.logger.addHandler(lines)
        ingest_module.logger.setLevel(logging.INFO)
        try:
            result = ingest_module.ingest(photo_dir, examples_dir,
                                          os.path.join(out_dir, "quarantine.json"))
        finally:
            ingest_module.logger.removeHandler(lines)
        images = sum(result.split_counts.values())
        found = [int(m.group(1)) for line in lines.lines if (m := _REENCODED.search(line))]
        reencoded = found[-1] if found else None
    elif method == "plain":
        images = plain_ingest(photo_dir, os.path.join(out_dir, "plain.tfrecord.gz"))
        examples_dir = None
    else:
        images, examples_dir = decode_only(photo_dir), None
    seconds = time.perf_counter() - started
    return {
        "method": method,
        "examples_dir": examples_dir,
        "images": images,
        "seconds": seconds,
        "images_per_sec": images / seconds,
        "photo_bytes": folder_bytes(photo_dir, ".jpg"),
        "bytes_written": folder_bytes(out_dir, ".gz"),
        "shards": len(glob.glob(os.path.join(out_dir, "**", "*.gz"), recursive=True)),
        "reencoded": reencoded,
        "cores": len(os.sched_getaffinity(0)),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def plain_input(photo_dir: str, input_size: Sequence[int], batch_size: int) -> Any:
    """The plain training input: (file, label) pairs shuffled and repeated -> read_file ->
    decode_jpeg -> resize -> batch of (images, labels)."""
    import tensorflow as tf

    size = [int(input_size[0]), int(input_size[1])]
    files, labels = labelled_photos(photo_dir)

    def load(path: tf.Tensor, label: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        return tf.image.resize(image, size), label

    pairs = tf.data.Dataset.from_tensor_slices((files, labels))
    return (pairs.shuffle(len(files), seed=42, reshuffle_each_iteration=True).repeat()
            .map(load, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(batch_size).prefetch(tf.data.AUTOTUNE))


def _images_per_sec(dataset: Any, warmup_batches: int, max_batches: int,
                    seconds: float) -> float:
    """Images/s of `dataset` after `warmup_batches`, over `max_batches` or `seconds`."""
    batches = iter(dataset)
    for _ in range(warmup_batches):
        next(batches)
    images, started = 0, time.perf_counter()
    for _ in range(max_batches):
        images_in_batch, _ = next(batches)
        images += int(images_in_batch.shape[0])
        if time.perf_counter() - started > seconds:
            break
    return images / (time.perf_counter() - started)


def input_rates(
    examples_dir: str,
    photo_dir: str,
    input_size: list[int],
    batch_size: int,
    warmup_batches: int,
    max_batches: int,
    seconds: float,
    rounds: int,
) -> dict[str, Any]:
    """Images/s of the Trainer's `make_dataset` over the Ingest's train split and of
    `plain_input` over the photos, alternating `rounds` times; the best round of each."""
    from components.examples_format import TRAIN_SPLIT, split_pattern
    from components.trainer.data import make_dataset

    mptfx = make_dataset([split_pattern(examples_dir, TRAIN_SPLIT)], input_size, 3,
                         batch_size, shuffle=True, repeat=True, cache_max_mb=0)
    plain = plain_input(photo_dir, input_size, batch_size)
    rates: dict[str, list[float]] = {"mptfx": [], "plain": []}
    for _ in range(rounds):
        for name, dataset in (("plain", plain), ("mptfx", mptfx)):
            rates[name].append(_images_per_sec(dataset, warmup_batches, max_batches, seconds))
    return {
        "input_size": list(input_size),
        "batch_size": batch_size,
        "cores": len(os.sched_getaffinity(0)),
        "mptfx_images_per_sec": max(rates["mptfx"]),
        "plain_images_per_sec": max(rates["plain"]),
        "rounds": rates,
    }

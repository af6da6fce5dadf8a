"""The monitoring reference: what the model saw in training, stored beside the model.

The Trainer calls `write_reference` after the export. For a sample of the eval split (the
drift reference) and of the train split (the skew reference) it computes the image
features of every stored image (features.py) and the exported model's answer to it
through `serving_default` (the signature TF Serving answers with), and writes their TFDV
statistics into the SavedModel:

    <SavedModel>/assets.extra/mptfx_monitor/eval_statistics.pb     DatasetFeatureStatisticsList
                                            train_statistics.pb
                                            reference.json          label names, counts

`assets.extra` is copied with the model by the Pusher, so every served version folder
holds the reference of exactly that version; TF Serving reads nothing there but its
warm-up file. `mptfx monitor` reads it back with `read_reference(version_dir)`.

    info = write_reference(serving_model_dir, fn_args.train_files, fn_args.eval_files,
                           task.label_names)
    reference = read_reference("/mnt/mptfx/serving/digits/3")
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from components.examples_format import COMPRESSION, IMAGE_KEY
from components.monitor.features import answer_features, image_features

REFERENCE_DIR = os.path.join("assets.extra", "mptfx_monitor")
EVAL_STATISTICS = "eval_statistics.pb"
TRAIN_STATISTICS = "train_statistics.pb"
INFO_FILE = "reference.json"
# Images per split the statistics are computed from: a uniform sample (reservoir, fixed
# seed) when a split has more. 2,000 values put every decile of a feature within about
# one percentage point, far below any threshold worth alerting on.
MAX_REFERENCE_IMAGES = 2000
_SEED = 20261202
_BATCH = 64


class ReferenceMissing(FileNotFoundError):
    """A served version without a monitoring reference (trained before mptfx monitor, or a
    segmentation model); the message names the folder."""


@dataclass(frozen=True)
class Reference:
    """One version's reference statistics and what they were computed from."""

    eval_statistics: Any
    train_statistics: Any
    label_names: list[str]
    counts: dict[str, int]  # split -> images the statistics describe
    path: str


def sample_records(file_patterns: Sequence[str], limit: int = MAX_REFERENCE_IMAGES,
                   seed: int = _SEED) -> tuple[list[bytes], int]:
    """A uniform sample of at most `limit` serialized examples (reservoir sampling, one
    pass, in file order) and how many the files hold."""
    import numpy as np
    import tensorflow as tf

    files = sorted(f for pattern in file_patterns for f in tf.io.gfile.glob(pattern))
    rng = np.random.default_rng(seed)
    sample: list[bytes] = []
    seen = 0
    for record in tf.data.TFRecordDataset(files, compression_type=COMPRESSION).as_numpy_iterator():
        seen += 1
        if len(sample) < limit:
            sample.append(record)
        else:
            slot = int(rng.integers(seen))
            if slot < limit:
                sample[slot] = record
    return sample, seen


def reference_rows(serialized: Sequence[bytes], serve: Any) -> list[dict[str, Any]]:
    """Image features and the model's answers for serialized Examples; `serve` is the
    SavedModel's `serving_default` signature."""
    import tensorflow as tf

    rows = []
    for start in range(0, len(serialized), _BATCH):
        batch = list(serialized[start:start + _BATCH])
        outputs = serve(examples=tf.constant(batch))
        names = outputs["class_name"].numpy()
        probabilities = outputs["probabilities"].numpy()
        for record, name, probs in zip(batch, names, probabilities, strict=True):
            example = tf.train.Example.FromString(record)
            row = image_features(example.features.feature[IMAGE_KEY].bytes_list.value[0])
            row.update(answer_features(name.decode("utf-8", "replace"), probs.tolist()))
            rows.append(row)
    return rows


def write_reference(serving_model_dir: str, train_files: Sequence[str],
                    eval_files: Sequence[str], label_names: Sequence[str]) -> dict[str, Any]:
    """Compute and store the reference statistics in `serving_model_dir`; returns what
    reference.json says (label names, images per split, where).

    Args:
        serving_model_dir: the exported SavedModel (a classifier's signatures).
        train_files, eval_files: the splits' file patterns (`fn_args.train_files`, ...).
        label_names: the class names, index = class id (for logs that carry only ids).
    """
    import tensorflow as tf

    from components.monitor.compare import statistics_of

    serve = tf.saved_model.load(serving_model_dir).signatures["serving_default"]
    statistics, counts, totals = {}, {}, {}
    for split, patterns in (("eval", eval_files), ("train", train_files)):
        sample, totals[split] = sample_records(patterns)
        counts[split] = len(sample)
        statistics[split] = statistics_of(reference_rows(sample, serve))
    return store_reference(serving_model_dir, statistics["eval"], statistics["train"], {
        "label_names": list(label_names), "images": counts, "split_sizes": totals,
        "max_images": MAX_REFERENCE_IMAGES})


def store_reference(model_dir: str, eval_statistics: Any, train_statistics: Any,
                    info: dict[str, Any]) -> dict[str, Any]:
    """Write the reference files into `<model_dir>/assets.extra/mptfx_monitor/`; returns
    `info` with the folder's `path` added (what reference.json holds)."""
    import tensorflow as tf

    folder = os.path.join(model_dir, REFERENCE_DIR)
    tf.io.gfile.makedirs(folder)
    for file_name, statistics in ((EVAL_STATISTICS, eval_statistics),
                                  (TRAIN_STATISTICS, train_statistics)):
        with tf.io.gfile.GFile(os.path.join(folder, file_name), "wb") as out:
            out.write(statistics.SerializeToString())
    info = {**info, "path": folder}
    with tf.io.gfile.GFile(os.path.join(folder, INFO_FILE), "w") as out:
        out.write(json.dumps(info, indent=2))
    return info


def read_reference(version_dir: str | os.PathLike) -> Reference:
    """The reference stored in a served version's folder.

    Raises:
        ReferenceMissing: naming the folder when it holds none.
    """
    import tensorflow_data_validation as tfdv

    folder = os.path.join(str(version_dir), REFERENCE_DIR)
    info_path = os.path.join(folder, INFO_FILE)
    if not os.path.exists(info_path):
        raise ReferenceMissing(f"{version_dir} holds no monitoring reference ({REFERENCE_DIR}/"
                               f"{INFO_FILE}): trained before mptfx monitor, or not a classifier")
    with open(info_path) as f:
        info = json.load(f)
    return Reference(
        eval_statistics=tfdv.load_stats_binary(os.path.join(folder, EVAL_STATISTICS)),
        train_statistics=tfdv.load_stats_binary(os.path.join(folder, TRAIN_STATISTICS)),
        label_names=list(info.get("label_names") or []),
        counts=dict(info.get("images") or {}),
        path=folder,
    )

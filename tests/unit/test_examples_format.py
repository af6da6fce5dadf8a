"""The Examples format has one owner, components/examples_format.py: what the Ingest writes
for a tiny image folder, the Trainer's reader and TF Lite's reader read back the same way.

Real TensorFlow on 24 8x8 PNGs; no pipeline run.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from components.examples_format import (
    CHANNELS_KEY,
    COMPRESSION,
    EVAL_SPLIT,
    FILENAME_KEY,
    HEIGHT_KEY,
    IMAGE_FORMAT_KEY,
    IMAGE_KEY,
    LABEL_KEY,
    LABEL_NAME_KEY,
    TRAIN_SPLIT,
    WIDTH_KEY,
    LabelNamesMissing,
    examples_uri_of,
    read_label_names,
    split_dir,
    split_pattern,
)
from components.ingest.ingest import IngestResult, ingest
from components.tflite.data import load_split_images
from components.trainer import data as data_lib

CLASSES = ("ant", "bee", "cat")
SHADES = np.array([60, 120, 240])  # every image of class k is a flat gray of SHADES[k]
PER_CLASS = 8


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, IngestResult]:
    root = tmp_path_factory.mktemp("format")
    for name, shade in zip(CLASSES, SHADES, strict=True):
        (root / "data" / name).mkdir(parents=True)
        for index in range(PER_CLASS):
            pixels = np.full((8, 8), shade, np.uint8)
            Image.fromarray(pixels, "L").save(root / "data" / name / f"{index}.png")
    uri = str(root / "examples")
    result = ingest(str(root / "data"), uri, str(root / "quarantine.json"),
                    splits={TRAIN_SPLIT: 0.5, EVAL_SPLIT: 0.5})
    return uri, result


def test_the_ingest_writes_the_documented_files_and_features(ingested):
    uri, result = ingested
    # Spelled out as docs/INTERFACES.md does: a changed constant would change these files.
    assert sorted(os.listdir(uri)) == ["Split-eval", "Split-train", "labels.json"]
    for split in ("train", "eval"):
        assert os.listdir(Path(uri, f"Split-{split}")) == ["data_tfrecord-00000-of-00001.gz"]
    assert json.loads(Path(uri, "labels.json").read_text()) == {"label_names": list(CLASSES)}
    assert sorted(tf.io.gfile.glob(split_pattern(uri, "*"))) == [
        os.path.join(uri, "Split-eval", "data_tfrecord-00000-of-00001.gz"),
        os.path.join(uri, "Split-train", "data_tfrecord-00000-of-00001.gz"),
    ]

    shard = tf.io.gfile.glob(split_pattern(uri, TRAIN_SPLIT))[0]
    record = next(iter(tf.data.TFRecordDataset(shard, compression_type="GZIP")))
    features = tf.train.Example.FromString(record.numpy()).features.feature
    documented = {"image", "image_format", "label", "label_name", "height", "width",
                  "channels", "filename"}
    assert set(features) == documented == {
        IMAGE_KEY, IMAGE_FORMAT_KEY, LABEL_KEY, LABEL_NAME_KEY, HEIGHT_KEY, WIDTH_KEY,
        CHANNELS_KEY, FILENAME_KEY
    }
    assert features[IMAGE_FORMAT_KEY].bytes_list.value == [b"png"]
    assert COMPRESSION == "GZIP" and sum(result.split_counts.values()) == 3 * PER_CLASS


def test_the_trainer_and_tflite_read_back_the_same_names_images_and_labels(ingested):
    uri, result = ingested
    train_files = [os.path.join(split_dir(uri, TRAIN_SPLIT), "*")]  # as TFX passes them
    assert examples_uri_of(train_files) == uri
    assert read_label_names(examples_uri_of(train_files)) == list(CLASSES) == result.label_names
    assert data_lib.read_channels(train_files) == 1

    for split in (TRAIN_SPLIT, EVAL_SPLIT):
        patterns = [split_pattern(uri, split)]
        count = data_lib.count_examples(patterns)
        assert count == result.split_counts[split] > 0
        batches = list(data_lib.make_dataset(patterns, (8, 8), 1, batch_size=64, shuffle=False,
                                             num_examples=count).as_numpy_iterator())
        trainer_images = np.concatenate([images for images, _ in batches])
        trainer_labels = np.concatenate([labels for _, labels in batches])
        # TF Lite's reader: parity (eval) and the int8 representative data (train).
        tflite_images, tflite_labels = load_split_images(uri, split, (8, 8), channels=1)

        np.testing.assert_array_equal(trainer_labels, tflite_labels)
        np.testing.assert_allclose(trainer_images, tflite_images, atol=1e-6)
        # Label k is the class named CLASSES[k]: its images have that class's shade.
        np.testing.assert_allclose(tflite_images.mean(axis=(1, 2, 3)),
                                   SHADES[tflite_labels] / 255.0, atol=1e-6)


def test_a_missing_or_malformed_labels_file_is_named(tmp_path):
    path = str(tmp_path / "labels.json")
    message = re.escape(f"labels.json not found. Received: path={path}")
    with pytest.raises(LabelNamesMissing, match=f"^{message}$") as missing:
        read_label_names(str(tmp_path))
    # TF Lite documented a FileNotFoundError, the Trainer a ValueError: it is both.
    assert isinstance(missing.value, FileNotFoundError) and isinstance(missing.value, ValueError)

    for content in ({"names": ["a", "b"]}, ["a", "b"], {"label_names": ["only"]}):
        Path(path).write_text(json.dumps(content))
        with pytest.raises(ValueError, match="labels.json needs 'label_names' with at least 2"):
            read_label_names(str(tmp_path))

    with pytest.raises(ValueError, match="No Split-train folder"):
        examples_uri_of([str(tmp_path / "Split-eval" / "*")])

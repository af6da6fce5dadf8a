"""The Trainer's input at photo scale: shards, a worker's own files, augmentation, and every
stored image format read back by the one decoder the Trainer, TF Lite and serving share.

Real TensorFlow on real digits (written by the Ingest's own writer) and on JPEG/PNG/GIF/BMP
files written by Pillow.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from components import examples_format, pod_env
from components.trainer import data as data_lib
from components.trainer.config import TrainerConfig
from tests.trainer_testdata import EVAL_FRACTION, write_digits_examples

NUM_IMAGES = 200
NUM_TRAIN = NUM_IMAGES - int(round(NUM_IMAGES * EVAL_FRACTION))


@pytest.fixture(scope="module")
def sharded_uri(tmp_path_factory) -> str:
    # ~300 bytes a serialized digit: shards of 8 KB give each split several files.
    return write_digits_examples(str(tmp_path_factory.mktemp("sharded")), NUM_IMAGES,
                                 shard_mb=8 / 1024)


@contextlib.contextmanager
def _absl_info(caplog):
    """The Trainer's absl log at INFO into caplog, whatever earlier tests did to the
    absl logger's level or propagation (the local runner sets INFO too)."""
    absl_logger = logging.getLogger("absl")
    absl_logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger="absl"):
            yield
    finally:
        absl_logger.removeHandler(caplog.handler)


def _train_patterns(uri: str) -> list[str]:
    return [os.path.join(examples_format.split_dir(uri, examples_format.TRAIN_SPLIT), "*")]


def _all_examples(dataset: tf.data.Dataset) -> list[tuple[bytes, int]]:
    """(image bytes as float32, label) of every example, in order."""
    return [(image.tobytes(), int(label)) for images, labels in dataset.as_numpy_iterator()
            for image, label in zip(images, labels, strict=True)]


def test_a_split_is_written_as_several_complete_shards_and_read_whole(sharded_uri):
    files = data_lib.list_files(_train_patterns(sharded_uri))
    assert len(files) >= 4
    names = [os.path.basename(f) for f in files]
    assert names == [examples_format.shard_name(i, len(files)) for i in range(len(files))]
    assert not any(name.endswith(examples_format.PARTIAL_SUFFIX) for name in names)
    assert data_lib.count_examples(_train_patterns(sharded_uri)) == NUM_TRAIN
    dataset = data_lib.make_dataset(_train_patterns(sharded_uri), [8, 8], 1, batch_size=32,
                                    shuffle=False)
    assert len(_all_examples(dataset)) == NUM_TRAIN


def test_two_workers_read_disjoint_files_whose_union_is_the_split(sharded_uri, caplog):
    patterns = _train_patterns(sharded_uri)
    whole = _all_examples(data_lib.make_dataset(patterns, [8, 8], 1, 32, shuffle=False))
    with _absl_info(caplog):
        parts = [_all_examples(data_lib.make_dataset(patterns, [8, 8], 1, 32, shuffle=False,
                                                     workers=(2, index)))
                 for index in (0, 1)]
    assert "sharded by FILE" in caplog.text
    assert parts[0] and parts[1]
    assert len(parts[0]) + len(parts[1]) == NUM_TRAIN
    assert sorted(parts[0] + parts[1]) == sorted(whole)
    files = data_lib.list_files(patterns)
    own = [data_lib.worker_files(files, (2, index)) for index in (0, 1)]
    assert not set(own[0]) & set(own[1]) and sorted(own[0] + own[1]) == files


def test_more_workers_than_files_shard_by_data_and_say_so(tmp_path, caplog):
    uri = write_digits_examples(str(tmp_path), 60)  # one file a split
    patterns = _train_patterns(uri)
    assert len(data_lib.list_files(patterns)) == 1
    assert data_lib.worker_files(data_lib.list_files(patterns), (2, 1)) is None
    with _absl_info(caplog):
        data_lib.make_dataset(patterns, [8, 8], 1, 16, shuffle=False, workers=(2, 1))
    assert "sharded by DATA" in caplog.text


@pytest.mark.parametrize(("tf_config", "position"), [
    ({}, None),
    ({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}, None),
    ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}, (2, 1)),
    ({"cluster": {"chief": ["c:1"], "worker": ["a:1", "b:1"]},
      "task": {"type": "chief", "index": 0}}, (3, 0)),
    ({"cluster": {"chief": ["c:1"], "worker": ["a:1", "b:1"]},
      "task": {"type": "worker", "index": 1}}, (3, 2)),
    ({"cluster": {"worker": ["a:1", "b:1"], "evaluator": ["e:1"]},
      "task": {"type": "evaluator", "index": 0}}, None),
])
def test_a_tasks_position_among_the_workers_comes_from_tf_config(tf_config, position):
    assert pod_env.worker_position(tf_config) == position


def test_crop_flip_gives_new_crops_at_the_input_size_and_evaluation_is_unchanged(sharded_uri):
    patterns = _train_patterns(sharded_uri)
    plain = _all_examples(data_lib.make_dataset(patterns, [8, 8], 1, 32, shuffle=False))
    dataset = data_lib.make_dataset(patterns, [8, 8], 1, 32, shuffle=True, augment="crop_flip",
                                    num_examples=NUM_TRAIN)
    images, _ = next(iter(dataset))
    assert images.shape == (32, 8, 8, 1)
    first, second = _all_examples(dataset), _all_examples(dataset)
    assert len(first) == NUM_TRAIN
    assert sorted(first) != sorted(second)  # a new crop every epoch: never cached
    assert not set(first) <= set(plain)
    # shuffle=False is evaluation: augment is ignored.
    evaluation = data_lib.make_dataset(patterns, [8, 8], 1, 32, shuffle=False,
                                       augment="crop_flip")
    assert _all_examples(evaluation) == plain


def _photo(size: int = 64) -> np.ndarray:
    y, x = np.mgrid[:size, :size]
    return np.stack([x * 4 % 256, y * 4 % 256, (x + y) * 2 % 256], axis=-1).astype(np.uint8)


def test_a_jpeg_crop_decodes_only_the_window_and_has_the_images_channels():
    buffer = io.BytesIO()
    Image.fromarray(_photo(), "RGB").save(buffer, "JPEG", quality=95)
    crops = {data_lib.random_resized_crop(tf.constant(buffer.getvalue()), 3, seed).shape
             for seed in range(8)}
    assert all(shape[-1] == 3 and shape[0] <= 64 and shape[1] <= 64 for shape in crops)
    assert len(crops) > 1  # random windows, not the whole image


def test_augment_auto_is_crop_flip_for_resnet50_on_photos_only():
    assert data_lib.resolve_augment("auto", "resnet50", 3) == "crop_flip"
    assert data_lib.resolve_augment("auto", "resnet50", 1) == "none"
    assert data_lib.resolve_augment("auto", "seed_cnn", 3) == "none"
    assert data_lib.resolve_augment("flip", "seed_cnn", 1) == "flip"
    assert TrainerConfig.from_custom_config({}).trainer.augment == "auto"
    with pytest.raises(ValueError, match="trainer.augment"):
        TrainerConfig.from_custom_config({"trainer": {"augment": "mixup"}})


LOSSLESS = {"PNG": "png", "GIF": "gif", "BMP": "bmp"}


@pytest.mark.parametrize("kind", ["JPEG", *LOSSLESS])
def test_every_stored_format_decodes_to_the_files_pixels(kind):
    pixels = _photo(32)
    image = Image.fromarray(pixels, "RGB")
    if kind == "GIF":  # a palette image: compare with what the palette holds
        image = image.convert("P", palette=Image.ADAPTIVE, colors=256)
        pixels = np.asarray(image.convert("RGB"))
    buffer = io.BytesIO()
    image.save(buffer, kind, **({"quality": 95} if kind == "JPEG" else {}))
    encoded = buffer.getvalue()
    assert examples_format.image_format_of(encoded) == LOSSLESS.get(kind, "jpeg")
    decoded = data_lib.decode_image(tf.constant(encoded), 3).numpy()
    assert decoded.shape == (32, 32, 3)
    if kind == "JPEG":
        # Lossy: near the source (quality 95) and near Pillow's decoding of the same bytes
        # (libjpeg builds differ in IDCT and chroma upsampling by a few levels).
        reference = np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB")).astype(int)
        assert np.abs(decoded.astype(int) - pixels).mean() < 3
        assert np.abs(decoded.astype(int) - reference).max() <= 8
    else:
        np.testing.assert_array_equal(decoded, pixels)
    gray = data_lib.decode_image(tf.constant(encoded), 1).numpy()
    assert gray.shape == (32, 32, 1)

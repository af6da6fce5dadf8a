"""The Trainer on volumes for real: a 3D U-Net trained on synthetic 8x8x8 volumes that went
through the real Ingest, and the serving signatures it exports. (Slow: not in tests/unit.)"""

from __future__ import annotations

import json
import os

import pytest
import tensorflow as tf
from tfx.components.trainer.fn_args_utils import FnArgs

from components.examples_format import COMPRESSION, EVAL_SPLIT, TRAIN_SPLIT, split_dir
from components.trainer import data as data_lib
from components.trainer import module


def _fn_args(examples_uri: str, out: str, input_size: list[int], **trainer: object):
    return FnArgs(
        train_files=[os.path.join(split_dir(examples_uri, TRAIN_SPLIT), "*")],
        eval_files=[os.path.join(split_dir(examples_uri, EVAL_SPLIT), "*")],
        serving_model_dir=os.path.join(out, "Format-Serving"),
        model_run_dir=os.path.join(out, "model_run"),
        custom_config={
            "data": {"channels": "auto"},
            "model": {"name": "unet3d", "input_size": input_size, "params": {}},
            "trainer": {"epochs": 2, "batch_size": 32, **trainer},
            "export": {"serving_precision": "float32"},
        },
    )


def _summary(fn_args) -> dict:
    with open(os.path.join(fn_args.model_run_dir, module.SUMMARY_FILE)) as f:
        return json.load(f)


def _serialized(file_patterns: list[str]) -> list[bytes]:
    files = data_lib.list_files(file_patterns)
    return [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type=COMPRESSION)]


@pytest.fixture(scope="module")
def volumes_uri(tmp_path_factory) -> str:
    """Synthetic 8x8x8 volumes through the real ingest."""
    from components.ingest.ingest import ingest
    from components.ingest.synthetic_volumes import export_volumes

    root = tmp_path_factory.mktemp("volumes")
    source = export_volumes(root / "source", per_class=12, shape=(8, 8, 8))
    ingest(str(source), str(root / "examples"), str(root / "quarantine.json"))
    return str(root / "examples")


def test_unet3d_trains_on_volumes_and_serves_masks(volumes_uri, tmp_path):
    fn_args = _fn_args(volumes_uri, str(tmp_path), input_size=[8, 8], batch_size=4,
                       precision="float32", epochs=2)
    module.run_fn(fn_args)
    summary = _summary(fn_args)
    assert summary["task"] == "segmentation" and summary["input_shape"] == [8, 8, 8, 1]
    assert {"loss", "dice", "val_loss", "val_dice"} <= set(summary["history"])
    assert summary["dice"] == summary["history"]["val_dice"][-1]
    assert 0.0 <= summary["dice"] <= 1.0

    served = tf.saved_model.load(fn_args.serving_model_dir)
    assert set(served.signatures) == {"serving_default", "predict_volumes", "predict_normalized"}
    serialized = _serialized(fn_args.eval_files)[:3]
    by_example = served.signatures["serving_default"](examples=tf.constant(serialized))
    assert by_example["probabilities"].shape == (3, 512)  # flat, like the `mask` feature
    assert by_example["mask"].shape == (3, 8, 8, 8)
    volumes = tf.zeros([2, 8, 8, 8, 1], tf.uint8)
    assert served.signatures["predict_volumes"](volumes=volumes)["mask"].shape == (2, 8, 8, 8)


def test_volumes_need_the_slice_size_as_input_size(volumes_uri, tmp_path):
    fn_args = _fn_args(volumes_uri, str(tmp_path), input_size=[16, 16])
    with pytest.raises(ValueError, match=r"input_size=\[16, 16\].*model.input_size=\[8,8\]"):
        module.run_fn(fn_args)

"""`export.serving_precision: mixed`, end to end with real TensorFlow: the serving SavedModel
keeps the training policy's graph (bfloat16 compute, float32 outputs), TFMA evaluates its
serving_default, and TF Lite converts the float32 rebuild written beside it (or says in one
line why it cannot)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from tfx.types import standard_artifacts

from components.tflite.component import export_tflite_models, tflite_source_dir
from components.tflite.convert import reduced_precision_dtypes
from components.trainer.export import FLOAT32_DIR, float32_model_dir
from tests.trainer_testdata import (
    train_mixed_serving,
)

NUM_IMAGES = 300


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """run_fn under mixed_bfloat16 (the reduced precision this CPU runs at a usable speed)
    with `export.serving_precision: mixed`."""
    return train_mixed_serving(str(tmp_path_factory.mktemp("mixed")), NUM_IMAGES)


def _images(count: int) -> np.ndarray:
    return np.random.default_rng(0).random((count, 8, 8, 1), dtype=np.float32)


def test_the_serving_model_keeps_the_mixed_graph_with_float32_outputs(mixed):
    fn_args, result, _ = mixed
    assert result.summary.precision == "mixed_bfloat16"
    assert reduced_precision_dtypes(fn_args.serving_model_dir) == ["bfloat16"]
    loaded = tf.saved_model.load(fn_args.serving_model_dir)
    served = loaded.signatures["predict_normalized"](images=tf.constant(_images(4)))
    assert served["probabilities"].dtype == tf.float32
    # The serving graph and eager Keras may take different bfloat16 kernels (oneDNN's
    # AVX512_BF16 ones in the graph): they agree to bfloat16's precision, 8 significant bits
    # (one unit in the last place is 2^-7 relative), not float32's.
    np.testing.assert_allclose(served["probabilities"], result.model(_images(4)),
                               rtol=2**-7, atol=2**-10)
    uint8 = loaded.signatures["predict_images"](images=tf.zeros([2, 8, 8, 1], tf.uint8))
    assert uint8["probabilities"].dtype == tf.float32 and uint8["class_id"].shape == (2,)


def test_a_float32_rebuild_with_the_same_signatures_is_beside_it(mixed):
    fn_args, _, _ = mixed
    rebuilt = float32_model_dir(fn_args.serving_model_dir)
    assert os.path.basename(rebuilt) == FLOAT32_DIR
    assert reduced_precision_dtypes(rebuilt) == []
    serving = tf.saved_model.load(fn_args.serving_model_dir)
    float32 = tf.saved_model.load(rebuilt)
    assert set(float32.signatures.keys()) == set(serving.signatures.keys())
    images = tf.constant(_images(16))
    mixed_probabilities = serving.signatures["predict_normalized"](images=images)
    float_probabilities = float32.signatures["predict_normalized"](images=images)
    # The same weights; bfloat16 keeps ~3 significant digits.
    np.testing.assert_allclose(mixed_probabilities["probabilities"],
                               float_probabilities["probabilities"], atol=0.05)


def _model_artifact_uri(fn_args) -> str:
    return os.path.dirname(fn_args.serving_model_dir)


def test_tflite_converts_the_float32_rebuild_and_passes_parity(mixed, tmp_path):
    fn_args, _, examples_uri = mixed
    model = standard_artifacts.Model()
    model.uri = _model_artifact_uri(fn_args)
    source = tflite_source_dir(model.uri)
    assert source == float32_model_dir(fn_args.serving_model_dir)
    report = export_tflite_models(source, examples_uri, str(tmp_path / "out"),
                                  str(tmp_path / "publish"), ["fp32", "fp16"])
    assert report["fp32"]["published"] and report["fp16"]["published"], report
    assert report["fp32"]["agreement"] >= 0.995


def test_tflite_says_in_one_line_why_a_mixed_graph_is_skipped(mixed, tmp_path):
    fn_args, _, examples_uri = mixed
    report = export_tflite_models(fn_args.serving_model_dir, examples_uri, str(tmp_path / "out"),
                                  str(tmp_path / "publish"), ["fp32", "int8"])
    for variant in ("fp32", "int8"):
        reason = report[variant]["reason"]
        assert not report[variant]["published"] and report[variant]["path"] is None
        assert reason.startswith("skipped:") and "bfloat16" in reason and "\n" not in reason
    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert written == report


def test_a_float32_serving_model_has_no_rebuild_beside_it(tmp_path):
    import keras

    import models
    from components.trainer import export as export_lib

    trained = models.build_model("seed_cnn", (8, 8, 1), 3)
    export_dir = export_lib.export_serving_model(
        trained, "seed_cnn", {}, [8, 8], 1, ["a", "b", "c"], str(tmp_path / "m" / "Format-Serving")
    )
    assert not os.path.exists(float32_model_dir(export_dir))
    assert tflite_source_dir(str(tmp_path / "m")) == export_dir
    assert keras.mixed_precision.global_policy().name == "float32"
    with pytest.raises(ValueError, match="serving_precision='float16'"):
        export_lib.export_serving_model(trained, "seed_cnn", {}, [8, 8], 1, ["a", "b", "c"],
                                        str(tmp_path / "x"), "float16")


def test_mixed_serving_of_a_float32_trained_model_is_written_once(tmp_path):
    import models
    from components.trainer import export as export_lib

    trained = models.build_model("seed_cnn", (8, 8, 1), 3)
    export_dir = export_lib.export_serving_model(
        trained, "seed_cnn", {}, [8, 8], 1, ["a", "b", "c"], str(tmp_path / "Format-Serving"),
        "mixed",
    )
    assert reduced_precision_dtypes(export_dir) == []
    assert not os.path.exists(float32_model_dir(export_dir))

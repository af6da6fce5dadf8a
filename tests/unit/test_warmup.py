"""TF Serving warm-up records: they parse as PredictionLog and each one runs on the model."""

import os

import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from components.trainer.export import export_serving_model
from components.trainer.serving_warmup import WARMUP_FILE
from models import build_model


def _records(export_dir: str) -> list:
    path = os.path.join(export_dir, WARMUP_FILE)
    return [prediction_log_pb2.PredictionLog.FromString(r.numpy())
            for r in tf.data.TFRecordDataset(path)]


def _replay(served, record) -> dict:
    """What TF Serving does with a record at load time: run its request on its signature."""
    request = record.predict_log.request
    inputs = {key: tf.constant(tf.make_ndarray(value)) for key, value in request.inputs.items()}
    return served.signatures[request.model_spec.signature_name](**inputs)


def test_segmentation_warmup_records_run_on_the_volume_signatures(tmp_path):
    model = build_model("unet3d", (8, 16, 16, 1), 2, base_filters=4)
    export_dir = export_serving_model(
        model, "unet3d", {"base_filters": 4}, [16, 16], 1, ["background", "foreground"],
        str(tmp_path / "m"),
    )
    records = _records(export_dir)
    assert [r.predict_log.request.model_spec.signature_name for r in records] == [
        "serving_default", "predict_volumes"]
    served = tf.saved_model.load(export_dir)
    by_signature = {r.predict_log.request.model_spec.signature_name: _replay(served, r)
                    for r in records}
    assert by_signature["serving_default"]["probabilities"].shape == (1, 8 * 16 * 16)
    assert by_signature["predict_volumes"]["mask"].shape == (1, 8, 16, 16)


def test_warmup_records_parse_and_run_against_their_signatures(tmp_path):
    model = build_model("seed_cnn", (12, 12, 1), 3)
    export_dir = export_serving_model(
        model, "seed_cnn", {}, [12, 12], 1, ["cat", "dog", "eel"], str(tmp_path / "m")
    )
    path = os.path.join(export_dir, WARMUP_FILE)
    records = [prediction_log_pb2.PredictionLog.FromString(r.numpy())
               for r in tf.data.TFRecordDataset(path)]
    assert {r.predict_log.request.model_spec.signature_name for r in records} == {
        "serving_default", "predict_image_bytes", "predict_images"}
    served = tf.saved_model.load(export_dir)
    for record in records:
        request = record.predict_log.request
        inputs = {key: tf.constant(tf.make_ndarray(value)) for key, value in request.inputs.items()}
        outputs = served.signatures[request.model_spec.signature_name](**inputs)
        assert outputs["probabilities"].shape == (1, 3)
        assert outputs["class_name"].numpy()[0].decode() in ("cat", "dog", "eel")

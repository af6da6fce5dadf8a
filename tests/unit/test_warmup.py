"""TF Serving warm-up records: they parse as PredictionLog and each one runs on the model."""

import os

import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from components.trainer.export import export_serving_model
from components.trainer.warmup import WARMUP_FILE
from models import build_model


def test_warmup_records_parse_and_run_against_their_signatures(tmp_path):
    model = build_model("seed_cnn", (12, 12, 1), 3)
    export_dir = export_serving_model(
        model, "seed_cnn", {}, [12, 12], 1, ["cat", "dog", "eel"], str(tmp_path / "m")
    )
    path = os.path.join(export_dir, WARMUP_FILE)
    records = [prediction_log_pb2.PredictionLog.FromString(r.numpy())
               for r in tf.data.TFRecordDataset(path)]
    assert {r.predict_log.request.model_spec.signature_name for r in records} == {
        "serving_default", "predict_images"}
    served = tf.saved_model.load(export_dir)
    for record in records:
        request = record.predict_log.request
        inputs = {key: tf.constant(tf.make_ndarray(value)) for key, value in request.inputs.items()}
        outputs = served.signatures[request.model_spec.signature_name](**inputs)
        assert outputs["probabilities"].shape == (1, 3)
        assert outputs["class_name"].numpy()[0].decode() in ("cat", "dog", "eel")

"""TF Serving warm-up records: `assets.extra/tf_serving_warmup_requests` in the SavedModel.

TF Serving (started with `--enable_model_warmup`) replays these PredictionLog records when
it loads a version, before it reports the version ready, so the first real request does
not pay for graph initialisation. One record per signature that serves real traffic, each
with a single blank image (or volume) of the training size: warm-up needs the right shapes
and dtypes, not real data.

Example:

    write_warmup_requests(export_dir, "seed_cnn", {
        "serving_default": {"examples": np.array([blank_example((16, 16, 1))], dtype=object)},
        "predict_image_bytes": {"image_bytes": np.array([blank_png((16, 16, 1))], dtype=object)},
        "predict_images": {"images": np.zeros((1, 16, 16, 1), np.uint8)},
    })
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

from components.examples_format import IMAGE_KEY

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")


def _predict_log(model_name: str, signature: str, inputs: dict[str, np.ndarray]):
    request = predict_pb2.PredictRequest(
        model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature)
    )
    for key, value in inputs.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    return prediction_log_pb2.PredictionLog(
        predict_log=prediction_log_pb2.PredictLog(request=request)
    )


def blank_png(image_shape: tuple[int, int, int]) -> bytes:
    """A black PNG of `image_shape` [h, w, c]: what `predict_image_bytes` warms up with."""
    return tf.io.encode_png(np.zeros(image_shape, dtype=np.uint8)).numpy()


def blank_example(image_shape: tuple[int, int, int]) -> bytes:
    """A serialized tf.Example whose `image` is a black PNG of `image_shape` [h, w, c] (a
    volume's D slices are stacked vertically: [D*H, W, C], as the ingest stores them)."""
    png = blank_png(image_shape)
    return tf.train.Example(features=tf.train.Features(feature={
        IMAGE_KEY: tf.train.Feature(bytes_list=tf.train.BytesList(value=[png])),
    })).SerializeToString()


def write_warmup_requests(
    export_dir: str, model_name: str, requests: dict[str, dict[str, np.ndarray]]
) -> str:
    """Writes one warm-up record per signature; returns the file's path.

    Args:
        export_dir: the SavedModel folder.
        model_name: the name the requests address (TF Serving ignores it during warm-up).
        requests: signature name -> its inputs (input name -> a batch of one).
    """
    path = os.path.join(export_dir, WARMUP_FILE)
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.TFRecordWriter(path) as writer:
        for signature, inputs in requests.items():
            writer.write(_predict_log(model_name, signature, inputs).SerializeToString())
    return path

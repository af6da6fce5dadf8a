"""TF Serving warm-up records: `assets.extra/tf_serving_warmup_requests` in the SavedModel.

TF Serving (started with `--enable_model_warmup`) replays these PredictionLog records when
it loads a version, before it reports the version ready, so the first real request does
not pay for graph initialisation. One record per signature that serves real traffic, each
with a single blank image of the training size: warm-up needs the right shapes and dtypes,
not real data.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

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


def write_warmup_requests(
    export_dir: str,
    model_name: str,
    input_size: tuple[int, int],
    channels: int,
    signatures: dict[str, str],
) -> str:
    """Write one warm-up record per signature; returns the file's path.

    `signatures` maps signature name → its input kind: "examples" (a batch of serialized
    tf.Example with a PNG `image`) or "images" (a batch of uint8 images).
    """
    blank = np.zeros((*input_size, channels), dtype=np.uint8)
    png = tf.io.encode_png(blank).numpy()
    example = tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png])),
    })).SerializeToString()
    path = os.path.join(export_dir, WARMUP_FILE)
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.TFRecordWriter(path) as writer:
        for signature, kind in signatures.items():
            if kind == "examples":
                inputs = {"examples": np.array([example], dtype=object)}
            elif kind == "images":
                inputs = {"images": blank[np.newaxis]}
            else:
                raise ValueError(f"unknown warm-up input kind. Received: {kind!r}")
            writer.write(_predict_log(model_name, signature, inputs).SerializeToString())
    return path

"""Read TF Serving warm-up requests (assets.extra/tf_serving_warmup_requests) back as arrays.

    for request in read_warmup_requests("serving/digits/3"):
        request.signature_name, request.inputs["images"]     # numpy arrays
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")


@dataclass(frozen=True)
class WarmupRequest:
    """One PredictRequest of the warm-up file: signature and named input arrays."""

    signature_name: str
    inputs: dict[str, np.ndarray]


def read_warmup_requests(saved_model_dir: str) -> list[WarmupRequest]:
    """Every predict request in the SavedModel's warm-up file ([] when it has none)."""
    path = os.path.join(saved_model_dir, WARMUP_FILE)
    if not os.path.exists(path):
        return []
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    requests = []
    for record in tf.data.TFRecordDataset(path):
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        if not log.HasField("predict_log"):
            continue
        request = log.predict_log.request
        inputs = {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()}
        requests.append(WarmupRequest(request.model_spec.signature_name or "serving_default",
                                      inputs))
    return requests

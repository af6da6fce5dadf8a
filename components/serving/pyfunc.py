"""Save an mptfx classifier SavedModel as an MLflow pyfunc model (signature, input example).

    if save_pyfunc_model("Format-Serving", "/tmp/mlflow-model"):
        client.log_artifacts(run_id, "/tmp/mlflow-model", "serving_model")

The input example is the `predict_images` warm-up request the Trainer wrote
(assets.extra/tf_serving_warmup_requests); a model without one (segmentation) is not wrapped.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from components.serving.warmup_requests import read_warmup_requests

_MODEL_CODE = Path(__file__).with_name("pyfunc_model.py")
_IMAGE_SIGNATURE = "predict_images"


def image_example(saved_model_dir: str) -> np.ndarray | None:
    """The uint8 images of the model's `predict_images` warm-up request, if it has one."""
    for request in read_warmup_requests(saved_model_dir):
        if request.signature_name == _IMAGE_SIGNATURE:
            return request.inputs["images"]
    return None


def save_pyfunc_model(saved_model_dir: str, destination: str) -> bool:
    """Write an MLflow model at `destination` wrapping `saved_model_dir`; False (nothing
    written) when the SavedModel is not an image classifier with warm-up requests."""
    example = image_example(saved_model_dir)
    if example is None:
        return False
    import mlflow
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    channels = int(example.shape[-1])
    signature = ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.uint8), (-1, -1, -1, channels), "images")]),
        outputs=Schema([TensorSpec(np.dtype(np.int64), (-1,), "class_id"),
                        TensorSpec(np.dtype(np.float32), (-1, -1), "probabilities")]),
    )
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    mlflow.pyfunc.save_model(
        destination, python_model=str(_MODEL_CODE),
        artifacts={"saved_model": saved_model_dir}, signature=signature,
        input_example={"images": example}, pip_requirements=_requirements())
    return True


def _requirements() -> list[str]:
    # The versions this process runs: what the model was checked with.
    from importlib.metadata import version

    return [f"mlflow=={version('mlflow')}", f"tensorflow=={version('tensorflow')}",
            f"numpy=={version('numpy')}"]

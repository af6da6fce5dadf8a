"""The MLflow pyfunc model that wraps an mptfx SavedModel (logged as code: models from code).

MLflow copies this file into every registered version, so loading needs MLflow and
TensorFlow, not mptfx:

    model = mlflow.pyfunc.load_model("models:/digits@champion")
    out = model.predict(images)    # uint8 [N, H, W, C] → {"class_id", "probabilities"}

It calls the SavedModel's `predict_images` signature, which resizes in-graph.
"""

from __future__ import annotations

from typing import Any

import mlflow
import numpy as np

SAVED_MODEL_ARTIFACT = "saved_model"


class SavedModelClassifier(mlflow.pyfunc.PythonModel):
    """Class ids and probabilities from uint8 images via the SavedModel's predict_images."""

    def load_context(self, context: Any) -> None:
        """Load the SavedModel from the model's `saved_model` artifact."""
        import tensorflow as tf

        self._model = tf.saved_model.load(context.artifacts[SAVED_MODEL_ARTIFACT])
        self._predict = self._model.signatures["predict_images"]

    def predict(self, context: Any, model_input: Any, params: Any = None) -> dict[str, np.ndarray]:
        """uint8 images [N, H, W, C] (an array, or {"images": array}) → class_id [N],
        probabilities [N, K]."""
        import tensorflow as tf

        images = model_input["images"] if isinstance(model_input, dict) else model_input
        outputs = self._predict(images=tf.constant(np.asarray(images, dtype=np.uint8)))
        return {"class_id": outputs["class_id"].numpy(),
                "probabilities": outputs["probabilities"].numpy()}


mlflow.models.set_model(SavedModelClassifier())

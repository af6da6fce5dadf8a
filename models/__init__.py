"""Model zoo: `build_model(name, input_shape, num_classes, **params)`.

Importing this package registers every model module listed below: `seed_cnn`, `resnet50`
(classification) and `unet3d` (segmentation).
"""

from models import resnet50, seed_cnn, unet3d  # noqa: F401  (each registers its model)
from models.registry import (
    CLASSIFICATION,
    SEGMENTATION,
    available_models,
    build_model,
    model_task,
    register_model,
)

__all__ = [
    "CLASSIFICATION",
    "SEGMENTATION",
    "available_models",
    "build_model",
    "model_task",
    "register_model",
]

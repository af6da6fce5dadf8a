"""Model zoo: `build_model(name, input_shape, num_classes, **params)`.

Importing this package registers every model module listed below. Classification:
`seed_cnn` (digits-sized images), `photo_cnn` (photos, from scratch), `vit` (a small Vision
Transformer) and Keras Applications by name (`applications.py`: `mobilenet_v3_small`,
`mobilenet_v3_large`, `efficientnet_v2_b0`, `convnext_tiny`, `resnet50`; ImageNet weights
with `model.params.weights: imagenet`). Segmentation: `unet3d`. `choice.py` picks one when
`model.name` and `model.input_size` are `auto`.
"""

from models import (  # noqa: F401  (each registers its model)
    applications,
    photo_cnn,
    seed_cnn,
    unet3d,
    vit,
)
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

"""Model zoo: `build_model(name, input_shape, num_classes, **params)`.

Importing this package registers every model module listed below.
"""

from models import seed_cnn  # noqa: F401  (registers "seed_cnn")
from models.registry import available_models, build_model, register_model

__all__ = ["available_models", "build_model", "register_model"]

"""A name -> builder registry, so configs pick a model by name.

Example:

    @register_model("tiny")
    def build_tiny(input_shape, num_classes, *, units=8): ...

    model = build_model("tiny", (16, 16, 1), 10, units=4)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

import keras

ModelBuilder = Callable[..., keras.Model]

_BUILDERS: dict[str, ModelBuilder] = {}


def register_model(name: str) -> Callable[[ModelBuilder], ModelBuilder]:
    """Returns a decorator that registers a model builder under `name`.

    A builder is called as `builder(input_shape, num_classes, **params)` and returns an
    uncompiled `keras.Model` whose output is float32 class probabilities.
    """

    def decorator(builder: ModelBuilder) -> ModelBuilder:
        if name in _BUILDERS and _BUILDERS[name] is not builder:
            raise ValueError(
                f"A model is already registered under this name. Received: name={name!r}"
            )
        _BUILDERS[name] = builder
        return builder

    return decorator


def available_models() -> list[str]:
    """Returns the registered model names, sorted."""
    return sorted(_BUILDERS)


def build_model(
    name: str, input_shape: Sequence[int], num_classes: int, **params: object
) -> keras.Model:
    """Builds the registered model `name` for images of `input_shape` (H, W, C).

    Raises:
        ValueError: for an unknown name, a parameter the builder does not accept, or a
            bad shape / class count.
    """
    if name not in _BUILDERS:
        raise ValueError(f"Unknown model. Received: name={name!r}; available: {available_models()}")
    input_shape = tuple(int(d) for d in input_shape)
    if len(input_shape) != 3 or min(input_shape) < 1:
        raise ValueError(
            f"input_shape must be (height, width, channels). Received: input_shape={input_shape}"
        )
    if int(num_classes) < 2:
        raise ValueError(f"num_classes must be at least 2. Received: num_classes={num_classes}")
    builder = _BUILDERS[name]
    _check_params(name, builder, params)
    return builder(input_shape, int(num_classes), **params)


def _check_params(name: str, builder: ModelBuilder, params: dict[str, object]) -> None:
    """Raises a ValueError naming any parameter the builder does not accept."""
    signature = inspect.signature(builder)
    accepted = [
        p.name for p in signature.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(
            f"Unknown parameter(s) for model {name!r}. Received: {unknown}; accepted: {accepted}"
        )

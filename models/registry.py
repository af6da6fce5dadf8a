"""A name -> builder registry, so configs pick a model by name.

Each model is registered with its task: "classification" (images [H, W, C] -> class
probabilities [K]) or "segmentation" (volumes [D, H, W, C] -> per-voxel foreground
probability [D, H, W, 1]). The Trainer chooses its data, loss, metrics and serving
signatures from the task.

Example:

    @register_model("tiny")
    def build_tiny(input_shape, num_classes, *, units=8): ...

    model = build_model("tiny", (16, 16, 1), 10, units=4)
    model_task("tiny")  # "classification"
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence

import keras

ModelBuilder = Callable[..., keras.Model]

CLASSIFICATION = "classification"
SEGMENTATION = "segmentation"
TASKS = (CLASSIFICATION, SEGMENTATION)
# Dimensions of one input example, without the channels: images (H, W), volumes (D, H, W).
_SPATIAL_DIMS = {CLASSIFICATION: 2, SEGMENTATION: 3}
# `model.params.weights`: none, imagenet, or a Keras weights file the Trainer loads after
# building the model (the whole model's, or its backbone's). Reserved: never passed to a builder.
WEIGHTS_PARAM = "weights"
NO_WEIGHTS = "none"
IMAGENET = "imagenet"
# A backbone built alone, as Keras Applications builds it: (input_shape, weights) -> Model.
BackboneBuilder = Callable[[Sequence[int], "str | None"], keras.Model]


@dataclasses.dataclass(frozen=True)
class InputSizes:
    """The input sides a model accepts and the ones `model.input_size: auto` picks from.

    Attributes:
        minimum: the smallest side it is built for (auto never picks less; smaller images
            are upsampled to it).
        multiple: auto rounds the images' side down to a multiple of this (the network's
            total stride, so no feature map is cut unevenly).
        auto_max: auto never picks more, whatever the images' size (the family's
            documented cap: training cost grows with the square of the side).
    """

    minimum: int = 8
    multiple: int = 1
    auto_max: int = 64

    def choose(self, side: int) -> int:
        """The side auto picks for images whose median side is `side`."""
        capped = min(int(side), self.auto_max)
        return max(self.minimum, capped - capped % self.multiple)


@dataclasses.dataclass(frozen=True)
class RegisteredModel:
    """A builder and the task its models solve."""

    builder: ModelBuilder
    task: str
    # The layers after the backbone (by name); () = the last layer with weights.
    head: tuple[str, ...] = ()
    input_sizes: InputSizes = InputSizes()
    # Keras Applications' backbone alone (the weights `imagenet` and `*_notop` files hold),
    # whose weights are the model's first ones, in order; None: no pretrained backbone.
    backbone: BackboneBuilder | None = None

    @property
    def input_rank(self) -> int:
        """Dimensions of one input example including channels: 3 for images, 4 for volumes."""
        return _SPATIAL_DIMS[self.task] + 1


_MODELS: dict[str, RegisteredModel] = {}


def register_model(
    name: str,
    task: str = CLASSIFICATION,
    head: Sequence[str] = (),
    input_sizes: InputSizes | None = None,
    backbone: BackboneBuilder | None = None,
) -> Callable[[ModelBuilder], ModelBuilder]:
    """Returns a decorator that registers a model builder under `name`.

    `head` names the layers on top of the backbone (what `trainer.fine_tune` trains while
    the backbone is frozen); by default the last layer with weights. `input_sizes` says
    what `model.input_size: auto` may pick; `backbone` builds the pretrained backbone alone
    (Keras Applications models), so `model.params.weights` can be `imagenet` or a
    backbone-only file.

    A builder is called as `builder(input_shape, num_classes, **params)` and returns an
    uncompiled `keras.Model` whose output is float32: class probabilities for
    classification, a per-voxel foreground probability for segmentation.

    Raises:
        ValueError: for an unknown task, or a name already taken by another builder.
    """
    if task not in TASKS:
        raise ValueError(f"Unknown task. Received: task={task!r}; expected one of {list(TASKS)}")

    def decorator(builder: ModelBuilder) -> ModelBuilder:
        known = _MODELS.get(name)
        if known is not None and known.builder is not builder:
            raise ValueError(
                f"A model is already registered under this name. Received: name={name!r}"
            )
        _MODELS[name] = RegisteredModel(builder, task, tuple(head),
                                        input_sizes or InputSizes(), backbone)
        return builder

    return decorator


def unregister_model(name: str) -> None:
    """Removes `name` from the registry (for tests that register throwaway models)."""
    _MODELS.pop(name, None)


def known_builder(name: str) -> ModelBuilder | None:
    """The builder registered under `name`, or None."""
    registered = _MODELS.get(name)
    return registered.builder if registered else None


def model_head(name: str) -> tuple[str, ...]:
    """The head layers' names registered for `name` (() = the last layer with weights)."""
    return _registered(name).head


def model_input_sizes(name: str) -> InputSizes:
    """The input sides registered for `name`."""
    return _registered(name).input_sizes


def model_backbone(name: str) -> BackboneBuilder | None:
    """The pretrained backbone's builder registered for `name`, or None."""
    return _registered(name).backbone


def available_models() -> list[str]:
    """Returns the registered model names, sorted."""
    return sorted(_MODELS)


def model_task(name: str) -> str:
    """Returns the task ("classification" or "segmentation") of the registered model `name`.

    Raises:
        ValueError: for an unknown name.
    """
    return _registered(name).task


def build_model(
    name: str, input_shape: Sequence[int], num_classes: int, **params: object
) -> keras.Model:
    """Builds the registered model `name` for examples of `input_shape`.

    Args:
        name: a registered model name.
        input_shape: (H, W, C) for classification models, (D, H, W, C) for segmentation.
        num_classes: classes to predict (2 for binary segmentation masks).
        **params: the builder's keyword-only parameters (`model.params` in the config);
            `weights` is not passed (the Trainer loads that file after the build).

    Raises:
        ValueError: for an unknown name, a parameter the builder does not accept, or a
            bad shape / class count.
    """
    registered = _registered(name)
    input_shape = tuple(int(d) for d in input_shape)
    if len(input_shape) != registered.input_rank or min(input_shape) < 1:
        expected = "(height, width, channels)"
        if registered.task == SEGMENTATION:
            expected = "(depth, height, width, channels)"
        raise ValueError(
            f"input_shape of {name!r} must be {expected}. Received: input_shape={input_shape}"
        )
    if int(num_classes) < 2:
        raise ValueError(f"num_classes must be at least 2. Received: num_classes={num_classes}")
    params = {k: v for k, v in params.items() if k != WEIGHTS_PARAM}
    _check_params(name, registered.builder, params)
    return registered.builder(input_shape, int(num_classes), **params)


def _registered(name: str) -> RegisteredModel:
    if name not in _MODELS:
        raise ValueError(f"Unknown model. Received: name={name!r}; available: {available_models()}")
    return _MODELS[name]


def check_params(name: str, params: dict[str, object]) -> None:
    """Checks `model.params` against what the registered builder `name` declares: every key
    must be one of its keyword-only parameters, and a value must have the type of that
    parameter's default (an int is a valid float). Called when the config is loaded, so a bad
    parameter fails before the Ingest rather than inside the Trainer.

    Raises:
        ValueError: naming the model, the parameter and the received value.
    """
    builder = _registered(name).builder
    params = {k: v for k, v in params.items() if k != WEIGHTS_PARAM}
    _check_params(name, builder, params)
    defaults = inspect.signature(builder).parameters
    for key, value in params.items():
        default = defaults[key].default
        if default is inspect.Parameter.empty or default is None:
            continue
        if not _same_kind(value, default):
            raise ValueError(
                f"parameter {key!r} of model {name!r} must be a {type(default).__name__} "
                f"like its default {default!r}. Received: {value!r}"
            )


def _same_kind(value: object, default: object) -> bool:
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    if isinstance(default, (list, tuple)):
        return isinstance(value, (list, tuple))
    return isinstance(value, type(default))


def _check_params(name: str, builder: ModelBuilder, params: dict[str, object]) -> None:
    """Raises a ValueError naming any parameter the builder does not accept."""
    parameters = list(inspect.signature(builder).parameters.values())
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return  # a user's `build_model(input_shape, num_classes, **params)` takes any
    # Past (input_shape, num_classes), any parameter that can be passed by name.
    named = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    accepted = [p.name for p in parameters[2:] if p.kind in named]
    unknown = sorted(set(params) - set(accepted) - {WEIGHTS_PARAM})
    if unknown:
        raise ValueError(
            f"Unknown parameter(s) for model {name!r}. Received: {unknown}; accepted: {accepted}"
        )

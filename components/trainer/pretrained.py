"""Starting weights: `model.params.weights` as `none`, `imagenet` or a file.

- `imagenet`: the model's registered backbone (models/applications.py) is built alone with
  Keras' own `weights="imagenet"`: `keras.utils.get_file` takes the file from
  `$KERAS_HOME/models/` (default `~/.keras/models/`) or downloads it there, checking its
  hash. `check_imagenet_available` does that before the Ingest, so a machine without the
  file and without a network stops in seconds with one line naming the URL and the path
  where the file can be placed.
- a file: the whole model's weights (`model.save_weights` of the same model, input size,
  channels and classes, e.g. an earlier run's Format-Keras file) load as they are; else,
  for a model with a pretrained backbone, the backbone's (Keras Applications' `*_notop.h5`
  files, or a backbone's own `save_weights`) load into the backbone built alone.

A backbone's weights are the model's first ones, in the order the backbone built alone has
them; they are copied over after a shape check, so any dtype policy and distribution
strategy trains from them. `StartWeights.backbone_checksum`, their checksum as copied, is
recorded in training_summary.json.

    start = load_start_weights(model, "imagenet", "mobilenet_v3_small", {}, (224, 224, 3), 5)
    start.loaded, start.backbone_checksum
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence

import keras
import numpy as np
from absl import logging

from components.core.text import one_line
from components.trainer.warm_start import arrays_checksum, load_weights_file
from models.registry import IMAGENET, NO_WEIGHTS, model_backbone

_KEY = "model.params.weights"
_FETCH_FAILURE = re.compile(r"URL fetch failure on (\S+?): (.*)")


class WeightsUnavailableError(ValueError):
    """The ImageNet weights are neither in Keras' cache nor downloadable; the message names
    the URL and the path to place the file at."""


@dataclasses.dataclass(frozen=True)
class StartWeights:
    """What training started from.

    Attributes:
        source: "imagenet" or the file's path.
        loaded: "model" (every weight) or "backbone" (the backbone's; the head is new).
        backbone_checksum: of the model's backbone weights right after loading (None for a
            whole model): `warm_start.weights_checksum` of the backbone built alone from the
            same file gives the same value.
    """

    source: str
    loaded: str
    backbone_checksum: str | None

    def to_dict(self) -> dict[str, str | None]:
        """The record in training_summary.json (`start_weights`)."""
        return dataclasses.asdict(self)


def keras_cache_dir() -> str:
    """Where Keras' `get_file` keeps model weights: `$KERAS_HOME/models` (~/.keras/models)."""
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return os.path.join(home, "models")


def imagenet_backbone(model_name: str, input_size: Sequence[int]) -> keras.Model:
    """The registered backbone of `model_name` with ImageNet weights (float32), through
    Keras' get_file (cache or download).

    Raises:
        WeightsUnavailableError: the file is not cached and cannot be downloaded.
    """
    builder = model_backbone(model_name)
    if builder is None:
        raise ValueError(f"{_KEY} imagenet: model {model_name!r} has no pretrained backbone")
    try:
        with _float32_policy():
            return builder(input_size, IMAGENET)
    except Exception as error:  # get_file raises a bare Exception for a failed fetch
        match = _FETCH_FAILURE.search(str(error))
        if not match:
            raise
        url = match.group(1)
        target = os.path.join(keras_cache_dir(), os.path.basename(url))
        raise WeightsUnavailableError(
            f"{_KEY} imagenet: cannot download {url} ({match.group(2).strip()}); place that "
            f"file at {target} (or set KERAS_HOME), or use model.params.weights=none"
        ) from None


def check_imagenet_available(model_name: str, input_size: Sequence[int] | str) -> None:
    """Before the Ingest: the ImageNet weights of `model_name` load (cached or downloaded).

    Raises:
        WeightsUnavailableError: as `imagenet_backbone`.
    """
    size = (224, 224) if input_size == "auto" else tuple(int(v) for v in input_size)
    imagenet_backbone(model_name, size)


def load_start_weights(
    model: keras.Model,
    weights: str,
    model_name: str,
    model_params: Mapping[str, object],
    input_shape: tuple[int, ...],
    num_classes: int,
) -> StartWeights | None:
    """Loads `weights` ("none", "imagenet" or a file) into the freshly built `model`.

    Raises:
        ValueError: one line naming model.params.weights, the file and what differs.
        WeightsUnavailableError: `imagenet` and no cached or downloadable file.
    """
    if not weights or weights == NO_WEIGHTS:
        return None
    if weights == IMAGENET:
        backbone = imagenet_backbone(model_name, input_shape[:2])
        return _copy_backbone(model, backbone, IMAGENET)
    try:
        load_weights_file(model, weights, model_name, model_params, input_shape, num_classes)
        return StartWeights(weights, "model", None)
    except ValueError as whole_model_error:
        builder = model_backbone(model_name)
        if builder is None:
            raise
        try:
            with _float32_policy():
                backbone = builder(input_shape[:2], None)
            backbone.load_weights(weights)
        except (ValueError, OSError, KeyError) as error:
            raise ValueError(
                f"{one_line(whole_model_error)}; nor is it {model_name}'s backbone alone: "
                f"{one_line(error)[:200]}") from None
        return _copy_backbone(model, backbone, weights)


def _copy_backbone(model: keras.Model, backbone: keras.Model, source: str) -> StartWeights:
    """Copies the backbone's weights into the model's first weights, shape by shape."""
    values = backbone.get_weights()
    targets = model.weights[:len(values)]
    shapes = [tuple(v.shape) for v in targets]
    if len(targets) < len(values) or shapes != [tuple(w.shape) for w in values]:
        raise ValueError(f"{_KEY} {source}: the backbone's {len(values)} weights do not match "
                         f"the model's first ones")
    for variable, value in zip(targets, values, strict=True):
        variable.assign(np.asarray(value, dtype=variable.dtype))
    # Of the model's own copy, read back: equal to the file's only if every weight arrived.
    checksum = arrays_checksum([keras.ops.convert_to_numpy(v) for v in targets])
    logging.info("Trainer: backbone weights from %s (%d weights, checksum %s); the head "
                 "starts from random weights", source, len(values), checksum[:16])
    return StartWeights(source, "backbone", checksum)


class _float32_policy:  # noqa: N801 (used as a context manager)
    """Builds under the float32 policy, restoring the caller's."""

    def __enter__(self) -> None:
        self._previous = keras.mixed_precision.global_policy()
        keras.mixed_precision.set_dtype_policy("float32")

    def __exit__(self, *exc: object) -> None:
        keras.mixed_precision.set_dtype_policy(self._previous)

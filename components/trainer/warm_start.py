"""Keras weights inside the Model artifact, warm-starting from a base model's, and starting
from a weights file (`model.params.weights`).

Every Trainer run saves the float32 model's weights to
`<Model artifact>/Format-Keras/model.weights.h5`, beside `Format-Serving`. With
`trainer.warm_start: true` and a base model (TFX passes the Trainer's `base_model` input
as `fn_args.base_model`, its `Format-Serving` folder), training starts from the base
model's weights; a base model of another architecture is reported in one log line and
training starts from scratch.

Example:

    started_from = warm_start_weights(model, "seed_cnn", {}, (16, 16, 1), 10,
                                      fn_args.base_model)
    ...
    save_keras_weights(float_model, fn_args.serving_model_dir)
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from components.core.text import one_line
from components.trainer.export import build_in_float32

KERAS_DIR = "Format-Keras"
WEIGHTS_FILE = "model.weights.h5"


def keras_weights_path(serving_model_dir: str) -> str:
    """`<dirname(serving_model_dir)>/Format-Keras/model.weights.h5`."""
    return os.path.join(os.path.dirname(serving_model_dir.rstrip("/")), KERAS_DIR, WEIGHTS_FILE)


def save_keras_weights(float_model: keras.Model, serving_model_dir: str) -> str:
    """Saves `float_model`'s weights beside the serving model; returns the file's path."""
    path = keras_weights_path(serving_model_dir)
    tf.io.gfile.makedirs(os.path.dirname(path))
    float_model.save_weights(path)
    return path


def warm_start_weights(
    model: keras.Model,
    model_name: str,
    model_params: Mapping[str, object],
    input_shape: tuple[int, ...],
    num_classes: int,
    base_model_dir: str | None,
) -> str | None:
    """Loads the base model's Keras weights into `model`; returns their path, or None.

    Args:
        model: the freshly built model to train, under any dtype policy.
        model_name, model_params, input_shape, num_classes: how `model` was built.
        base_model_dir: `fn_args.base_model` (the base model's `Format-Serving` folder),
            or None/"" when there is no base model.

    Returns:
        The weights file loaded, or None when there is no base model, it has no Keras
        weights, or its architecture differs (each case logged in one line).
    """
    if not base_model_dir:
        logging.info("Trainer: warm start requested but there is no base model; from scratch")
        return None
    path = keras_weights_path(base_model_dir)
    if not tf.io.gfile.exists(path):
        logging.info("Trainer: base model has no %s; training from scratch", path)
        return None
    base = build_in_float32(model_name, model_params, input_shape, num_classes)
    try:
        base.load_weights(path)
        weights = base.get_weights()
        shapes = [tuple(w.shape) for w in weights]
        expected = [tuple(v.shape) for v in model.weights]
        if shapes != expected:
            raise ValueError(f"{len(shapes)} weights {shapes[:3]}... vs {expected[:3]}...")
    except (ValueError, OSError, KeyError) as error:
        reason = one_line(error)
        logging.warning(
            "Trainer: base model %s has another architecture than %s (%s); training from "
            "scratch",
            path,
            model_name,
            reason[:200],
        )
        return None
    model.set_weights(
        [np.asarray(w, dtype=v.dtype) for w, v in zip(weights, model.weights, strict=True)]
    )
    logging.info("Trainer: warm-started from %s", path)
    return path


def load_weights_file(
    model: keras.Model,
    path: str,
    model_name: str,
    model_params: Mapping[str, object],
    input_shape: tuple[int, ...],
    num_classes: int,
) -> str:
    """Loads the Keras weights file `path` (`model.params.weights`) into `model`.

    The file is read into a float32 build of the same model (as `model.save_weights` of a
    model built like this one writes it, e.g. an earlier run's Format-Keras file), then
    copied over, so it loads under any dtype policy and distribution strategy.

    Raises:
        ValueError: one line naming `model.params.weights`, the file and what differs.
    """
    key = "model.params.weights"
    if not tf.io.gfile.exists(path):
        raise ValueError(f"{key}: no such file {path}")
    twin = build_in_float32(model_name, model_params, input_shape, num_classes)
    try:
        twin.load_weights(path)
    except (ValueError, OSError, KeyError) as error:
        raise ValueError(
            f"{key} {path} does not fit model {model_name!r} built for input "
            f"{tuple(input_shape)} and {num_classes} classes (it must come from the same "
            f"model, input size, channels and classes): {_load_failure(error)}"
        ) from None
    model.set_weights(
        [np.asarray(w, dtype=v.dtype) for w, v in zip(twin.get_weights(), model.weights,
                                                     strict=True)]
    )
    logging.info("Trainer: starting from the weights in %s (%s)", path, key)
    return path


def _load_failure(error: BaseException) -> str:
    """What Keras' load error says, in a few words: the first layer and the shapes that
    differ (Keras' message goes on to print the whole variable)."""
    text = str(error)
    layer = re.search(r"for object <(\w+) name=([^,>]+)", text)
    shapes = re.search(r"variable\.shape=(\([^)]*\)), Received: value\.shape=(\([^)]*\))", text)
    counts = re.search(r"expected (\d+) variables, but received (\d+)", text)
    where = f"layer {layer.group(2)!r} ({layer.group(1)})" if layer else ""
    if where and shapes:
        return f"{where} is {shapes.group(1)} in the model, {shapes.group(2)} in the file"
    if where and counts:
        return (f"{where} has {counts.group(1)} weights in the model, {counts.group(2)} in "
                "the file")
    return f"{where}: {one_line(error)[:200]}" if where else one_line(error)[:300]


def weights_checksum(model: keras.Model) -> str:
    """sha256 over every weight as float32 bytes, in the model's weight order.

    Recorded before training (`initial_weights_checksum`) and after it
    (`final_weights_checksum`), so anyone can check that a warm-started run began exactly
    from its base model's final weights, under any dtype policy.
    """
    return arrays_checksum(model.get_weights())


def arrays_checksum(arrays: list) -> str:
    """sha256 over `arrays` as float32 bytes, in order (`weights_checksum` of a model's)."""
    import hashlib

    digest = hashlib.sha256()
    for weight in arrays:
        digest.update(np.asarray(weight, dtype=np.float32).tobytes())
    return digest.hexdigest()

"""The check of a user's model file before anything runs (`mptfx run`, `mptfx bench`).

The file is imported, its builder called once under the resolved dtype policy, the result
linted (components/trainer/lint.py) and run forward and backward on a small random batch,
so the usual mixed-precision mistakes stop the run in seconds instead of after the Ingest:

- the file does not import, or has no builder, or the builder returns no `keras.Model`;
- the output is not float32 (softmax/sigmoid in float16);
- a layer's call fails under the policy -- most often a custom layer mixing a float32
  constant or weight with float16 inputs.

Each refusal is a `UserModelError` whose message is one line naming the file, the layer
and the fix; the exception chain keeps the full traceback for the log.

Example:

    notes = check_model_file("my_model.py", "build_model", "classification", {},
                             (16, 16, 1), "mixed_float16", "policy")
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from components.core.text import one_line
from components.trainer.lint import MixedPrecisionLintError, check_mixed_precision
from components.trainer.precision import find_recurrent_layers, recurrent_precision_warning
from models.registry import SEGMENTATION, WEIGHTS_PARAM
from models.user_module import UserModelError, load_builder

CHECK_BATCH = 2
# Classes for the check build: the class count is known only after the Ingest; a model that
# builds for 2 builds for any count.
CHECK_CLASSES = 2
# model.input_size auto: the check builds at this size (a model that builds there builds for
# the photo sizes auto picks; a digits-only model is checked at its own size when given).
AUTO_CHECK_SIZE = (32, 32)
_LAYER_FIX = ("Fix: inside the layer's call(), compute in self.compute_dtype: cast constants "
              "and weights with ops.cast(x, self.compute_dtype)")


def check_model_file(
    module_file: str,
    builder: str,
    task: str,
    params: Mapping[str, Any],
    input_shape: Sequence[int],
    policy: str,
    recurrent_precision: str = "policy",
) -> list[str]:
    """Imports `module_file`, builds and runs its model once under `policy`; returns notes.

    Args:
        module_file: the model file (as the config names it).
        builder: the function to call (`model.builder`).
        task: "classification" or "segmentation" (`model.task`).
        params: `model.params`, passed to the builder as keyword arguments.
        input_shape: one example's shape, (H, W, C) or (D, H, W, C).
        policy: the resolved dtype policy name, e.g. "mixed_float16".
        recurrent_precision: `trainer.recurrent_precision`, for the recurrent-layer note.

    Returns:
        Lines to show the user (the recurrent-layer warning, if any).

    Raises:
        UserModelError: one line naming the file, the layer and the fix.
    """
    function = load_builder(module_file, builder)
    previous_policy = keras.mixed_precision.global_policy()
    filtering = keras.config.is_traceback_filtering_enabled()
    keras.config.disable_traceback_filtering()  # keep the user's layer frames for naming it
    keras.mixed_precision.set_dtype_policy(policy)
    num_classes = CHECK_CLASSES
    try:
        try:
            model = function(tuple(int(d) for d in input_shape), num_classes,
                             **{k: v for k, v in params.items() if k != WEIGHTS_PARAM})
        except Exception as error:
            raise _layer_failure(module_file, error, policy, f"{builder}() failed") from error
        if not isinstance(model, keras.Model):
            raise UserModelError(
                f"model.module_file {module_file}: {builder}() returned "
                f"{type(model).__module__}.{type(model).__name__}, not a keras.Model. Fix: "
                "return keras.Model(inputs, outputs) (uncompiled)"
            )
        try:
            check_mixed_precision(model, policy)
        except MixedPrecisionLintError as error:
            raise UserModelError(f"model.module_file {module_file}: {error}") from error
        _run_once(model, module_file, task, input_shape, policy)
        warning = recurrent_precision_warning(find_recurrent_layers(model), policy,
                                              recurrent_precision)
    finally:
        keras.mixed_precision.set_dtype_policy(previous_policy)
        if filtering:
            keras.config.enable_traceback_filtering()
    return [f"model.module_file {module_file}: {warning}"] if warning else []


def _run_once(model: keras.Model, module_file: str, task: str, input_shape: Sequence[int],
              policy: str) -> None:
    """One forward and backward pass on a random batch, as the first train step does."""
    batch = np.random.default_rng(0).uniform(size=(CHECK_BATCH, *input_shape))
    inputs = tf.constant(batch.astype("float32"))
    try:
        with tf.GradientTape() as tape:
            outputs = model(inputs, training=True)
            loss = tf.reduce_mean(tf.cast(outputs, tf.float32))
        tape.gradient(loss, model.trainable_variables)
    except Exception as error:
        raise _layer_failure(module_file, error, policy, "the model's first step failed") \
            from error
    dtype = keras.backend.standardize_dtype(outputs.dtype)
    if dtype != "float32":
        raise UserModelError(
            f"model.module_file {module_file}: the model's output is {dtype} under {policy}, "
            'not float32. Fix: end the model with keras.layers.Activation("softmax", '
            'dtype="float32")' + (" (sigmoid for segmentation)" if task == SEGMENTATION else "")
        )


def _layer_failure(module_file: str, error: BaseException, policy: str,
                   what: str) -> UserModelError:
    """One line for an exception raised while building or calling the model."""
    layer = _failing_layer(error)
    reason = _reason(error)
    if layer is None:
        return UserModelError(f"model.module_file {module_file}: {what} under {policy}: {reason}")
    return UserModelError(
        f"model.module_file {module_file}: layer {layer.name!r} ({type(layer).__name__}) "
        f"fails under {policy}: {reason}. {_LAYER_FIX}"
    )


def _failing_layer(error: BaseException) -> keras.layers.Layer | None:
    """The innermost Keras layer (not model) whose `call` is on the traceback."""
    found = None
    for frame, _ in traceback.walk_tb(error.__traceback__):
        owner = frame.f_locals.get("self")
        if (frame.f_code.co_name == "call" and isinstance(owner, keras.layers.Layer)
                and not isinstance(owner, keras.Model)):
            found = owner
    return found


def _reason(error: BaseException) -> str:
    """The first line that says what went wrong: of the original error (Keras re-raises a
    layer's error as "Could not automatically infer the output shape"), without Keras'
    "Exception encountered" preamble."""
    while error.__cause__ is not None or error.__context__ is not None:
        error = error.__cause__ or error.__context__
    text = "\n".join(line for line in str(error).splitlines()
                     if not line.strip().startswith("Exception encountered when"))
    return f"{type(error).__name__}: {one_line(text, limit=300) or type(error).__name__}"


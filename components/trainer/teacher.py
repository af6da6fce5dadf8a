"""The teacher of `trainer.distill`: how every trained model describes itself so that it can
teach later, finding a teacher from a path, and building it frozen under a precision.

Every Trainer run writes `model.json` beside its float32 Keras weights, and the same
description inside its SavedModel (a served version folder is a copy of it):

    <Model artifact>/Format-Keras/model.weights.h5
                    /Format-Keras/model.json                          the description
                    /Format-Serving/assets.extra/mptfx_model.json     the same, in the SavedModel

The description names the registry model, its parameters, input shape, classes and the
absolute path of the Keras weights, so a teacher is rebuilt from the registry under any
dtype policy (its precision follows `trainer.distill.precision`, measured with `auto`) and
strategy. A SavedModel whose Keras weights are out of reach teaches through its
`predict_normalized` signature, in the precision it was exported in; its class names come
from the description or from the monitoring reference every classifier carries.

    source = read_teacher("/ws/serving/digits/3")
    check_classes(source, task.label_names)
    teacher = build_teacher(source, "mixed_bfloat16", strategy)
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from components.core.saved_model import SAVED_MODEL_FILE
from components.trainer.warm_start import KERAS_DIR, WEIGHTS_FILE, load_weights_file

KEY = "trainer.distill.teacher"
DESCRIPTION_FILE = "model.json"
SAVED_MODEL_DESCRIPTION = os.path.join("assets.extra", "mptfx_model.json")
# What every classifier's SavedModel carries (components/monitor/reference.py).
_MONITOR_REFERENCE = os.path.join("assets.extra", "mptfx_monitor", "reference.json")
_SIGNATURE = "predict_normalized"
_LATENCY_RUNS = 50


class TeacherError(ValueError):
    """The teacher cannot be used; one line naming trainer.distill.teacher and the path."""


@dataclasses.dataclass(frozen=True)
class TeacherSource:
    """A teacher found on disk.

    Attributes:
        path: what trainer.distill.teacher named (absolute).
        description: its model.json ({} for a SavedModel that has none).
        keras_weights: the float32 weights to rebuild it from, or None: it teaches through
            its SavedModel's graph.
        saved_model_dir: its SavedModel (size and latency are reported), or None.
        label_names: its classes, index = class id.
    """

    path: str
    description: Mapping[str, Any]
    keras_weights: str | None
    saved_model_dir: str | None
    label_names: list[str]

    @property
    def model_name(self) -> str:
        """The registry model it was trained as ("SavedModel" when unknown)."""
        return str(self.description.get("model") or "SavedModel")


@dataclasses.dataclass
class BuiltTeacher:
    """The teacher ready for the train step.

    Attributes:
        predict: float32 probabilities of an image batch of `input_size` x `channels`.
        parameters: its parameter count.
        precision: the dtype policy it computes in ("saved graph: ..." for a SavedModel).
        input_size, channels: what it takes.
    """

    predict: Callable[[tf.Tensor], tf.Tensor]
    parameters: int
    precision: str
    input_size: list[int]
    channels: int


def describe_model(model_name: str, model_params: Mapping[str, Any],
                   input_shape: Sequence[int], label_names: Sequence[str], precision: str,
                   keras_weights: str, model_section: Mapping[str, Any]) -> dict[str, Any]:
    """The description written beside a trained model (`model_section`: the Trainer's
    `model` config, whose module file, builder and task rebuild a user's model)."""
    module_file = model_section.get("module_file") or ""
    return {
        "model": model_name, "params": dict(model_params),
        "input_shape": [int(d) for d in input_shape], "label_names": list(label_names),
        "precision": precision, "keras_weights": os.path.abspath(keras_weights),
        **({"module_file": module_file, "builder": model_section.get("builder"),
            "task": model_section.get("task"),
            "module_sha256": model_section.get("module_sha256")} if module_file else {}),
    }


def write_model_description(serving_model_dir: str, description: Mapping[str, Any]) -> None:
    """Writes `description` beside the Keras weights and inside the SavedModel."""
    keras_dir = os.path.join(os.path.dirname(serving_model_dir.rstrip("/")), KERAS_DIR)
    for path in (os.path.join(keras_dir, DESCRIPTION_FILE),
                 os.path.join(serving_model_dir, SAVED_MODEL_DESCRIPTION)):
        tf.io.gfile.makedirs(os.path.dirname(path))
        with tf.io.gfile.GFile(path, "w") as f:
            f.write(json.dumps(description, indent=2))


def read_teacher(path: str) -> TeacherSource:
    """The teacher at `path`: a SavedModel folder (a served version, a Format-Serving, or a
    Model artifact holding one) or a Keras weights file with its model.json beside it.

    Raises:
        TeacherError: the path is missing, of another kind, or says nothing of its classes.
    """
    if not tf.io.gfile.exists(path):
        raise TeacherError(f"{KEY}: no such file or folder {path}")
    if not tf.io.gfile.isdir(path):
        return _weights_teacher(path)
    if not tf.io.gfile.exists(os.path.join(path, SAVED_MODEL_FILE)) and \
            tf.io.gfile.exists(os.path.join(path, "Format-Serving", SAVED_MODEL_FILE)):
        path = os.path.join(path, "Format-Serving")  # a Trainer's Model artifact
    if not tf.io.gfile.exists(os.path.join(path, SAVED_MODEL_FILE)):
        raise TeacherError(f"{KEY}: {path} is neither a SavedModel folder (no "
                           f"{SAVED_MODEL_FILE}) nor a Keras weights file (*.weights.h5)")
    description = _read_json(os.path.join(path, SAVED_MODEL_DESCRIPTION))
    weights = description.get("keras_weights")
    labels = description.get("label_names") or _read_json(
        os.path.join(path, _MONITOR_REFERENCE)).get("label_names")
    if not labels:
        raise TeacherError(f"{KEY}: the SavedModel {path} names no classes (neither "
                           f"{SAVED_MODEL_DESCRIPTION} nor {_MONITOR_REFERENCE}): export it "
                           "with mptfx, or give its Format-Keras/model.weights.h5")
    reachable = bool(weights) and tf.io.gfile.exists(weights)
    return TeacherSource(path, description, weights if reachable else None, path,
                         list(labels))


def _weights_teacher(path: str) -> TeacherSource:
    if not path.endswith(".weights.h5"):
        raise TeacherError(f"{KEY}: {path} is neither a SavedModel folder nor a Keras weights "
                           "file (*.weights.h5)")
    described = os.path.join(os.path.dirname(path), DESCRIPTION_FILE)
    description = _read_json(described)
    if not description.get("model") or not description.get("label_names"):
        raise TeacherError(f"{KEY}: no {described} beside {path} says which model and classes "
                           f"the weights belong to (mptfx writes one beside every {KERAS_DIR}/"
                           f"{WEIGHTS_FILE})")
    serving = os.path.join(os.path.dirname(os.path.dirname(path)), "Format-Serving")
    saved = serving if tf.io.gfile.exists(os.path.join(serving, SAVED_MODEL_FILE)) else None
    return TeacherSource(path, description, path, saved, list(description["label_names"]))


def _read_json(path: str) -> dict[str, Any]:
    try:
        with tf.io.gfile.GFile(path) as f:
            content = json.load(f)
    except (tf.errors.NotFoundError, OSError, ValueError):
        return {}
    return content if isinstance(content, dict) else {}


def check_classes(source: TeacherSource, label_names: Sequence[str]) -> None:
    """Teacher and student must predict the same classes in the same order.

    Raises:
        TeacherError: naming both class lists.
    """
    if list(source.label_names) != list(label_names):
        raise TeacherError(
            f"{KEY} {source.path} predicts other classes than the data: the teacher's "
            f"{_classes(source.label_names)}, the data's {_classes(label_names)}; "
            "distill from a model trained on the same classes")


def _classes(names: Sequence[str]) -> str:
    shown = ", ".join(names[:12]) + (f", ... ({len(names)})" if len(names) > 12 else "")
    return f"[{shown}]"


def build_teacher(source: TeacherSource, policy: str,
                  strategy: tf.distribute.Strategy) -> BuiltTeacher:
    """The frozen teacher under `policy` in `strategy`'s scope: rebuilt from its Keras
    weights, else its SavedModel's `predict_normalized` (in its exported precision).

    Raises:
        TeacherError: its weights do not fit the model its description names.
    """
    if source.keras_weights is None:
        return _saved_model_teacher(source, strategy)
    model = build_frozen_model(source.description, source.keras_weights, policy, strategy)
    shape = [int(d) for d in source.description["input_shape"]]
    return BuiltTeacher(lambda images: model(images, training=False), model.count_params(),
                        policy, shape[:2], shape[2])


def build_frozen_model(description: Mapping[str, Any], weights: str, policy: str,
                       strategy: tf.distribute.Strategy) -> keras.Model:
    """The described model under `policy`, in `strategy`'s scope, with the float32 weights
    in `weights`, not trainable. Leaves the global dtype policy as it found it."""
    from models.user_module import resolve_model_name

    name = resolve_model_name({**description, "name": description["model"]})
    params = dict(description.get("params") or {})
    shape = tuple(int(d) for d in description["input_shape"])
    classes = len(description["label_names"])
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_dtype_policy(policy)
    try:
        with strategy.scope():
            from models import build_model

            model = build_model(name, shape, classes, **params)
            try:
                load_weights_file(model, weights, name, params, shape, classes, key=KEY)
            except ValueError as error:
                raise TeacherError(str(error)) from None
    finally:
        keras.mixed_precision.set_dtype_policy(previous)
    model.trainable = False
    return model


def _saved_model_teacher(source: TeacherSource,
                         strategy: tf.distribute.Strategy) -> BuiltTeacher:
    with strategy.scope():
        loaded = tf.saved_model.load(source.saved_model_dir)
    if _SIGNATURE not in loaded.signatures:
        raise TeacherError(f"{KEY}: the SavedModel {source.saved_model_dir} has no "
                           f"{_SIGNATURE} signature (mptfx exports one)")
    signature = loaded.signatures[_SIGNATURE]
    spec = signature.structured_input_signature[1]["images"]
    height, width, channels = (int(d) for d in spec.shape[1:])
    parameters = int(sum(np.prod(v.shape) for v in loaded.variables))
    precision = f"saved graph ({source.description.get('precision', 'as exported')})"
    logging.info("Trainer: teacher %s through its %s signature", source.saved_model_dir,
                 _SIGNATURE)
    return BuiltTeacher(_SignatureTeacher(loaded, signature), parameters, precision,
                        [height, width], channels)


class _SignatureTeacher:
    """A loaded SavedModel's `predict_normalized`, holding the SavedModel (its variables
    live as long as the signature is called)."""

    def __init__(self, loaded: Any, signature: Callable[..., Mapping[str, tf.Tensor]]) -> None:
        self.loaded = loaded
        self.signature = signature

    def __call__(self, images: tf.Tensor) -> tf.Tensor:
        return self.signature(images=images)["probabilities"]


def folder_bytes(folder: str | None) -> int | None:
    """Total size of the files under `folder` (None when there is none)."""
    if not folder or not os.path.isdir(folder):
        return None
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, files in os.walk(folder) for name in files)


def saved_model_latency_ms(saved_model_dir: str, images: np.ndarray,
                           runs: int = _LATENCY_RUNS) -> float:
    """Median time of one single-image `predict_normalized` call of the SavedModel, after
    a warm-up call: the teacher as a server would answer one request."""
    loaded = tf.saved_model.load(saved_model_dir)
    signature = loaded.signatures[_SIGNATURE]
    singles = [tf.constant(images[i % len(images)][None]) for i in range(runs)]
    signature(images=singles[0])
    times = []
    for single in singles:
        started = time.perf_counter()
        signature(images=single)["probabilities"].numpy()
        times.append(time.perf_counter() - started)
    return 1000.0 * statistics.median(times)

"""Which model `mptfx predict` asks, and how: the workspace's TF Serving layout or TF Lite.

    choice = choose_version(serving_dir, model=None, version=None, label=None)
    predictor = open_predictor(choice, tflite_dir=None)          # or tflite_dir + variant
    probabilities = predictor(images)        # float32 [N, H, W, C] in [0, 1] -> [N, K]

The version is what models.config says (`stable` by default, any label with `label`) or a
pushed version folder by number. The SavedModel runs its `predict_normalized` signature,
the graph the Pusher published as it is: float32 unless the model was exported with
`export.serving_precision: mixed`, whose served graph computes in float16/bfloat16 (made for
a GPU: on a CPU `notes` says so). A TF Lite variant is
`<workspace>/tflite/<model>/<version>/<variant>.tflite`, run one image at a time like on a
device, with its `labels.txt`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.serving.models_config import STABLE, models_config_path, served_model_names
from components.serving.rollout import ServingTarget

_TFLITE_LABELS = "labels.txt"
_VOLUMES_SIGNATURE = "predict_volumes"


class ModelChoiceError(ValueError):
    """The model asked for is not there; the message names what is (exit 2)."""


@dataclass(frozen=True)
class VersionChoice:
    """One pushed version: `<serving_dir>/<model>/<version>/`, and how it was chosen."""

    target: ServingTarget
    version: int
    how: str  # "stable", "label canary", "version 3"

    @property
    def model(self) -> str:
        """The served model's name."""
        return self.target.model_name

    @property
    def saved_model_dir(self) -> Path:
        """The SavedModel TF Serving loads for it."""
        return Path(self.target.base_path) / str(self.version)


def _model_name(serving_dir: Path, model: str | None, preferred: str | None) -> str:
    served = served_model_names(models_config_path(serving_dir))
    if model is None and len(served) > 1 and preferred in served:
        model = preferred
    if model is not None:
        if model not in served and not ServingTarget(serving_dir, model).pushed_versions():
            raise ModelChoiceError(f"--model {model}: {serving_dir} serves "
                                   f"{', '.join(served) or 'no model'}")
        return model
    if len(served) == 1:
        return served[0]
    if not served:
        raise ModelChoiceError(f"no served model in {serving_dir} "
                               f"({models_config_path(serving_dir)} lists none): `mptfx run` "
                               f"pushes one, or give --workspace")
    raise ModelChoiceError(f"{serving_dir} serves {len(served)} models ({', '.join(served)}): "
                           f"choose one with --model")


def choose_version(serving_dir: str | os.PathLike, model: str | None = None,
                   version: int | None = None, label: str | None = None,
                   preferred: str | None = None) -> VersionChoice:
    """The version to ask: `version` if given, else the one `label` (default stable) names.
    The model is `model`, else the one model the folder serves, else `preferred` (the
    config's `pusher.model_name`) when it is among several.

    Raises:
        ModelChoiceError: naming the models, labels or versions there are.
    """
    serving_dir = Path(serving_dir)
    target = ServingTarget(serving_dir, _model_name(serving_dir, model, preferred))
    name, pushed = target.model_name, target.pushed_versions()
    if version is not None:
        if version not in pushed:
            raise ModelChoiceError(f"--version {version}: {name} has no version {version} in "
                                   f"{target.base_path}; pushed versions: "
                                   f"{', '.join(map(str, pushed)) or 'none'}")
        return VersionChoice(target, version, f"version {version}")
    labels = target.labels().as_dict()
    wanted = label or STABLE
    if wanted not in labels:
        shown = ", ".join(f"{k} {v}" for k, v in labels.items()) or "none"
        raise ModelChoiceError(f"{name} has no label {wanted!r} in {target.config_path} "
                               f"(labels: {shown})")
    if labels[wanted] not in pushed:
        raise ModelChoiceError(f"{name} label {wanted} points at version {labels[wanted]}, "
                               f"which is not in {target.base_path}")
    return VersionChoice(target, labels[wanted], STABLE if wanted == STABLE else f"label {wanted}")


@dataclass
class Predictor:
    """A model that turns normalized images into class probabilities.

    Attributes:
        input_size: (H, W) the images are resized to (the training size).
        channels: the channels they are decoded to.
        label_names: class names in class id order.
        description: what runs, for the command's last line.
        notes: lines worth telling the user before the run (e.g. float16 on a CPU).
    """

    input_size: tuple[int, int]
    channels: int
    label_names: list[str]
    description: str
    run: Any
    notes: list[str] = field(default_factory=list)

    def __call__(self, images: Any) -> Any:
        """float32 [N, H, W, C] in [0, 1] -> numpy float32 [N, K]."""
        return self.run(images)


def _saved_model_predictor(choice: VersionChoice) -> Predictor:
    import tensorflow as tf

    from components.serving.label_names import read_label_names
    from components.tflite.convert import (
        SIGNATURE_KEY,
        read_signature_input,
        reduced_precision_dtypes,
    )

    folder = str(choice.saved_model_dir)
    loaded = tf.saved_model.load(folder)
    if _VOLUMES_SIGNATURE in loaded.signatures:
        raise ModelChoiceError(f"{choice.model} version {choice.version} is a segmentation "
                               f"model: mptfx predict classifies images")
    spec = read_signature_input(folder, loaded)
    signature = loaded.signatures[SIGNATURE_KEY]
    reduced = reduced_precision_dtypes(folder, loaded)
    gpus = tf.config.list_logical_devices("GPU")
    compute = "/".join(reduced) or "float32"
    device = gpus[0].name.replace("/device:", "") if gpus else "CPU"
    notes = []
    if reduced and not gpus:
        notes.append(f"{choice.model} version {choice.version} computes in {compute} "
                     f"(export.serving_precision: mixed), made for a GPU, and there is none: "
                     f"a CPU runs it slowly (--tflite fp32 runs the float32 rebuild)")
    return Predictor(
        spec.input_size, spec.channels, read_label_names(folder),
        f"{choice.model} version {choice.version} ({choice.how}), SavedModel in {compute} "
        f"on {device}",
        lambda images: signature(**{spec.name: images})["probabilities"].numpy(), notes)


def _tflite_predictor(choice: VersionChoice, tflite_dir: Path, variant: str) -> Predictor:
    import numpy as np
    import tensorflow as tf

    from components.ingest.reader import parallel_calls
    from components.tflite.parity import dequantize, quantize

    folder = tflite_dir / str(choice.version)
    path = folder / f"{variant}.tflite"
    if not path.exists():
        published = sorted(p.stem for p in folder.glob("*.tflite")) if folder.is_dir() else []
        raise ModelChoiceError(f"--tflite {variant}: no {path}; {choice.model} version "
                               f"{choice.version} has {', '.join(published) or 'no TF Lite'} "
                               f"variants")
    interpreter = tf.lite.Interpreter(model_path=str(path), num_threads=parallel_calls())
    [detail] = interpreter.get_input_details()
    _, height, width, channels = (int(d) for d in detail["shape"])
    interpreter.allocate_tensors()
    output = interpreter.get_output_details()[0]

    def run(images: Any) -> Any:
        batch = images.numpy() if hasattr(images, "numpy") else np.asarray(images)
        out = []
        for image in batch:  # the converted model's batch is one image, as on a device
            interpreter.set_tensor(detail["index"], quantize(image[np.newaxis], detail))
            interpreter.invoke()
            out.append(dequantize(interpreter.get_tensor(output["index"]), output)[0])
        return np.stack(out) if out else np.zeros((0, 0), np.float32)

    labels = (folder / _TFLITE_LABELS).read_text(encoding="utf-8").splitlines()
    return Predictor((height, width), channels, labels,
                     f"{choice.model} version {choice.version} ({choice.how}), TF Lite "
                     f"{variant}", run)


def open_predictor(choice: VersionChoice, tflite_dir: str | os.PathLike | None = None,
                   variant: str | None = None) -> Predictor:
    """The SavedModel of `choice`, or its TF Lite `variant` under `tflite_dir`.

    Raises:
        ModelChoiceError: a segmentation model, a variant not published for the version,
            or a SavedModel without its class names.
    """
    try:
        if variant is not None:
            return _tflite_predictor(choice, Path(tflite_dir or "."), variant)
        return _saved_model_predictor(choice)
    except FileNotFoundError as error:
        raise ModelChoiceError(str(error)) from None

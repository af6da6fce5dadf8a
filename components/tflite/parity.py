"""Parity gate: does a TF Lite model predict what the SavedModel it came from predicts?

The SavedModel's `predict_normalized` runs in batches; the TF Lite interpreter runs one
image at a time, as on a device. Float variants (`fp32`, `fp16`) must agree with the
SavedModel on the top-1 class for at least 99.5 % of the images; quantized variants
(`dynamic_int8`, `int8`) may disagree more, but may lose at most 1 accuracy point -- or one
image, on an eval split of fewer than 100 images, where one flipped image is already more
than a point and the gate could not tell quantization from a single borderline photo.

Example:

    result = check_parity(tflite_bytes, "int8", saved_model_dir, images, labels)
    if not result.passed:
        print(result.reason)
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import numpy as np
import tensorflow as tf

from components.tflite.convert import SIGNATURE_KEY

MIN_FLOAT_AGREEMENT = 0.995
MAX_QUANTIZED_ACCURACY_DROP = 0.01
FLOAT_VARIANTS = ("fp32", "fp16")
QUANTIZED_VARIANTS = ("dynamic_int8", "int8")
_WARMUP_INVOKES = 5
# Tolerates float round-off in accuracy differences, e.g. 0.93 - 0.92 = 0.010000000000000009.
_EPSILON = 1e-9


@dataclasses.dataclass(frozen=True)
class ParityResult:
    """How a TF Lite model compares with its SavedModel on the same labelled images.

    Attributes:
        variant: the conversion variant the gate was chosen for.
        examples: number of images compared.
        bytes: size of the TF Lite model.
        agreement: fraction of images with the same top-1 class in both models.
        accuracy: top-1 accuracy of the TF Lite model (fraction).
        savedmodel_accuracy: top-1 accuracy of the SavedModel (fraction).
        accuracy_delta: `accuracy - savedmodel_accuracy`, a fraction (-0.01 is a drop of
            one point).
        latency_ms: median single-image `invoke()` time after a warm-up, one thread.
        passed: whether the variant's gate passed.
        reason: the gate's verdict in words, with the numbers (set on pass and on fail).
    """

    variant: str
    examples: int
    bytes: int
    agreement: float
    accuracy: float
    savedmodel_accuracy: float
    accuracy_delta: float
    latency_ms: float
    passed: bool
    reason: str

    def to_dict(self) -> dict:
        """The result as a JSON-able dict."""
        return dataclasses.asdict(self)


def check_parity(
    tflite_model: bytes,
    variant: str,
    saved_model_dir: str,
    images: np.ndarray,
    labels: np.ndarray,
    batch_size: int = 64,
    reference: np.ndarray | None = None,
) -> ParityResult:
    """Compares a TF Lite model with the SavedModel's `predict_normalized` and gates it.

    Args:
        tflite_model: the flatbuffer from `convert`.
        variant: the variant it was converted with; chooses the gate.
        saved_model_dir: the SavedModel it was converted from.
        images: float32 `[N, H, W, C]` normalized eval images in [0, 1].
        labels: int `[N]` class indices.
        batch_size: SavedModel batch size.
        reference: `savedmodel_predictions(saved_model_dir, images)` when the caller has
            it already (the same for every variant).

    Returns:
        The comparison and the gate's verdict.

    Raises:
        ValueError: for an unknown variant, or images and labels that do not match.
    """
    if variant not in FLOAT_VARIANTS + QUANTIZED_VARIANTS:
        raise ValueError(
            f"Unknown TF Lite variant {variant!r}; valid variants are "
            f"{list(FLOAT_VARIANTS + QUANTIZED_VARIANTS)}."
        )
    images = np.asarray(images, dtype=np.float32)
    labels = np.asarray(labels).astype(np.int64)
    if images.ndim != 4 or len(images) == 0 or len(images) != len(labels):
        raise ValueError(
            "images must be a non-empty [N, H, W, C] array with one label each; received "
            f"images {images.shape} and labels {labels.shape}."
        )
    if reference is None:
        reference = savedmodel_predictions(saved_model_dir, images, batch_size)
    elif len(reference) != len(images):
        raise ValueError(f"reference has {len(reference)} classes for {len(images)} images.")
    predictions, latency_ms = tflite_predictions(tflite_model, images)
    agreement = float(np.mean(predictions == reference))
    accuracy = float(np.mean(predictions == labels))
    savedmodel_accuracy = float(np.mean(reference == labels))
    accuracy_delta = accuracy - savedmodel_accuracy
    passed, reason = gate(variant, agreement, accuracy_delta, len(images))
    return ParityResult(
        variant=variant,
        examples=len(images),
        bytes=len(tflite_model),
        agreement=agreement,
        accuracy=accuracy,
        savedmodel_accuracy=savedmodel_accuracy,
        accuracy_delta=accuracy_delta,
        latency_ms=latency_ms,
        passed=passed,
        reason=reason,
    )


def gate(variant: str, agreement: float, accuracy_delta: float,
         examples: int | None = None) -> tuple[bool, str]:
    """Applies the variant's gate; returns `(passed, reason)`.

    Float variants should reproduce the SavedModel, so they are held to top-1 agreement.
    Quantization legitimately flips borderline images either way, so quantized variants
    are held to what a user notices: the accuracy they lose, at most 1 point or, with
    `examples` < 100 images compared, one image (the smallest drop they can measure).
    """
    if variant in FLOAT_VARIANTS:
        passed = agreement >= MIN_FLOAT_AGREEMENT - _EPSILON
        relation = ">=" if passed else "<"
        return passed, (
            f"top-1 agreement {agreement:.4f} {relation} {MIN_FLOAT_AGREEMENT} required for "
            f"{variant}"
        )
    allowed = MAX_QUANTIZED_ACCURACY_DROP
    allowance = f"the {MAX_QUANTIZED_ACCURACY_DROP * 100:.0f} point drop"
    if examples and 1.0 / examples > allowed:
        allowed = 1.0 / examples
        allowance = f"the drop of one image of {examples} ({allowed * 100:.2f} points)"
    passed = -accuracy_delta <= allowed + _EPSILON
    verdict = "within" if passed else "beyond"
    return passed, (
        f"accuracy change {accuracy_delta * 100:+.2f} points vs the SavedModel, {verdict} "
        f"{allowance} allowed for {variant} (agreement {agreement:.4f})"
    )


def savedmodel_predictions(
    saved_model_dir: str, images: np.ndarray, batch_size: int = 64,
    loaded: tf.Module | None = None,
) -> np.ndarray:
    """Top-1 classes of the SavedModel's `predict_normalized` signature, int64 `[N]`
    (`loaded`: the SavedModel already loaded)."""
    loaded = tf.saved_model.load(saved_model_dir) if loaded is None else loaded
    predict = loaded.signatures[SIGNATURE_KEY]
    (input_name,) = predict.structured_input_signature[1]
    classes = []
    for start in range(0, len(images), batch_size):
        batch = tf.constant(images[start : start + batch_size])
        probabilities = predict(**{input_name: batch})["probabilities"]
        classes.append(np.argmax(probabilities.numpy(), axis=-1))
    return np.concatenate(classes).astype(np.int64)


def tflite_predictions(tflite_model: bytes, images: np.ndarray) -> tuple[np.ndarray, float]:
    """Runs the TF Lite model one image at a time.

    Quantized input and output tensors are (de)quantized with their own scale and zero
    point, so the same float images feed every variant.

    Returns:
        `(classes, latency_ms)`: int64 `[N]` top-1 classes and the median `invoke()` time.
    """
    # One thread: the latency a single-core device would see, and no contention with
    # whatever else runs on the machine.
    interpreter = tf.lite.Interpreter(model_content=tflite_model, num_threads=1)
    input_detail = interpreter.get_input_details()[0]
    single_image_shape = [1, *images.shape[1:]]
    # The signature's batch dimension is None; pin it to 1 whatever the converter chose.
    if list(input_detail["shape"]) != single_image_shape:
        interpreter.resize_tensor_input(input_detail["index"], single_image_shape)
    interpreter.allocate_tensors()
    input_detail = interpreter.get_input_details()[0]
    output_detail = interpreter.get_output_details()[0]

    def run(image: np.ndarray) -> float:
        interpreter.set_tensor(input_detail["index"], quantize(image[np.newaxis], input_detail))
        started = time.perf_counter()
        interpreter.invoke()
        return time.perf_counter() - started

    for _ in range(_WARMUP_INVOKES):
        run(images[0])
    classes, seconds = [], []
    for image in images:
        seconds.append(run(image))
        output = dequantize(interpreter.get_tensor(output_detail["index"]), output_detail)
        classes.append(int(np.argmax(output[0])))
    return np.asarray(classes, dtype=np.int64), statistics.median(seconds) * 1000.0


def quantize(values: np.ndarray, detail: dict) -> np.ndarray:
    """Float values to the tensor's dtype, using its scale and zero point when quantized."""
    dtype = detail["dtype"]
    if not np.issubdtype(dtype, np.integer):
        return values.astype(dtype)
    scale, zero_point = detail["quantization"]
    info = np.iinfo(dtype)
    quantized = np.round(values / scale + zero_point)
    return np.clip(quantized, info.min, info.max).astype(dtype)


def dequantize(values: np.ndarray, detail: dict) -> np.ndarray:
    """Tensor values to float32, using its scale and zero point when quantized."""
    if not np.issubdtype(values.dtype, np.integer):
        return values.astype(np.float32)
    scale, zero_point = detail["quantization"]
    return (values.astype(np.float32) - zero_point) * scale

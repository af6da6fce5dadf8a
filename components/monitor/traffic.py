"""Feature rows of logged traffic: one row per image a PredictionLog carries.

    rows, problems = rows_of_logs(window.records, label_names=["0", ..., "9"])
    by_version = group_by_version(window.records)       # {3: [log, ...], 4: [...]}

The request's images are read the way each signature takes them: `serving_default`'s
serialized tf.Examples (the encoded file in `image`, features from the file itself),
`predict_image_bytes`' encoded files as sent, `predict_images`' uint8 batch (encoding
`raw`), `predict_normalized`'s floats in [0, 1] (encoding `normalized`); the answer from
the response's `probabilities` and `class_name` (else `class_id` and the version's label
names). `export_images` writes the logged images out, sorted by the model's answer, as the
start of a labelled span.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from components.examples_format import IMAGE_KEY
from components.monitor.features import (
    IMAGE_FEATURES,
    UNDECODABLE,
    answer_features,
    image_features,
    pixel_features,
)

NORMALIZED_ENCODING = "normalized"
IMAGE_BYTES_INPUT = "image_bytes"  # predict_image_bytes' input (components/trainer/export.py)


def group_by_version(records: Sequence[Any]) -> dict[int, list[Any]]:
    """version -> its PredictionLogs (0: the request logger could not tell the version)."""
    grouped: dict[int, list[Any]] = defaultdict(list)
    for record in records:
        spec = record.log_metadata.model_spec
        grouped[spec.version.value if spec.HasField("version") else 0].append(record)
    return dict(grouped)


def _example_image(serialized: bytes) -> dict[str, Any]:
    from google.protobuf.message import DecodeError
    from tensorflow.core.example import example_pb2

    try:
        example = example_pb2.Example.FromString(serialized)
        encoded = example.features.feature[IMAGE_KEY].bytes_list.value[0]
    except (DecodeError, IndexError):
        return {**dict.fromkeys(IMAGE_FEATURES), "encoding": UNDECODABLE}
    return image_features(encoded)


def _image_rows(inputs: dict[str, Any]) -> list[dict[str, Any]]:
    if "examples" in inputs:
        return [_example_image(bytes(s)) for s in inputs["examples"].reshape(-1)]
    if IMAGE_BYTES_INPUT in inputs:
        return [image_features(bytes(b)) for b in inputs[IMAGE_BYTES_INPUT].reshape(-1)]
    if "images" in inputs:
        batch = inputs["images"]
        if batch.dtype.kind == "f":  # predict_normalized: [0, 1]
            return [pixel_features(image * 255.0, NORMALIZED_ENCODING) for image in batch]
        return [pixel_features(image) for image in batch]
    return []


def rows_of_log(log: Any, label_names: Sequence[str]) -> list[dict[str, Any]]:
    """The feature rows of one PredictionLog's images, with the model's answers.

    Raises:
        ValueError: the request and the response do not hold the same number of images.
    """
    import tensorflow as tf

    predict = log.predict_log
    inputs = {k: tf.make_ndarray(v) for k, v in predict.request.inputs.items()}
    outputs = {k: tf.make_ndarray(v) for k, v in predict.response.outputs.items()}
    rows = _image_rows(inputs)
    probabilities = outputs.get("probabilities")
    if probabilities is None or len(probabilities) != len(rows):
        raise ValueError(f"{len(rows)} images in the request, "
                         f"{0 if probabilities is None else len(probabilities)} answers")
    if "class_name" in outputs:
        names = [bytes(n).decode("utf-8", "replace") for n in outputs["class_name"]]
    else:
        ids = outputs.get("class_id", probabilities.argmax(axis=-1))
        names = [label_names[int(i)] if 0 <= int(i) < len(label_names) else str(int(i))
                 for i in ids]
    for row, name, probs in zip(rows, names, probabilities, strict=True):
        row.update(answer_features(name, probs.reshape(-1).tolist()))
    return rows


def rows_of_logs(logs: Sequence[Any], label_names: Sequence[str]
                 ) -> tuple[list[dict[str, Any]], int]:
    """The rows of every log; and how many logs could not be read (skipped)."""
    rows: list[dict[str, Any]] = []
    unreadable = 0
    for log in logs:
        try:
            rows += rows_of_log(log, label_names)
        except (ValueError, TypeError):
            unreadable += 1
    return rows, unreadable


def _image_files(inputs: dict[str, Any]) -> list[tuple[bytes, str] | None]:
    """(file bytes, extension) of each image a request carried: the encoded file of a
    serving_default example or of predict_image_bytes as sent, the pixels of
    predict_images as a PNG; None for an example without an image."""
    import io

    from google.protobuf.message import DecodeError
    from PIL import Image
    from tensorflow.core.example import example_pb2

    from components.monitor.features import detect_encoding

    def as_sent(encoded: bytes) -> tuple[bytes, str]:
        encoding = detect_encoding(encoded)
        return encoded, {"JPEG": "jpg"}.get(encoding, encoding.lower())

    files: list[tuple[bytes, str] | None] = []
    if "examples" in inputs:
        for serialized in inputs["examples"].reshape(-1):
            try:
                encoded = example_pb2.Example.FromString(bytes(serialized)).features.feature[
                    IMAGE_KEY].bytes_list.value[0]
            except (DecodeError, IndexError):
                files.append(None)  # keeps the answers aligned; nothing to write
                continue
            files.append(as_sent(encoded))
    elif IMAGE_BYTES_INPUT in inputs:
        files = [as_sent(bytes(b)) for b in inputs[IMAGE_BYTES_INPUT].reshape(-1)]
    elif "images" in inputs and inputs["images"].dtype.kind == "u":
        for pixels in inputs["images"]:
            out = io.BytesIO()
            Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels).save(
                out, format="PNG")
            files.append((out.getvalue(), "png"))
    return files


def export_images(logs: Sequence[Any], folder: str | os.PathLike,
                  label_names: Sequence[str]) -> int:
    """Write every logged image to `<folder>/<predicted class>/`, named by the time it was
    served: the start of a labelled span (move the wrongly answered ones to their class
    folder, then the folder to `span-<N+1>`). Returns how many images were written."""
    import tensorflow as tf

    written = 0
    for log in logs:
        inputs = {k: tf.make_ndarray(v) for k, v in log.predict_log.request.inputs.items()}
        try:
            answers = [row["predicted_class"] for row in rows_of_log(log, label_names)]
        except (ValueError, TypeError):
            continue
        stamp = log.log_metadata.timestamp_secs
        for index, (image, answer) in enumerate(zip(_image_files(inputs), answers,
                                                    strict=False)):
            if image is None:
                continue
            data, extension = image
            target = Path(folder) / answer / f"served-{stamp}-{written:06d}-{index}.{extension}"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            written += 1
    return written

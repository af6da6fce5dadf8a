"""TF Lite export: real conversions of a small digits CNN, parity gates, Examples reading,
and the TFX component's executor on real artifacts.

One module-scoped fixture writes scikit-learn's digits as an ingest-style Examples artifact
(8x8 PNGs in GZIP TFRecords), trains a small CNN on them at 16x16 and saves it like the
Trainer does (a `tf.Module` with a `predict_normalized` signature). The Dense layers are
wide on purpose: weights dominate the file, so size ratios between variants are meaningful.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_digits
from tfx.types import standard_artifacts

from components.examples_format import (
    COMPRESSION,
    EVAL_SPLIT,
    LABEL_NAMES_FIELD,
    TRAIN_SPLIT,
    labels_path,
    read_label_names,
    split_dir,
)
from components.ingest.reader import DecodedImage
from components.ingest.writer import SplitWriters, build_example
from components.tflite.component import (
    NOT_PUSHED_REASON,
    TFLiteExport,
    TFLiteModels,
    parse_variants,
    pushed_version,
)
from components.tflite.convert import VARIANTS, convert, read_signature_input
from components.tflite.data import load_split_images
from components.tflite.parity import check_parity, gate

INPUT_SIZE = (16, 16)
LABEL_NAMES = [str(digit) for digit in range(10)]
EVAL_COUNT = 400
REPRESENTATIVE_COUNT = 200


@dataclasses.dataclass
class DigitsModel:
    """A trained digits SavedModel and the Examples artifact it was trained from."""

    saved_model_dir: str
    model_uri: str
    examples_uri: str
    train_images: np.ndarray
    eval_images: np.ndarray
    eval_labels: np.ndarray


def _example(image: np.ndarray, label: int) -> tf.train.Example:
    """The Ingest writer's tf.Example of one uint8 `[h, w, c]` image."""
    png = tf.io.encode_png(image).numpy()
    return build_example(DecodedImage(0, png, *image.shape), label, str(label), f"{label}/img.png")


def _write_examples(examples_uri: Path, images: np.ndarray, labels: np.ndarray) -> None:
    """Writes uint8 `[N, 8, 8, 1]` images as an ingest-style Examples artifact."""
    order = np.random.default_rng(0).permutation(len(images))
    splits = {EVAL_SPLIT: order[:EVAL_COUNT], TRAIN_SPLIT: order[EVAL_COUNT:]}
    for split, indices in splits.items():
        folder = Path(split_dir(str(examples_uri), split))
        folder.mkdir(parents=True)
        # Two files per split: the reader must read and order all of them.
        for part, chunk in enumerate(np.array_split(indices, 2)):
            path = str(folder / f"data_tfrecord-0000{part}-of-00002.gz")
            with tf.io.TFRecordWriter(path, options=COMPRESSION) as writer:
                for index in chunk:
                    example = _example(images[index], int(labels[index]))
                    writer.write(example.SerializeToString())
    Path(labels_path(str(examples_uri))).write_text(json.dumps({LABEL_NAMES_FIELD: LABEL_NAMES}))


class _PredictNormalized(tf.Module):
    """The Trainer's `predict_normalized` signature around a Keras model."""

    def __init__(self, model: keras.Model) -> None:
        super().__init__()
        self.model = model

    @tf.function(input_signature=[tf.TensorSpec([None, *INPUT_SIZE, 1], tf.float32)])
    def predict_normalized(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"probabilities": self.model(images, training=False)}


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> DigitsModel:
    root = tmp_path_factory.mktemp("digits")
    dataset = load_digits()
    images = np.round(dataset.images / 16.0 * 255.0).astype(np.uint8)[..., np.newaxis]
    examples_uri = root / "examples"
    _write_examples(examples_uri, images, dataset.target)

    train_images, train_labels = load_split_images(str(examples_uri), "train", INPUT_SIZE, 1)
    eval_images, eval_labels = load_split_images(str(examples_uri), "eval", INPUT_SIZE, 1)
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((*INPUT_SIZE, 1)),
            keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(len(LABEL_NAMES), activation="softmax"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(train_images, train_labels, epochs=5, batch_size=32, verbose=0)

    model_uri = root / "model"
    saved_model_dir = model_uri / "Format-Serving"
    module = _PredictNormalized(model)
    tf.saved_model.save(
        module, str(saved_model_dir), signatures={"predict_normalized": module.predict_normalized}
    )
    return DigitsModel(
        saved_model_dir=str(saved_model_dir),
        model_uri=str(model_uri),
        examples_uri=str(examples_uri),
        train_images=train_images,
        eval_images=eval_images,
        eval_labels=eval_labels,
    )


@pytest.fixture(scope="module")
def converted(digits: DigitsModel) -> dict[str, bytes]:
    """Every variant converted once, plus `int8_uint8_io`."""
    representative = digits.train_images[:REPRESENTATIVE_COUNT]
    models = {
        variant: convert(digits.saved_model_dir, variant, representative_images=representative)
        for variant in VARIANTS
    }
    models["int8_uint8_io"] = convert(
        digits.saved_model_dir, "int8", representative_images=representative, uint8_io=True
    )
    return models


def _parity(digits: DigitsModel, tflite_model: bytes, variant: str):
    return check_parity(
        tflite_model, variant, digits.saved_model_dir, digits.eval_images, digits.eval_labels
    )


def test_trained_model_is_good_enough_for_parity_to_mean_something(digits: DigitsModel):
    # A near-random model would make "agreement" and "accuracy drop" trivial to meet.
    result = _parity(digits, convert(digits.saved_model_dir, "fp32"), "fp32")
    assert result.savedmodel_accuracy >= 0.9, result


def test_read_signature_input_gives_training_size_and_channels(digits: DigitsModel):
    signature_input = read_signature_input(digits.saved_model_dir)
    assert (signature_input.name, signature_input.input_size, signature_input.channels) == (
        "images",
        INPUT_SIZE,
        1,
    )


def test_fp32_agrees_with_savedmodel_and_runs_one_image_in_interpreter(
    digits: DigitsModel, converted: dict[str, bytes]
):
    interpreter = tf.lite.Interpreter(model_content=converted["fp32"])
    interpreter.allocate_tensors()
    input_detail = interpreter.get_input_details()[0]
    assert list(input_detail["shape"]) == [1, *INPUT_SIZE, 1]
    assert input_detail["dtype"] == np.float32
    interpreter.set_tensor(input_detail["index"], digits.eval_images[:1])
    interpreter.invoke()
    probabilities = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    assert probabilities.shape == (1, len(LABEL_NAMES))
    assert probabilities.sum() == pytest.approx(1.0, abs=1e-4)

    result = _parity(digits, converted["fp32"], "fp32")
    assert result.agreement >= 0.995 and result.passed, result
    assert result.examples == EVAL_COUNT and result.latency_ms > 0


def test_fp16_is_about_half_the_size_and_agrees(digits: DigitsModel, converted: dict[str, bytes]):
    assert len(converted["fp16"]) <= 0.52 * len(converted["fp32"])
    result = _parity(digits, converted["fp16"], "fp16")
    assert result.agreement >= 0.995 and result.passed, result


@pytest.mark.parametrize("variant", ["int8", "dynamic_int8"])
def test_int8_variants_are_under_30_percent_and_lose_at_most_one_point(
    digits: DigitsModel, converted: dict[str, bytes], variant: str
):
    assert len(converted[variant]) <= 0.30 * len(converted["fp32"])
    result = _parity(digits, converted[variant], variant)
    assert result.accuracy_delta >= -0.01 and result.passed, result


class _WideLayer(tf.Module):
    """`predict_normalized` of 128x128 gray images through one Dense of 16,384 inputs."""

    def __init__(self, kernel: np.ndarray, bias: np.ndarray) -> None:
        super().__init__()
        self.kernel, self.bias = tf.Variable(kernel), tf.Variable(bias)

    @tf.function(input_signature=[tf.TensorSpec([None, 128, 128, 1], tf.float32)])
    def predict_normalized(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        logits = tf.matmul(tf.reshape(images, [-1, 128 * 128]), self.kernel) + self.bias
        return {"probabilities": tf.nn.softmax(logits)}


def _tflite_probabilities(tflite_model: bytes, images: np.ndarray) -> np.ndarray:
    interpreter = tf.lite.Interpreter(model_content=tflite_model)
    interpreter.allocate_tensors()
    (input_detail,), (output_detail,) = (interpreter.get_input_details(),
                                         interpreter.get_output_details())
    rows = []
    for image in images:
        interpreter.set_tensor(input_detail["index"], image[np.newaxis])
        interpreter.invoke()
        rows.append(interpreter.get_tensor(output_detail["index"])[0])
    return np.asarray(rows)


def test_dynamic_int8_of_a_wide_one_signed_layer_predicts_like_the_savedmodel(tmp_path: Path):
    """A trained 16,384-input Dense whose weight rows are mostly of one sign made TF Lite
    2.16's asymmetric hybrid kernel up to 10 off; dynamic_int8 flipped 12 % of photos.
    Here: class 0 has small positive weights, class 1 zero-mean ones, and a bias puts
    the two near each other, so an error in class 0's logit moves the probabilities."""
    rng = np.random.default_rng(0)
    inputs = 128 * 128
    kernel = np.stack([np.abs(rng.normal(2e-4, 1e-4, inputs)),
                       rng.normal(0.0, 2e-4, inputs)], axis=1).astype(np.float32)
    images = rng.uniform(0.0, 0.4, (20, 128, 128, 1)).astype(np.float32)
    flat = images.reshape(len(images), inputs)
    bias = np.array([-float(np.median(flat @ kernel[:, 0])), 0.0], dtype=np.float32)
    module = _WideLayer(kernel, bias)
    saved_model_dir = str(tmp_path / "wide")
    tf.saved_model.save(module, saved_model_dir,
                        signatures={"predict_normalized": module.predict_normalized})
    expected = module.predict_normalized(tf.constant(images))["probabilities"].numpy()

    tflite_model = convert(saved_model_dir, "dynamic_int8")

    probabilities = _tflite_probabilities(tflite_model, images)
    assert np.abs(probabilities - expected).max() < 0.02
    result = check_parity(tflite_model, "dynamic_int8", saved_model_dir, images,
                          expected.argmax(axis=1))
    assert result.agreement == 1.0, result.reason


def test_full_integer_int8_takes_int8_and_uint8_io_takes_uint8(
    digits: DigitsModel, converted: dict[str, bytes]
):
    def io_dtypes(tflite_model: bytes) -> tuple[type, type]:
        interpreter = tf.lite.Interpreter(model_content=tflite_model)
        return (
            interpreter.get_input_details()[0]["dtype"],
            interpreter.get_output_details()[0]["dtype"],
        )

    assert io_dtypes(converted["int8"]) == (np.float32, np.float32)
    assert io_dtypes(converted["int8_uint8_io"]) == (np.uint8, np.uint8)
    # Parity quantizes the float images with the input tensor's scale and zero point.
    result = _parity(digits, converted["int8_uint8_io"], "int8")
    assert result.passed, result


def test_unknown_variant_is_named_with_the_valid_ones(digits: DigitsModel):
    with pytest.raises(ValueError, match=r"'int4'.*fp32.*fp16.*dynamic_int8.*int8"):
        convert(digits.saved_model_dir, "int4")


def test_int8_without_representative_images_is_refused(digits: DigitsModel):
    with pytest.raises(ValueError, match="representative_images"):
        convert(digits.saved_model_dir, "int8")


def test_missing_signature_names_the_model_dir(tmp_path: Path):
    module = tf.Module()
    module.serve = tf.function(lambda x: {"y": x}, input_signature=[tf.TensorSpec([None])])
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.serve})
    with pytest.raises(
        ValueError, match=rf"{re.escape(str(tmp_path))}.*predict_normalized.*serving_default"
    ):
        convert(str(tmp_path), "fp32")


def test_gates_fail_with_a_reason():
    passed, reason = gate("fp16", agreement=0.99, accuracy_delta=0.0)
    assert not passed and "0.9900" in reason
    passed, reason = gate("int8", agreement=0.95, accuracy_delta=-0.015)
    assert not passed and "-1.50 points" in reason
    assert gate("int8", agreement=0.95, accuracy_delta=-0.01)[0]
    assert gate("fp32", agreement=0.995, accuracy_delta=0.0)[0]


def test_quantized_gate_allows_one_image_on_a_small_eval_split():
    """On 12 eval photos one flipped image is 8.3 points: the smallest drop measurable."""
    passed, reason = gate("dynamic_int8", agreement=11 / 12, accuracy_delta=-1 / 12, examples=12)
    assert passed and "one image of 12" in reason
    passed, reason = gate("dynamic_int8", agreement=10 / 12, accuracy_delta=-2 / 12, examples=12)
    assert not passed and "-16.67 points" in reason and "beyond" in reason
    # 100 images or more: the 1 point rule as it is.
    assert not gate("int8", agreement=0.98, accuracy_delta=-0.02, examples=200)[0]
    assert not gate("fp16", agreement=11 / 12, accuracy_delta=0.0, examples=12)[0]


def test_load_split_images_resizes_normalizes_and_limits(tmp_path: Path):
    images = np.zeros((6, 8, 8, 1), np.uint8)
    images[1::2] = 255  # odd examples all white, even all black
    _write_split(tmp_path, "eval", images, labels=np.arange(6))

    loaded, labels = load_split_images(str(tmp_path), "eval", (16, 12), channels=1)
    assert loaded.shape == (6, 16, 12, 1) and loaded.dtype == np.float32
    assert labels.tolist() == list(range(6))
    np.testing.assert_allclose(loaded[labels % 2 == 1], 1.0)
    np.testing.assert_allclose(loaded[labels % 2 == 0], 0.0)

    rgb, _ = load_split_images(str(tmp_path), "eval", (8, 8), channels=3, limit=2)
    assert rgb.shape == (2, 8, 8, 3)
    with pytest.raises(FileNotFoundError, match="Split-train"):
        load_split_images(str(tmp_path), "train", (8, 8), channels=1)


def _write_split(examples_uri: Path, split: str, images: np.ndarray, labels: np.ndarray):
    with SplitWriters(str(examples_uri), [split]) as writers:
        for image, label in zip(images, labels, strict=True):
            writers.write(split, _example(image, int(label)))


def test_read_label_names_rejects_a_malformed_file(tmp_path: Path):
    (tmp_path / "labels.json").write_text(json.dumps({"names": ["a"]}))
    with pytest.raises(ValueError, match="labels.json"):
        read_label_names(str(tmp_path))


def test_parse_variants_names_what_is_wrong():
    assert parse_variants('["fp32", "int8"]') == ["fp32", "int8"]
    with pytest.raises(ValueError, match="'fp32'"):
        parse_variants("fp32")
    with pytest.raises(ValueError, match=r"\['bf16'\]"):
        parse_variants('["fp32", "bf16"]')


def _pushed_model(uri: Path, pushed: bool, version: str = "1700000000"):
    artifact = standard_artifacts.PushedModel()
    artifact.uri = str(uri)
    artifact.set_int_custom_property("pushed", int(pushed))
    if pushed:
        artifact.set_string_custom_property("pushed_version", version)
        artifact.set_string_custom_property("pushed_destination", f"/serving/m/{version}")
    return artifact


def _run_component(digits: DigitsModel, tmp_path: Path, pushed: bool, **parameters):
    """Runs TFLiteExport's executor as a TFX launcher would, on real artifacts."""
    model = standard_artifacts.Model()
    model.uri = digits.model_uri
    examples = standard_artifacts.Examples()
    examples.uri = digits.examples_uri
    examples.split_names = '["train", "eval"]'
    output = TFLiteModels()
    output.uri = str(tmp_path / "tflite_models")
    os.makedirs(output.uri)
    executor = TFLiteExport.EXECUTOR_SPEC.executor_class()
    executor.Do(
        input_dict={
            "model": [model],
            "examples": [examples],
            "pushed_model": [_pushed_model(tmp_path / "pushed", pushed)],
        },
        output_dict={"tflite_models": [output]},
        exec_properties={"publish_dir": str(tmp_path / "publish"), **parameters},
    )
    report = json.loads((Path(output.uri) / "report.json").read_text())
    return output, report


def test_component_publishes_passing_variants_with_labels(digits: DigitsModel, tmp_path: Path):
    # An older version to prune, and the staging folder of an export killed 2 hours ago.
    (tmp_path / "publish" / "1600000000").mkdir(parents=True)
    (tmp_path / "publish" / f".staging-{time.time() - 7200:.0f}-1-dead").mkdir()
    output, report = _run_component(
        digits,
        tmp_path,
        pushed=True,
        variants='["fp32", "int8"]',
        uint8_io=1,
        representative_samples=100,
        parity_limit=200,
        keep_versions=1,
    )
    # The version appeared whole, by one rename; nothing else is left beside it.
    assert os.listdir(tmp_path / "publish") == ["1700000000"]
    version_dir = tmp_path / "publish" / "1700000000"
    assert sorted(os.listdir(version_dir)) == ["fp32.tflite", "int8.tflite", "labels.txt"]
    assert (version_dir / "labels.txt").read_text().splitlines() == LABEL_NAMES
    assert sorted(os.listdir(output.uri)) == [
        "fp32.tflite",
        "int8.tflite",
        "labels.txt",
        "report.json",
    ]
    for variant in ("fp32", "int8"):
        entry = report[variant]
        assert entry["published"] and entry["path"] == str(version_dir / f"{variant}.tflite")
        assert entry["bytes"] == (version_dir / f"{variant}.tflite").stat().st_size
        assert entry["examples"] == 200
        assert {"agreement", "accuracy", "accuracy_delta", "latency_ms", "reason"} <= set(entry)
    interpreter = tf.lite.Interpreter(model_path=str(version_dir / "int8.tflite"))
    assert interpreter.get_input_details()[0]["dtype"] == np.uint8
    assert output.get_string_custom_property("version") == "1700000000"
    assert json.loads(output.get_string_custom_property("published_variants")) == [
        "fp32",
        "int8",
    ]


def test_component_does_nothing_for_an_unpushed_model(digits: DigitsModel, tmp_path: Path):
    output, report = _run_component(digits, tmp_path, pushed=False, variants='["fp32"]')
    assert report == {"skipped": NOT_PUSHED_REASON}
    assert not (tmp_path / "publish").exists()
    assert os.listdir(output.uri) == ["report.json"]
    assert output.get_int_custom_property("skipped") == 1


def test_pushed_version_falls_back_to_the_destination_folder(tmp_path: Path):
    artifact = _pushed_model(tmp_path, pushed=True)
    artifact.set_string_custom_property("pushed_version", "")
    assert pushed_version(artifact) == "1700000000"
    assert pushed_version(_pushed_model(tmp_path, pushed=False)) is None


def test_component_wires_into_a_pipeline_with_tfx_channels():
    from tfx.types import channel

    node = TFLiteExport(
        model=channel.Channel(type=standard_artifacts.Model),
        examples=channel.Channel(type=standard_artifacts.Examples),
        pushed_model=channel.Channel(type=standard_artifacts.PushedModel),
        publish_dir="/workspace/tflite/digits",
    )
    assert node.outputs["tflite_models"].type_name == "mptfx.TFLiteModels"
    assert node.exec_properties["publish_dir"] == "/workspace/tflite/digits"

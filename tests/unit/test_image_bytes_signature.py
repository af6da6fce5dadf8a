"""`predict_image_bytes`: a photo's own file in, the answer `serving_default` gives for the
Example holding that file out; its REST body (`{"instances": [{"b64": ...}]}`) read as TF
Serving reads it; and TF Lite still converts the SavedModel that has it."""

from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from components.serving.label_names import read_label_names
from components.serving.rest_json import RestBodyError, answer, b64, parse_request
from components.trainer.export import export_serving_model
from components.trainer.serving_warmup import WARMUP_FILE
from models import build_model

LABELS = ["temple", "dahlia", "sky"]


def _encode(pixels: np.ndarray, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image = Image.fromarray(pixels[..., 0] if pixels.shape[-1] == 1 else pixels)
    image.save(buffer, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buffer.getvalue()


def _example(image: bytes) -> bytes:
    return tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image]))})
    ).SerializeToString()


def _photos(channels: int) -> list[bytes]:
    """Photo-like files of several sizes in every format the signature takes."""
    from sklearn.datasets import load_sample_images

    photo = load_sample_images().images[0]
    if channels == 1:
        photo = np.round(photo.mean(axis=-1, keepdims=True)).astype(np.uint8)
    crops = [photo[:48, :64], photo[100:133, 200:221], photo[300:396, 10:106]]
    return [_encode(np.ascontiguousarray(crop), fmt) for crop in crops
            for fmt in ("JPEG", "PNG", "GIF", "BMP")]


@pytest.fixture(scope="module", params=[3, 1], ids=["rgb", "gray"])
def exported(request, tmp_path_factory):
    channels = request.param
    tf.keras.utils.set_random_seed(3)
    model = build_model("seed_cnn", (24, 24, channels), len(LABELS))
    export_dir = export_serving_model(model, "seed_cnn", {}, [24, 24], channels, LABELS,
                                      str(tmp_path_factory.mktemp("export") / "m"))
    return tf.saved_model.load(export_dir), export_dir, channels


def test_image_bytes_answer_what_serving_default_answers_for_the_same_files(exported):
    served, _, channels = exported
    files = _photos(channels)
    by_example = served.signatures["serving_default"](
        examples=tf.constant([_example(f) for f in files]))
    by_bytes = served.signatures["predict_image_bytes"](image_bytes=tf.constant(files))
    assert by_bytes["probabilities"].shape == (len(files), len(LABELS))
    np.testing.assert_array_equal(by_bytes["class_id"], by_example["class_id"])
    np.testing.assert_array_equal(by_bytes["class_name"], by_example["class_name"])
    np.testing.assert_allclose(by_bytes["probabilities"], by_example["probabilities"], atol=1e-6)
    # The answers are not all alike: the comparison is of different images.
    assert len({tuple(np.round(p, 5)) for p in by_bytes["probabilities"].numpy()}) > 3


def test_a_file_that_is_no_image_is_refused_as_tf_serving_refuses_it(exported):
    served, _, _ = exported
    with pytest.raises(tf.errors.InvalidArgumentError, match="Unknown image file format"):
        served.signatures["predict_image_bytes"](image_bytes=tf.constant([b"%PDF-1.4 ..."]))
    empty = served.signatures["predict_image_bytes"](image_bytes=tf.zeros([0], tf.string))
    assert empty["probabilities"].shape == (0, len(LABELS))


def test_the_rest_instances_body_of_b64_files_answers_rows_like_serving_default(exported):
    served, _, channels = exported
    jpeg, png = _photos(channels)[:2]
    signature = served.signatures["predict_image_bytes"]
    [input_name] = signature.structured_input_signature[1]
    assert input_name == "image_bytes"
    body = {"signature_name": "predict_image_bytes", "instances": [b64(jpeg), b64(png)]}
    arrays, rows = parse_request(body, {input_name: object})
    assert rows is True and arrays[input_name].tolist() == [jpeg, png]
    reply = answer({k: v.numpy() for k, v in signature(**arrays).items()}, rows)
    reference = served.signatures["serving_default"](
        examples=tf.constant([_example(jpeg), _example(png)]))
    assert [row["class_name"] for row in reply["predictions"]] == [
        name.decode() for name in reference["class_name"].numpy()]
    np.testing.assert_allclose([row["probabilities"] for row in reply["predictions"]],
                               reference["probabilities"], atol=1e-6)
    # TF Serving's own rules: one input, so no object per row; never both formats.
    with pytest.raises(RestBodyError, match="Expecting value/list but got object at item 1"):
        parse_request({"instances": [b64(jpeg), {"image": b64(png)}]}, {input_name: object})
    with pytest.raises(RestBodyError, match="exactly one of 'inputs' or 'instances'"):
        parse_request({"instances": [b64(jpeg)], "inputs": [b64(jpeg)]}, {input_name: object})


def test_the_export_writes_class_names_and_a_warm_up_record_for_the_bytes(exported):
    served, export_dir, _ = exported
    assert read_label_names(export_dir) == LABELS
    from components.serving.warmup_requests import read_warmup_requests

    [warmup] = [r for r in read_warmup_requests(export_dir)
                if r.signature_name == "predict_image_bytes"]
    assert warmup.inputs["image_bytes"][0].startswith(b"\x89PNG")
    outputs = served.signatures["predict_image_bytes"](image_bytes=tf.constant(
        warmup.inputs["image_bytes"]))
    assert outputs["class_name"].numpy()[0].decode() in LABELS
    assert WARMUP_FILE.startswith("assets.extra")


def test_tf_lite_converts_predict_normalized_of_a_model_with_the_bytes_signature(exported):
    from components.examples_format import decode_image
    from components.tflite.convert import convert
    from components.tflite.parity import tflite_predictions
    from components.trainer.data import preprocess_images

    served, export_dir, channels = exported
    files = _photos(channels)[:4]
    images = np.stack([preprocess_images(decode_image(f, channels), [24, 24]).numpy()
                       for f in files])
    classes, _ = tflite_predictions(convert(export_dir, "fp32"), images)
    by_bytes = served.signatures["predict_image_bytes"](image_bytes=tf.constant(files))
    np.testing.assert_array_equal(classes, by_bytes["class_id"])


def test_the_model_graph_is_saved_once_for_all_four_signatures(exported):
    """Each signature calls one traced forward pass: every convolution of the model is in
    saved_model.pb once (four copies made ResNet-50's file 1.5x larger and its export
    1.4-1.9x as slow)."""
    from tensorflow.core.protobuf import saved_model_pb2

    _, export_dir, _ = exported
    saved = saved_model_pb2.SavedModel.FromString(
        tf.io.gfile.GFile(f"{export_dir}/saved_model.pb", "rb").read())
    graph = saved.meta_graphs[0].graph_def
    nodes = [*graph.node, *(node for function in graph.library.function
                            for node in function.node_def)]
    convolutions = sum(node.op == "Conv2D" for node in nodes)
    model_convolutions = sum(isinstance(layer, tf.keras.layers.Conv2D)
                             for layer in build_model("seed_cnn", (24, 24, 3), 3).layers)
    assert model_convolutions > 0 and convolutions == model_convolutions
    assert set(saved.meta_graphs[0].signature_def) >= {
        "serving_default", "predict_image_bytes", "predict_images", "predict_normalized"}

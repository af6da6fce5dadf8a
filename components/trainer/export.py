"""Exports the trained model as a SavedModel with its serving signatures (four for a
classifier, three for a segmentation model).

`export.serving_precision: float32` (the default): the model is rebuilt under the float32
policy and the trained weights are copied in before saving with Keras' ExportArchive
(tf.saved_model.save underneath): any CPU serves it, and TF Lite converts it (a model
trained under mixed_float16 cannot be converted as is: float16 Conv2D needs Flex ops).

`mixed`: `Format-Serving` is the trained model itself, with the training policy's graph
(float16/bfloat16 compute, float32 outputs) for GPU serving; the float32 rebuild is saved
beside it as `Format-Float32` with the same signatures, and that is what TF Lite converts
(see `float32_model_dir`). A model trained in float32 is exported once, as with float32.

Classification signatures (see docs/INTERFACES.md):
    serving_default(examples: string [None])    -> probabilities, class_id, class_name
    predict_image_bytes(image_bytes: string [None]) -> the same three outputs
    predict_images(images: uint8 [None, None, None, C]) -> the same three outputs
    predict_normalized(images: float32 [None, H, W, C]) -> probabilities

`predict_image_bytes` takes each image's encoded file (JPEG, PNG, GIF or BMP) and decodes it
as `serving_default` decodes the Example's `image`, so both answer the same for the same
file. Its input is named `image_bytes`: TF Serving's REST API reads `{"b64": ...}` for any
string input, and the `_bytes` suffix is the convention (Cloud ML Engine's, which TF
Serving's json_tensor.cc follows for outputs) that marks a string tensor as binary, so
`{"instances": [{"b64": "<base64 JPEG>"}]}` is the whole request body. The class names are
also written to `assets.extra/labels.txt` (one per line, class id order), as TF Lite's
`labels.txt`, for clients that read `probabilities` (`mptfx predict`).

Segmentation signatures (volumes of D slices of H x W, see data.py):
    serving_default(examples: string [None]) -> probabilities (float32 [None, D*H*W], the
        foreground probability per voxel, flattened like the `mask` feature TFMA compares
        it with), mask (uint8 [None, D, H, W])
    predict_volumes(volumes: uint8 [None, D, H, W, C]) -> probabilities [None, D, H, W], mask
    predict_normalized(volumes: float32 [None, D, H, W, C]) -> probabilities [None, D, H, W, 1]

Every signature calls one traced forward pass (`_forward_pass`), so the model's graph is
traced once per SavedModel and stored once in it, not once per signature. ResNet-50 at 16x16
(2-core Xeon, 2026-12-05, three exports each): 10.9-15.4 s instead of 20.6-21.0 s, loading
2.8-4.0 s instead of 3.4-4.6 s, saved_model.pb 2.4 MB instead of 3.5 MB (docs/INTERFACES.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf

from components.examples_format import IMAGE_KEY, parse_spec
from components.serving.label_names import write_label_names
from components.trainer import data as data_lib
from components.trainer.config import SERVING_PRECISIONS
from components.trainer.serving_warmup import blank_example, blank_png, write_warmup_requests
from models import SEGMENTATION, build_model, model_task

SERVING_SIGNATURE = "serving_default"
IMAGE_BYTES_SIGNATURE = "predict_image_bytes"
IMAGE_BYTES_INPUT = "image_bytes"
IMAGES_SIGNATURE = "predict_images"
VOLUMES_SIGNATURE = "predict_volumes"
NORMALIZED_SIGNATURE = "predict_normalized"
# Beside Format-Serving in the Model artifact when the serving model is not float32.
FLOAT32_DIR = "Format-Float32"


def float32_model_dir(serving_model_dir: str) -> str:
    """`<dirname(serving_model_dir)>/Format-Float32`: the float32 rebuild of a `mixed`
    serving model (it exists only then)."""
    return os.path.join(os.path.dirname(serving_model_dir.rstrip("/")), FLOAT32_DIR)


def export_serving_model(
    trained_model: keras.Model,
    model_name: str,
    model_params: Mapping[str, object],
    input_size: Sequence[int],
    channels: int,
    label_names: Sequence[str],
    export_dir: str,
    serving_precision: str = "float32",
) -> str:
    """Saves `trained_model` to `export_dir` in `serving_precision`; returns `export_dir`.

    Args:
        trained_model: the model after training, under any dtype policy.
        model_name, model_params: how it was built (registry name and parameters).
        input_size: [H, W] it was trained at; `predict_images` resizes to it in-graph.
        channels: image channels it was trained on.
        label_names: class names, index = class id.
        export_dir: where to write the SavedModel (`fn_args.serving_model_dir`).
        serving_precision: "float32" (a float32 rebuild) or "mixed" (the trained graph,
            and the float32 rebuild in `float32_model_dir(export_dir)`, when the trained
            model computes in anything but float32).

    Raises:
        ValueError: an unknown `serving_precision`, or a rebuild that does not match.
    """
    if serving_precision not in SERVING_PRECISIONS:
        raise ValueError(f"export.serving_precision must be one of {list(SERVING_PRECISIONS)}. "
                         f"Received: serving_precision={serving_precision!r}")
    segmentation = model_task(model_name) == SEGMENTATION
    write = _write_segmentation_model if segmentation else _write_classification_model
    input_shape = (tuple(int(d) for d in trained_model.input_shape[1:]) if segmentation
                   else (int(input_size[0]), int(input_size[1]), channels))
    num_classes = 2 if segmentation else len(label_names)
    float_model = rebuild_in_float32(
        trained_model, model_name, model_params, input_shape, num_classes
    )
    if serving_precision == "float32" or _computes_in_float32(trained_model):
        # Trained in float32, the mixed graph is the float32 one: no second copy.
        write(float_model, model_name, input_shape, label_names, export_dir)
    else:
        write(trained_model, model_name, input_shape, label_names, export_dir)
        write(float_model, model_name, input_shape, label_names, float32_model_dir(export_dir))
    return export_dir


def _computes_in_float32(model: keras.Model) -> bool:
    return all(layer.dtype_policy.compute_dtype == "float32" for layer in [model, *model.layers])


def _write_classification_model(
    model: keras.Model,
    model_name: str,
    input_shape: tuple[int, ...],
    label_names: Sequence[str],
    export_dir: str,
) -> None:
    """Writes `model` (float32 outputs, any compute dtype) with the classifier signatures."""
    height, width, channels = input_shape
    functions = _ServingFunctions(model, (height, width), channels, label_names)
    _write_archive(model, functions.endpoints(), export_dir)
    write_label_names(export_dir, label_names)
    write_warmup_requests(export_dir, model_name, {
        SERVING_SIGNATURE: {
            "examples": np.array([blank_example((height, width, channels))], dtype=object)
        },
        IMAGE_BYTES_SIGNATURE: {
            IMAGE_BYTES_INPUT: np.array([blank_png((height, width, channels))], dtype=object)
        },
        IMAGES_SIGNATURE: {"images": np.zeros((1, height, width, channels), np.uint8)},
    })


def _write_segmentation_model(
    model: keras.Model,
    model_name: str,
    input_shape: tuple[int, ...],
    label_names: Sequence[str],
    export_dir: str,
) -> None:
    """Writes a segmentation `model` with the segmentation signatures."""
    functions = _SegmentationServingFunctions(model, input_shape)
    _write_archive(model, functions.endpoints(), export_dir)
    depth, height, width, channels = input_shape
    write_warmup_requests(export_dir, model_name, {
        SERVING_SIGNATURE: {
            "examples": np.array([blank_example((depth * height, width, channels))],
                                 dtype=object)
        },
        VOLUMES_SIGNATURE: {"volumes": np.zeros((1, *input_shape), np.uint8)},
    })


def _write_archive(
    model: keras.Model,
    endpoints: Mapping[str, tuple[Callable, list[tf.TensorSpec]]],
    export_dir: str,
) -> None:
    # ExportArchive (what model.export uses) tracks the raw tf.Variables; a tf.Module that
    # only holds the Keras model saves Keras-wrapped variables, which the TF 2.16 TF Lite
    # converter cannot freeze ("missing attribute 'value'", then abort).
    archive = keras.export.ExportArchive()
    archive.track(model)
    for name, (function, input_signature) in endpoints.items():
        archive.add_endpoint(name, function, input_signature=input_signature)
    archive.write_out(export_dir, verbose=False)


def build_in_float32(
    model_name: str,
    model_params: Mapping[str, object],
    input_shape: tuple[int, ...],
    num_classes: int,
) -> keras.Model:
    """Builds a registry model under the float32 policy, leaving the caller's policy as is."""
    previous_policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_dtype_policy("float32")
    try:
        return build_model(model_name, input_shape, num_classes, **dict(model_params))
    finally:
        keras.mixed_precision.set_dtype_policy(previous_policy)


def rebuild_in_float32(
    trained_model: keras.Model,
    model_name: str,
    model_params: Mapping[str, object],
    input_shape: tuple[int, ...],
    num_classes: int,
) -> keras.Model:
    """Builds the same architecture under the float32 policy and copies the weights.

    Args:
        trained_model: the model after training, under any dtype policy.
        model_name, model_params: how it was built (registry name and parameters).
        input_shape: one example's shape, (H, W, C) or (D, H, W, C).
        num_classes: the class count it was built for.

    Raises:
        ValueError: if the rebuilt model's weights do not match the trained model's.
    """
    float_model = build_in_float32(model_name, model_params, input_shape, num_classes)
    trained_weights = trained_model.get_weights()
    if len(trained_weights) != len(float_model.weights):
        raise ValueError(
            f"Rebuilt {model_name!r} does not match the trained model. Received: "
            f"{len(trained_weights)} trained weights, {len(float_model.weights)} rebuilt"
        )
    float_model.set_weights(
        [
            np.asarray(w, dtype=v.dtype)
            for w, v in zip(trained_weights, float_model.weights, strict=True)
        ]
    )
    return float_model


def _forward_pass(model: keras.Model, input_shape: Sequence[int]) -> Callable:
    """`model(x, training=False)` as one tf.function on float32 [None, *input_shape]: the
    signatures call it, and a function called from another is saved once and called."""
    return tf.function(lambda inputs: model(inputs, training=False),
                       input_signature=[tf.TensorSpec([None, *input_shape], tf.float32)])


class _ServingFunctions:
    """The Python functions behind the four signatures, closing over the model."""

    def __init__(
        self,
        model: keras.Model,
        input_size: tuple[int, int],
        channels: int,
        label_names: Sequence[str],
    ) -> None:
        self._forward = _forward_pass(model, (*input_size, channels))
        self._input_size = input_size
        self._channels = channels
        self._label_names = list(label_names)

    def endpoints(self) -> dict[str, tuple[Callable, list[tf.TensorSpec]]]:
        """Signature name -> (function, input signature)."""
        height, width = self._input_size
        channels = self._channels
        return {
            SERVING_SIGNATURE: (
                self.serve_examples,
                [tf.TensorSpec([None], tf.string, name="examples")],
            ),
            IMAGE_BYTES_SIGNATURE: (
                self.predict_image_bytes,
                [tf.TensorSpec([None], tf.string, name=IMAGE_BYTES_INPUT)],
            ),
            IMAGES_SIGNATURE: (
                self.predict_images,
                [tf.TensorSpec([None, None, None, channels], tf.uint8, name="images")],
            ),
            NORMALIZED_SIGNATURE: (
                self.predict_normalized,
                [tf.TensorSpec([None, height, width, channels], tf.float32, name="images")],
            ),
        }

    def serve_examples(self, examples: tf.Tensor) -> dict[str, tf.Tensor]:
        features = tf.io.parse_example(examples, parse_spec(label=False))
        return self.predict_image_bytes(features[IMAGE_KEY])

    def predict_image_bytes(self, image_bytes: tf.Tensor) -> dict[str, tf.Tensor]:
        # Each file decodes at its own size; the Trainer's resize makes them one batch.
        images = tf.map_fn(
            lambda encoded: data_lib.preprocess_images(
                data_lib.decode_image(encoded, self._channels), self._input_size
            ),
            image_bytes,
            fn_output_signature=tf.TensorSpec([*self._input_size, self._channels], tf.float32),
        )
        return self._classify(images)

    def predict_images(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        return self._classify(data_lib.preprocess_images(images, self._input_size))

    def predict_normalized(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"probabilities": self._forward(images)}

    def _classify(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        # oneDNN's Conv2D rejects an empty batch; answer one without running the model.
        probabilities = tf.cond(
            tf.shape(images)[0] > 0,
            lambda: self._forward(images),
            lambda: tf.zeros([0, len(self._label_names)], tf.float32),
        )
        class_id = tf.argmax(probabilities, axis=-1, output_type=tf.int64)
        class_name = tf.gather(tf.constant(self._label_names), class_id)
        return {"probabilities": probabilities, "class_id": class_id, "class_name": class_name}


class _SegmentationServingFunctions:
    """The functions behind the segmentation signatures, closing over the model."""

    def __init__(self, model: keras.Model, input_shape: tuple[int, ...]) -> None:
        self._shape = tuple(int(d) for d in input_shape)  # (D, H, W, C)
        self._forward = _forward_pass(model, self._shape)

    def endpoints(self) -> dict[str, tuple[Callable, list[tf.TensorSpec]]]:
        """Signature name -> (function, input signature)."""
        return {
            SERVING_SIGNATURE: (
                self.serve_examples,
                [tf.TensorSpec([None], tf.string, name="examples")],
            ),
            VOLUMES_SIGNATURE: (
                self.predict_volumes,
                [tf.TensorSpec([None, *self._shape], tf.uint8, name="volumes")],
            ),
            NORMALIZED_SIGNATURE: (
                self.predict_normalized,
                [tf.TensorSpec([None, *self._shape], tf.float32, name="volumes")],
            ),
        }

    def serve_examples(self, examples: tf.Tensor) -> dict[str, tf.Tensor]:
        depth, height, width, channels = self._shape
        features = tf.io.parse_example(examples, parse_spec(label=False))
        volumes = tf.map_fn(
            lambda encoded: data_lib.preprocess_volumes(
                data_lib.decode_image(encoded, channels), depth
            ),
            features[IMAGE_KEY],
            fn_output_signature=tf.TensorSpec(list(self._shape), tf.float32),
        )
        outputs = self._segment(volumes)
        batch = tf.shape(volumes)[0]
        outputs["probabilities"] = tf.reshape(
            outputs["probabilities"], [batch, depth * height * width]
        )
        return outputs

    def predict_volumes(self, volumes: tf.Tensor) -> dict[str, tf.Tensor]:
        return self._segment(tf.image.convert_image_dtype(volumes, tf.float32))

    def predict_normalized(self, volumes: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"probabilities": self._forward(volumes)}

    def _segment(self, volumes: tf.Tensor) -> dict[str, tf.Tensor]:
        # oneDNN's Conv3D rejects an empty batch; answer one without running the model.
        probabilities = tf.cond(
            tf.shape(volumes)[0] > 0,
            lambda: self._forward(volumes),
            lambda: tf.zeros([0, *self._shape[:3], 1], tf.float32),
        )[..., 0]
        mask = tf.cast(probabilities >= 0.5, tf.uint8)
        return {"probabilities": probabilities, "mask": mask}

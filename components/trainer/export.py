"""Exports the trained model as a float32 SavedModel with three serving signatures.

A model trained under mixed_float16 cannot be converted to TF Lite (float16 Conv2D needs
Flex ops), so the model is rebuilt under the float32 policy and the trained weights are
copied in before saving with Keras' ExportArchive (tf.saved_model.save underneath).

Classification signatures (see docs/INTERFACES.md):
    serving_default(examples: string [None])    -> probabilities, class_id, class_name
    predict_images(images: uint8 [None, None, None, C]) -> the same three outputs
    predict_normalized(images: float32 [None, H, W, C]) -> probabilities

Segmentation signatures (volumes of D slices of H x W, see data.py):
    serving_default(examples: string [None]) -> probabilities (float32 [None, D*H*W], the
        foreground probability per voxel, flattened like the `mask` feature TFMA compares
        it with), mask (uint8 [None, D, H, W])
    predict_volumes(volumes: uint8 [None, D, H, W, C]) -> probabilities [None, D, H, W], mask
    predict_normalized(volumes: float32 [None, D, H, W, C]) -> probabilities [None, D, H, W, 1]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf

from components.trainer import data as data_lib
from components.trainer.warmup import blank_example, write_warmup_requests
from models import SEGMENTATION, build_model, model_task

SERVING_SIGNATURE = "serving_default"
IMAGES_SIGNATURE = "predict_images"
VOLUMES_SIGNATURE = "predict_volumes"
NORMALIZED_SIGNATURE = "predict_normalized"


def export_serving_model(
    trained_model: keras.Model,
    model_name: str,
    model_params: Mapping[str, object],
    input_size: Sequence[int],
    channels: int,
    label_names: Sequence[str],
    export_dir: str,
) -> str:
    """Saves a float32 copy of `trained_model` to `export_dir`; returns `export_dir`.

    Args:
        trained_model: the model after training, under any dtype policy.
        model_name, model_params: how it was built (registry name and parameters).
        input_size: [H, W] it was trained at; `predict_images` resizes to it in-graph.
        channels: image channels it was trained on.
        label_names: class names, index = class id.
        export_dir: where to write the SavedModel (`fn_args.serving_model_dir`).
    """
    if model_task(model_name) == SEGMENTATION:
        return _export_segmentation_model(trained_model, model_name, model_params, export_dir)
    height, width = int(input_size[0]), int(input_size[1])
    float_model = rebuild_in_float32(
        trained_model, model_name, model_params, (height, width, channels), len(label_names)
    )
    functions = _ServingFunctions(float_model, (height, width), channels, label_names)
    # ExportArchive (what model.export uses) tracks the raw tf.Variables; a tf.Module that
    # only holds the Keras model saves Keras-wrapped variables, which the TF 2.16 TF Lite
    # converter cannot freeze ("missing attribute 'value'", then abort).
    archive = keras.export.ExportArchive()
    archive.track(float_model)
    for name, (function, input_signature) in functions.endpoints().items():
        archive.add_endpoint(name, function, input_signature=input_signature)
    archive.write_out(export_dir, verbose=False)
    write_warmup_requests(export_dir, model_name, {
        SERVING_SIGNATURE: {
            "examples": np.array([blank_example((height, width, channels))], dtype=object)
        },
        IMAGES_SIGNATURE: {"images": np.zeros((1, height, width, channels), np.uint8)},
    })
    return export_dir


def _export_segmentation_model(
    trained_model: keras.Model,
    model_name: str,
    model_params: Mapping[str, object],
    export_dir: str,
) -> str:
    """Saves a float32 copy of a segmentation model with the segmentation signatures."""
    input_shape = tuple(int(d) for d in trained_model.input_shape[1:])
    float_model = rebuild_in_float32(trained_model, model_name, model_params, input_shape, 2)
    functions = _SegmentationServingFunctions(float_model, input_shape)
    archive = keras.export.ExportArchive()
    archive.track(float_model)
    for name, (function, input_signature) in functions.endpoints().items():
        archive.add_endpoint(name, function, input_signature=input_signature)
    archive.write_out(export_dir, verbose=False)
    depth, height, width, channels = input_shape
    write_warmup_requests(export_dir, model_name, {
        SERVING_SIGNATURE: {
            "examples": np.array([blank_example((depth * height, width, channels))],
                                 dtype=object)
        },
        VOLUMES_SIGNATURE: {"volumes": np.zeros((1, *input_shape), np.uint8)},
    })
    return export_dir


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



class _ServingFunctions:
    """The Python functions behind the three signatures, closing over the float32 model."""

    def __init__(
        self,
        model: keras.Model,
        input_size: tuple[int, int],
        channels: int,
        label_names: Sequence[str],
    ) -> None:
        self._model = model
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
        features = tf.io.parse_example(
            examples, {data_lib.IMAGE_KEY: tf.io.FixedLenFeature([], tf.string)}
        )
        images = tf.map_fn(
            lambda encoded: data_lib.preprocess_images(
                data_lib.decode_image(encoded, self._channels), self._input_size
            ),
            features[data_lib.IMAGE_KEY],
            fn_output_signature=tf.TensorSpec([*self._input_size, self._channels], tf.float32),
        )
        return self._classify(images)

    def predict_images(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        return self._classify(data_lib.preprocess_images(images, self._input_size))

    def predict_normalized(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"probabilities": self._model(images, training=False)}

    def _classify(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        # oneDNN's Conv2D rejects an empty batch; answer one without running the model.
        probabilities = tf.cond(
            tf.shape(images)[0] > 0,
            lambda: self._model(images, training=False),
            lambda: tf.zeros([0, len(self._label_names)], tf.float32),
        )
        class_id = tf.argmax(probabilities, axis=-1, output_type=tf.int64)
        class_name = tf.gather(tf.constant(self._label_names), class_id)
        return {"probabilities": probabilities, "class_id": class_id, "class_name": class_name}


class _SegmentationServingFunctions:
    """The functions behind the segmentation signatures, closing over the float32 model."""

    def __init__(self, model: keras.Model, input_shape: tuple[int, ...]) -> None:
        self._model = model
        self._shape = tuple(int(d) for d in input_shape)  # (D, H, W, C)

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
        features = tf.io.parse_example(
            examples, {data_lib.IMAGE_KEY: tf.io.FixedLenFeature([], tf.string)}
        )
        volumes = tf.map_fn(
            lambda encoded: data_lib.preprocess_volumes(
                data_lib.decode_image(encoded, channels), depth
            ),
            features[data_lib.IMAGE_KEY],
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
        return {"probabilities": self._model(volumes, training=False)}

    def _segment(self, volumes: tf.Tensor) -> dict[str, tf.Tensor]:
        # oneDNN's Conv3D rejects an empty batch; answer one without running the model.
        probabilities = tf.cond(
            tf.shape(volumes)[0] > 0,
            lambda: self._model(volumes, training=False),
            lambda: tf.zeros([0, *self._shape[:3], 1], tf.float32),
        )[..., 0]
        mask = tf.cast(probabilities >= 0.5, tf.uint8)
        return {"probabilities": probabilities, "mask": mask}

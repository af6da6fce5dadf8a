"""Keras Applications by name: MobileNetV3 (Small, Large), EfficientNetV2-B0, ConvNeXt-Tiny
and ResNet-50, each with a float32 softmax head and its own preprocessing in the graph.

Every model takes what the Trainer feeds every model, float32 RGB (or gray) in [0, 1], and
turns it into what its ImageNet weights expect inside the graph, so serving and TF Lite see
exactly what training saw:

- `to_255` scales to [0, 255]; a gray image is repeated to three channels (`gray_to_rgb`),
  so the ImageNet weights apply to it as well;
- MobileNetV3, EfficientNetV2 and ConvNeXt then run their own `include_preprocessing`
  layers (Rescaling to [-1, 1]; ImageNet mean and variance);
- ResNet-50's `preprocess_input` is "caffe" style (BGR, ImageNet mean subtracted), which
  Keras Applications leave outside the model: `CaffePreprocessing` does it in the graph.

The backbone is built on the preprocessed tensor (`input_tensor=`), so its layers are the
model's own (`trainer.fine_tune` freezes and unfreezes its blocks), and its weights come
first, in the order the backbone built alone has them: `model.params.weights: imagenet`
(Keras' own download and cache, `$KERAS_HOME/models/`) and a `*_notop` file load through
that backbone (components/trainer/pretrained.py). The head is Dropout (optional), Dense
`logits` and a float32 softmax, so every model passes the mixed-precision lint.

    model = build_model("mobilenet_v3_small", (224, 224, 3), 5)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import keras

from models.registry import InputSizes, register_model

# The ImageNet weights were trained at 224 px; auto never picks more. Five stride-2 stages:
# sides multiple of 32. ResNet-50 still builds for 16 px (its stages bottom out at 1x1),
# which the digits use.
_PRETRAINED_SIZES = InputSizes(minimum=32, multiple=32, auto_max=224)
_RESNET_SIZES = InputSizes(minimum=16, multiple=32, auto_max=224)
# ImageNet's mean in BGR order, as keras.applications.resnet50.preprocess_input subtracts it.
_CAFFE_MEAN_BGR = (103.939, 116.779, 123.68)


@keras.saving.register_keras_serializable(package="mptfx")
class CaffePreprocessing(keras.layers.Layer):
    """RGB in [0, 255] -> BGR minus ImageNet's mean: ResNet-50's `preprocess_input`."""

    def call(self, images: keras.KerasTensor) -> keras.KerasTensor:
        mean = keras.ops.convert_to_tensor(_CAFFE_MEAN_BGR, dtype=self.compute_dtype)
        return keras.ops.flip(images, axis=-1) - mean


@dataclasses.dataclass(frozen=True)
class _Family:
    """One Keras Applications constructor and how its inputs are prepared."""

    constructor: Callable[..., keras.Model]
    own_preprocessing: bool  # the constructor takes include_preprocessing
    sizes: InputSizes = _PRETRAINED_SIZES

    def backbone(self, input_shape: Sequence[int], weights: str | None,
                 input_tensor: keras.KerasTensor | None = None) -> keras.Model:
        """The constructor without its top, average-pooled, on 3 channels."""
        kwargs = {"include_preprocessing": True} if self.own_preprocessing else {}
        shape = (int(input_shape[0]), int(input_shape[1]), 3)
        return self.constructor(include_top=False, weights=weights, pooling="avg",
                                input_shape=None if input_tensor is not None else shape,
                                input_tensor=input_tensor, **kwargs)


_FAMILIES = {
    "mobilenet_v3_small": _Family(keras.applications.MobileNetV3Small, True),
    "mobilenet_v3_large": _Family(keras.applications.MobileNetV3Large, True),
    "efficientnet_v2_b0": _Family(keras.applications.EfficientNetV2B0, True),
    "convnext_tiny": _Family(keras.applications.ConvNeXtTiny, True),
    "resnet50": _Family(keras.applications.ResNet50, False, _RESNET_SIZES),
}


def _build(family: _Family, name: str, input_shape: Sequence[int], num_classes: int,
           dropout: float) -> keras.Model:
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1). Received: dropout={dropout}")
    channels = int(input_shape[-1])
    if channels not in (1, 3):
        raise ValueError(f"{name} takes RGB or gray images. Received: {channels} channels")
    inputs = keras.Input(shape=tuple(input_shape), name="images")
    x = keras.layers.Rescaling(255.0, name="to_255")(inputs)
    if channels == 1:
        x = keras.layers.Concatenate(name="gray_to_rgb")([x, x, x])
    if not family.own_preprocessing:
        x = CaffePreprocessing(name="caffe_preprocessing")(x)
    backbone = family.backbone(input_shape, None, input_tensor=x)
    x = backbone.output
    if dropout:
        x = keras.layers.Dropout(dropout, name="dropout")(x)
    logits = keras.layers.Dense(num_classes, name="logits")(x)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(inputs, outputs, name=name)


def _register(name: str, family: _Family) -> None:
    def build(input_shape: Sequence[int], num_classes: int, *,
              dropout: float = 0.0) -> keras.Model:
        return _build(family, name, input_shape, num_classes, dropout)

    build.__name__ = f"build_{name}"
    build.__doc__ = (f"{family.constructor.__name__} from Keras Applications (no top) + "
                     "Dropout + Dense + float32 softmax; preprocessing in the graph.")
    register_model(name, head=("logits",), input_sizes=family.sizes,
                   backbone=family.backbone)(build)


for _name, _family in _FAMILIES.items():
    _register(_name, _family)

PRETRAINED_MODELS = tuple(_FAMILIES)

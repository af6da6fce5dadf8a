"""A compact convolutional network for photos trained from scratch: `model.name: auto`'s
choice for images of 32 px and more.

Four blocks of Conv(3x3, no bias)-BatchNorm-ReLU-MaxPool, the filters doubling from
`width` (32, 64, 128, 256), then global average pooling, Dropout and a Dense layer whose
softmax runs in float32. Global pooling keeps the head small at any input size (the seed
CNN's Flatten-Dense grows with the square of the side), and batch normalisation lets it
train at the learning rates of the recipe (docs/guide/training.md). BatchNormalization's
momentum is 0.9, not Keras' 0.99, so the moving statistics evaluation uses settle within
tens of steps: a folder of a few hundred photos gives only that many.

Measured against the TensorFlow "Image classification" tutorial's network on the same
photo folder: `mptfx bench --sections photo_quality` (docs/PERFORMANCE.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import keras

from models.registry import InputSizes, register_model

# Four poolings: at least 32 px (2x2 left), sides multiple of 16. auto_max 64: on the 8-class
# photo set of `mptfx bench --sections photo_quality`, 96 px gave no better accuracy than 64
# at 2.9x the training time (docs/guide/training.md "Input size").
PHOTO_CNN_SIZES = InputSizes(minimum=32, multiple=16, auto_max=64)
_BN_MOMENTUM = 0.9


@register_model("photo_cnn", head=("logits",), input_sizes=PHOTO_CNN_SIZES)
def build_photo_cnn(
    input_shape: Sequence[int],
    num_classes: int,
    *,
    width: int = 32,
    blocks: int = 4,
    dropout: float = 0.2,
) -> keras.Model:
    """`blocks` x [Conv-BN-ReLU-MaxPool] with `width` x 2^i filters, GAP, Dropout, Dense,
    softmax (float32)."""
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1). Received: dropout={dropout}")
    if blocks < 1 or width < 1:
        raise ValueError(f"blocks and width must be positive. Received: blocks={blocks}, "
                         f"width={width}")
    inputs = keras.Input(shape=tuple(input_shape), name="images")
    x = inputs
    for index in range(blocks):
        name = f"block{index + 1}"
        x = keras.layers.Conv2D(width * 2**index, 3, padding="same", use_bias=False,
                                name=f"{name}_conv")(x)
        x = keras.layers.BatchNormalization(momentum=_BN_MOMENTUM, name=f"{name}_bn")(x)
        x = keras.layers.Activation("relu", name=f"{name}_relu")(x)
        x = keras.layers.MaxPooling2D(padding="same", name=f"{name}_pool")(x)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    if dropout:
        x = keras.layers.Dropout(dropout, name="dropout")(x)
    logits = keras.layers.Dense(num_classes, name="logits")(x)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(inputs, outputs, name="photo_cnn")

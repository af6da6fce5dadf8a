"""The seed article's small CNN: two conv/pool blocks, a dense layer, softmax."""

from __future__ import annotations

from collections.abc import Sequence

import keras

from models.registry import InputSizes, register_model

# Digits-sized images (8x8) are upsampled to 16x16 so that two poolings leave 4x4; two
# poolings also make 4 the stride auto rounds to. Past 64 px the dense layer's inputs
# (side/4)^2 x 64 grow too large: a larger photo wants photo_cnn.
SEED_CNN_SIZES = InputSizes(minimum=16, multiple=4, auto_max=64)


@register_model("seed_cnn", head=("dense", "logits"), input_sizes=SEED_CNN_SIZES)
def build_seed_cnn(
    input_shape: Sequence[int],
    num_classes: int,
    *,
    dropout: float = 0.5,
    dense_units: int = 128,
) -> keras.Model:
    """Conv(32)-Pool-Conv(64)-Pool-Dense(dense_units)-Dropout-Dense(num_classes)-softmax.

    `padding="same"` keeps inputs as small as 8x8 valid. The final softmax runs in float32
    whatever the global dtype policy, so probabilities are float32 under mixed precision.
    """
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1). Received: dropout={dropout}")
    inputs = keras.Input(shape=tuple(input_shape), name="images")
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="conv1")(inputs)
    x = keras.layers.MaxPooling2D(padding="same", name="pool1")(x)
    x = keras.layers.Conv2D(64, 3, padding="same", activation="relu", name="conv2")(x)
    x = keras.layers.MaxPooling2D(padding="same", name="pool2")(x)
    x = keras.layers.Flatten(name="flatten")(x)
    x = keras.layers.Dense(dense_units, activation="relu", name="dense")(x)
    x = keras.layers.Dropout(dropout, name="dropout")(x)
    logits = keras.layers.Dense(num_classes, name="logits")(x)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(inputs, outputs, name="seed_cnn")

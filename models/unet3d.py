"""A small 3D U-Net for binary volumetric segmentation (the seed's medical-imaging example).

Encoder: `levels` stages of two 3x3x3 convolutions (each + batch norm + ReLU) and a 2x2x2
max-pool, doubling the filters each stage; a bottleneck; a decoder that upsamples,
concatenates the encoder features of the same resolution and convolves again; a 1x1x1
convolution to one logit per voxel and a float32 sigmoid. Every layer follows Keras
autocasting, so the network runs under any dtype policy and passes the mixed-precision
lint.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras

from models.registry import SEGMENTATION, register_model


def _conv_block(
    x: keras.KerasTensor, filters: int, name: str, batch_norm: bool
) -> keras.KerasTensor:
    for i in (1, 2):
        x = keras.layers.Conv3D(
            filters, 3, padding="same", use_bias=not batch_norm, name=f"{name}_conv{i}"
        )(x)
        if batch_norm:
            # momentum 0.9: the moving statistics settle within tens of steps on small sets.
            x = keras.layers.BatchNormalization(momentum=0.9, name=f"{name}_bn{i}")(x)
        x = keras.layers.Activation("relu", name=f"{name}_relu{i}")(x)
    return x


@register_model("unet3d", task=SEGMENTATION)
def build_unet3d(
    input_shape: Sequence[int],
    num_classes: int,
    *,
    base_filters: int = 8,
    levels: int = 2,
    batch_norm: bool = True,
) -> keras.Model:
    """3D U-Net: volumes [D, H, W, C] -> foreground probability [D, H, W, 1] (float32).

    Args:
        input_shape: (depth, height, width, channels); depth, height and width must be
            divisible by 2**levels.
        num_classes: 2 (background and foreground); the output is one sigmoid channel.
        base_filters: filters of the first stage (doubled at every level).
        levels: number of down-sampling stages.
        batch_norm: batch normalization after every convolution (converges in far fewer
            steps on small data sets).
    """
    if num_classes != 2:
        raise ValueError(
            "unet3d segments binary masks (background/foreground). "
            f"Received: num_classes={num_classes}"
        )
    if base_filters < 1 or levels < 1:
        raise ValueError(
            f"base_filters and levels must be positive. Received: base_filters={base_filters}, "
            f"levels={levels}"
        )
    factor = 2**levels
    spatial = tuple(int(d) for d in input_shape[:3])
    if any(d % factor for d in spatial):
        raise ValueError(
            f"unet3d with levels={levels} needs depth, height and width divisible by {factor}. "
            f"Received: input_shape={tuple(input_shape)}"
        )
    inputs = keras.Input(shape=tuple(input_shape), name="volumes")
    x = inputs
    skips = []
    for level in range(levels):
        x = _conv_block(x, base_filters * 2**level, f"down{level}", batch_norm)
        skips.append(x)
        x = keras.layers.MaxPooling3D(2, name=f"down{level}_pool")(x)
    x = _conv_block(x, base_filters * 2**levels, "bottleneck", batch_norm)
    for level in reversed(range(levels)):
        x = keras.layers.UpSampling3D(2, name=f"up{level}_upsample")(x)
        x = keras.layers.Concatenate(name=f"up{level}_concat")([x, skips[level]])
        x = _conv_block(x, base_filters * 2**level, f"up{level}", batch_norm)
    logits = keras.layers.Conv3D(1, 1, name="logits")(x)
    outputs = keras.layers.Activation("sigmoid", dtype="float32", name="probabilities")(logits)
    return keras.Model(inputs, outputs, name="unet3d")

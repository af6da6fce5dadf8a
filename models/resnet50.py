"""ResNet-50 from Keras Applications, randomly initialised, for any input size and classes."""

from __future__ import annotations

from collections.abc import Sequence

import keras

from models.registry import register_model


@register_model("resnet50", head=("logits",))
def build_resnet50(
    input_shape: Sequence[int],
    num_classes: int,
    *,
    dropout: float = 0.0,
) -> keras.Model:
    """ResNet-50 backbone (no ImageNet weights) + global average pooling + Dense + softmax.

    Keras Applications' own top ends in a softmax Dense that would compute in float16 under
    mixed_float16; this head computes the logits under the policy and the softmax in
    float32. The backbone is built on our input tensor, so inputs smaller than the
    Applications' 32x32 minimum (e.g. 8x8 digits) and any channel count are accepted:
    stride-2 stages simply bottom out at 1x1.
    """
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1). Received: dropout={dropout}")
    inputs = keras.Input(shape=tuple(input_shape), name="images")
    backbone = keras.applications.ResNet50(
        include_top=False, weights=None, input_tensor=inputs, pooling="avg"
    )
    x = backbone.output
    if dropout:
        x = keras.layers.Dropout(dropout, name="dropout")(x)
    logits = keras.layers.Dense(num_classes, name="logits")(x)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(inputs, outputs, name="resnet50")

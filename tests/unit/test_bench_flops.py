"""The FLOP counter behind MFU, checked against FLOPs worked out by hand."""

from __future__ import annotations

import keras
import pytest

import models
from tools.lab.flops import count_flops


def _tiny_cnn(conv_trainable: bool = True) -> keras.Model:
    inputs = keras.Input((8, 8, 1))
    conv = keras.layers.Conv2D(4, 3, padding="same", name="conv")
    conv.trainable = conv_trainable
    x = keras.layers.Flatten()(conv(inputs))
    outputs = keras.layers.Dense(3, name="dense")(x)
    return keras.Model(inputs, outputs)


def test_small_cnn_matches_the_hand_count():
    count = count_flops(_tiny_cnn())
    # conv: 2·H·W·K²·Cin·Cout = 2·8·8·9·1·4 = 4608; dense: 2·(8·8·4)·3 = 1536.
    assert count.forward_per_sample == 4608 + 1536
    # The conv sees the images: forward + weight gradient (2×). The dense: 3×.
    assert count.training_per_sample == 2 * 4608 + 3 * 1536
    assert [layer.name for layer in count.layers] == ["conv", "dense"]


def test_frozen_first_layer_costs_forward_only_and_needs_no_gradient_downstream():
    count = count_flops(_tiny_cnn(conv_trainable=False))
    # Nothing upstream of the dense layer is trainable: forward + weight gradient only.
    assert count.training_per_sample == 4608 + 2 * 1536


def test_nested_model_and_sequential_are_walked():
    inner = _tiny_cnn()
    inputs = keras.Input((8, 8, 1))
    outer = keras.Model(inputs, inner(keras.layers.Conv2D(1, 1, name="stem")(inputs)))
    count = count_flops(outer)
    stem = 2 * 8 * 8 * 1 * 1 * 1
    # The stem is trainable, so the inner conv now needs its input gradient too (3×).
    assert count.training_per_sample == 2 * stem + 3 * 4608 + 3 * 1536
    sequential = keras.Sequential(
        [keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3, padding="same"),
         keras.layers.Flatten(), keras.layers.Dense(3)]
    )
    assert count_flops(sequential).training_per_sample == 2 * 4608 + 3 * 1536


@pytest.mark.parametrize(
    ("layer", "input_shape", "forward"),
    [
        # Conv3D: 2·D·H·W·K³·Cin·Cout ("valid": 4·4·4 outputs).
        (keras.layers.Conv3D(2, 3), (6, 6, 6, 1), 2 * 4 * 4 * 4 * 27 * 1 * 2),
        # Transposed: every input pixel scatters a K²·Cout patch: 2·Hin·Win·K²·Cin·Cout.
        (keras.layers.Conv2DTranspose(2, 3, strides=2), (4, 4, 3), 2 * 4 * 4 * 9 * 3 * 2),
        # Depthwise: 2·H·W·K²·Cin·multiplier.
        (keras.layers.DepthwiseConv2D(3, padding="same"), (5, 5, 3), 2 * 5 * 5 * 9 * 3),
        # Dense on a sequence: every row is a matmul row.
        (keras.layers.Dense(4), (7, 5), 2 * 7 * 5 * 4),
    ],
)
def test_layer_formulas(layer, input_shape, forward):
    inputs = keras.Input(input_shape)
    model = keras.Model(inputs, layer(inputs))
    assert count_flops(model).forward_per_sample == forward


def test_seed_cnn_at_64x64():
    model = models.build_model("seed_cnn", (64, 64, 1), 10)
    conv1 = 2 * 64 * 64 * 9 * 1 * 32
    conv2 = 2 * 32 * 32 * 9 * 32 * 64
    dense = 2 * (16 * 16 * 64) * 128
    logits = 2 * 128 * 10
    count = count_flops(model)
    assert count.training_per_sample == 2 * conv1 + 3 * (conv2 + dense + logits)
    assert count.training_per_sample == 130_555_392

"""Tests for the model registry and the seed CNN."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import models
from models import registry


def test_seed_cnn_is_registered():
    assert "seed_cnn" in models.available_models()


def test_unknown_model_name_lists_available_models():
    with pytest.raises(ValueError, match=r"name='resnet9000'.*seed_cnn"):
        models.build_model("resnet9000", (16, 16, 1), 10)


def test_unknown_model_parameter_is_named():
    with pytest.raises(ValueError, match=r"\['dropuot'\].*dropout"):
        models.build_model("seed_cnn", (16, 16, 1), 10, dropuot=0.3)


def test_bad_input_shape_is_named():
    with pytest.raises(ValueError, match=r"input_shape=\(16, 16\)"):
        models.build_model("seed_cnn", (16, 16), 10)


def test_registered_builder_is_built_with_params():
    @models.register_model("test_tiny_dense")
    def build_tiny(input_shape, num_classes, *, units=4):
        inputs = keras.Input(shape=input_shape)
        x = keras.layers.Flatten()(inputs)
        x = keras.layers.Dense(units)(x)
        return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))

    try:
        model = models.build_model("test_tiny_dense", (4, 4, 1), 3, units=7)
        assert model.layers[2].units == 7
        assert "test_tiny_dense" in models.available_models()
        with pytest.raises(ValueError, match="already registered"):
            models.register_model("test_tiny_dense")(lambda *a, **k: None)
    finally:
        registry.unregister_model("test_tiny_dense")


@pytest.mark.parametrize("input_shape", [(8, 8, 1), (16, 16, 1), (32, 24, 3)])
def test_seed_cnn_outputs_probabilities_for_small_inputs(input_shape):
    model = models.build_model("seed_cnn", input_shape, 10)
    images = np.random.default_rng(0).random((2, *input_shape), dtype=np.float32)
    probabilities = np.asarray(model(images, training=False))
    assert probabilities.shape == (2, 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)


def test_seed_cnn_has_the_seed_architecture():
    model = models.build_model("seed_cnn", (16, 16, 1), 10)
    layer_types = [type(layer).__name__ for layer in model.layers]
    assert layer_types == [
        "InputLayer",
        "Conv2D",
        "MaxPooling2D",
        "Conv2D",
        "MaxPooling2D",
        "Flatten",
        "Dense",
        "Dropout",
        "Dense",
        "Activation",
    ]
    assert [model.get_layer(n).filters for n in ("conv1", "conv2")] == [32, 64]
    assert model.get_layer("dense").units == 128


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_policy_computes_in_low_precision_but_outputs_float32(policy, restore_dtype_policy):
    keras.mixed_precision.set_dtype_policy(policy)
    model = models.build_model("seed_cnn", (16, 16, 1), 10)
    low = policy.removeprefix("mixed_")
    assert model.get_layer("conv1").compute_dtype == low
    assert model.get_layer("logits").compute_dtype == low
    assert all(w.dtype == "float32" for w in model.weights)
    outputs = model(np.zeros((1, 16, 16, 1), np.float32), training=False)
    assert keras.backend.standardize_dtype(outputs.dtype) == "float32"


# --- resnet50, unet3d and the segmentation metric ----------------------------------------


def test_every_model_is_registered_with_its_task():
    assert {"seed_cnn", "resnet50", "unet3d"} <= set(models.available_models())
    assert models.model_task("resnet50") == "classification"
    assert models.model_task("unet3d") == "segmentation"


@pytest.mark.parametrize("input_shape, num_classes", [((8, 8, 1), 10), ((32, 24, 3), 3)])
def test_resnet50_takes_any_input_size_and_class_count(input_shape, num_classes):
    model = models.build_model("resnet50", input_shape, num_classes)
    assert model.count_params() > 23_000_000  # the real ResNet-50 backbone
    probabilities = np.asarray(model(np.zeros((2, *input_shape), np.float32), training=False))
    assert probabilities.shape == (2, num_classes)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)


def test_unet3d_outputs_one_probability_per_voxel():
    model = models.build_model("unet3d", (8, 16, 16, 1), 2, base_filters=4)
    volumes = np.random.default_rng(0).random((2, 8, 16, 16, 1), dtype=np.float32)
    probabilities = np.asarray(model(volumes, training=False))
    assert probabilities.shape == (2, 8, 16, 16, 1)
    assert probabilities.min() >= 0.0 and probabilities.max() <= 1.0


@pytest.mark.parametrize(
    "input_shape, num_classes, message",
    [
        ((16, 16, 1), 2, r"input_shape of 'unet3d' must be \(depth, height, width, channels\)"),
        ((6, 8, 8, 1), 2, r"divisible by 4\. Received: input_shape=\(6, 8, 8, 1\)"),
        ((8, 8, 8, 1), 3, r"num_classes=3"),
    ],
)
def test_unet3d_names_what_it_cannot_build(input_shape, num_classes, message):
    with pytest.raises(ValueError, match=message):
        models.build_model("unet3d", input_shape, num_classes)


def test_dice_counts_overlap_over_all_batches():
    from models.segmentation import DiceBCELoss, DiceCoefficient

    dice = DiceCoefficient()
    truth = np.zeros((1, 4, 4, 4, 1), np.float32)
    truth[0, :2] = 1.0  # 32 foreground voxels
    predicted = np.zeros_like(truth)
    predicted[0, 1:3] = 0.9  # 32 predicted, 16 of them right
    dice.update_state(truth, predicted)
    assert float(dice.result()) == pytest.approx(2 * 16 / (32 + 32))
    dice.update_state(truth, truth)  # a perfect second batch: 32 more overlapping voxels
    assert float(dice.result()) == pytest.approx(2 * 48 / (64 + 64))
    dice.reset_state()
    dice.update_state(np.zeros_like(truth), np.zeros_like(truth))
    assert float(dice.result()) == 1.0  # nothing to find, nothing found
    loss = DiceBCELoss()
    assert float(loss(truth, np.clip(truth, 0.01, 0.99))) < float(loss(truth, predicted))


def test_synthetic_volumes_mark_their_bright_object():
    from components.ingest.synthetic_volumes import generate_volumes

    volumes, masks, labels = generate_volumes(6, (16, 16, 16), seed=1)
    assert volumes.shape == masks.shape == (6, 16, 16, 16)
    assert list(labels) == [0, 1, 0, 1, 0, 1]  # cube, sphere, ...
    for volume, mask in zip(volumes, masks, strict=True):
        assert 0.02 < mask.mean() < 0.5
        assert volume[mask == 1].mean() > volume[mask == 0].mean() + 60

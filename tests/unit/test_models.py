"""Tests for the model registry and the seed CNN."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import models
from models import registry


@pytest.fixture
def restore_dtype_policy():
    previous = keras.mixed_precision.global_policy()
    yield
    keras.mixed_precision.set_dtype_policy(previous)


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
        registry._BUILDERS.pop("test_tiny_dense", None)


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

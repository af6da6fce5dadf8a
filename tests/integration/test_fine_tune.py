"""`model.params.weights` and `trainer.fine_tune`, through the Trainer's real fit step.

A seed_cnn is built and its weights saved to a file; the Trainer trains from that file with
the backbone frozen for the first epoch, then unfrozen. A callback after the Trainer's own
records the weights at every epoch end, so the tests see what a user would check: training
started from the file, the backbone did not move while frozen (the head did), and did once
unfrozen, at the lower learning rate. Tiny: 8x8 digits, 2 steps per epoch.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

import models
from components.trainer.warm_start import weights_checksum
from pipelines.config import ConfigError, load_config
from tests.trainer_testdata import fit_fields, fn_args_dict, write_digits_examples
from tests.weights_per_epoch import WeightsPerEpoch, same

NUM_IMAGES = 80  # 64 train = 2 steps of 32
BACKBONE = ("conv1", "conv2")
HEAD = ("dense", "logits")


@pytest.fixture(scope="module")
def examples_uri(tmp_path_factory) -> str:
    return write_digits_examples(str(tmp_path_factory.mktemp("digits")), NUM_IMAGES)


@pytest.fixture(scope="module")
def weights_file(tmp_path_factory) -> str:
    """A seed_cnn for the digits' 8x8x1 images and 10 classes, saved as a user would."""
    keras.utils.set_random_seed(7)
    path = str(tmp_path_factory.mktemp("pretrained") / "digits.weights.h5")
    models.build_model("seed_cnn", (8, 8, 1), 10).save_weights(path)
    return path


def _file_weights(path: str) -> dict[str, list[np.ndarray]]:
    model = models.build_model("seed_cnn", (8, 8, 1), 10)
    model.load_weights(path)
    return {layer.name: layer.get_weights() for layer in model.layers if layer.weights}


def _fit(examples_uri: str, out: str, weights: str, **trainer: object):
    trainer = {"lr_schedule": "constant", "warmup_epochs": 0, **trainer}
    fields = fn_args_dict(examples_uri, out, params={"weights": weights}, autotune="off",
                          xla="off", **trainer)
    recorder = WeightsPerEpoch()
    return fit_fields(fields, extra_callbacks=[recorder]), recorder


@pytest.mark.parametrize("precision, strategy", [("float32", "one_device"),
                                                 ("mixed_float16", "mirrored")])
def test_training_starts_from_the_file_and_unfreezes_the_backbone_after_the_frozen_epochs(
        examples_uri, weights_file, tmp_path, precision, strategy, restore_dtype_policy):
    fitted, recorder = _fit(
        examples_uri, str(tmp_path), weights_file, epochs=2, learning_rate=0.01,
        precision=precision, strategy=strategy,
        fine_tune={"frozen_epochs": 1, "unfreeze": "all", "learning_rate_factor": 0.1},
    )
    start = _file_weights(weights_file)
    # It started from the file's weights.
    assert fitted.initial_weights_checksum == weights_checksum(_loaded(weights_file))
    first, second = recorder.epochs
    # Epoch 1, frozen: the backbone is exactly the file's, the head trained.
    for name in BACKBONE:
        assert same(first[name], start[name]), name
    for name in HEAD:
        assert not same(first[name], start[name]), name
    # Epoch 2, unfrozen: the backbone trains too, at learning_rate x 0.1.
    for name in BACKBONE + HEAD:
        assert not same(second[name], first[name]), name
    assert fitted.history["learning_rate"] == pytest.approx([0.01, 0.001])
    assert all(np.isfinite(fitted.history["loss"]))
    if precision == "mixed_float16":  # the recompile kept loss scaling
        assert all(isinstance(o, keras.optimizers.LossScaleOptimizer)
                   for o in recorder.optimizers)
        assert recorder.optimizers[0] is not recorder.optimizers[1]


def _loaded(path: str) -> keras.Model:
    model = models.build_model("seed_cnn", (8, 8, 1), 10)
    model.load_weights(path)
    return model


@pytest.fixture
def batchnorm_model():
    """A registered model with a BatchNormalization layer in its backbone."""
    from models.registry import register_model, unregister_model

    @register_model("tiny_bn", head=("logits",))
    def build(input_shape, num_classes):
        inputs = keras.Input(shape=tuple(input_shape), name="images")
        x = keras.layers.Conv2D(8, 3, padding="same", name="conv1_conv")(inputs)
        x = keras.layers.BatchNormalization(name="conv1_bn")(x)
        x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
        x = keras.layers.Dense(num_classes, name="logits")(x)
        outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(x)
        return keras.Model(inputs, outputs, name="tiny_bn")

    yield "tiny_bn"
    unregister_model("tiny_bn")


def test_frozen_for_every_epoch_keeps_the_backbone_and_its_batchnorm_statistics(
        examples_uri, tmp_path, batchnorm_model):
    """frozen_epochs = epochs: feature extraction; the BatchNormalization layer's moving
    statistics do not move either (inference mode while frozen)."""
    keras.utils.set_random_seed(3)
    path = str(tmp_path / "bn.weights.h5")
    models.build_model(batchnorm_model, (8, 8, 1), 10).save_weights(path)
    fields = fn_args_dict(examples_uri, str(tmp_path / "out"), model=batchnorm_model,
                          params={"weights": path}, autotune="off", xla="off", epochs=1,
                          learning_rate=0.05, fine_tune={"frozen_epochs": 1})
    recorder = WeightsPerEpoch()
    fit_fields(fields, extra_callbacks=[recorder])
    start = models.build_model(batchnorm_model, (8, 8, 1), 10)
    start.load_weights(path)
    after = recorder.epochs[0]
    for name in ("conv1_conv", "conv1_bn"):
        assert same(after[name], start.get_layer(name).get_weights()), name
    assert not same(after["logits"], start.get_layer("logits").get_weights())


def test_unfreezing_the_last_block_of_resnet50_leaves_the_rest_and_batchnorm_frozen():
    from components.trainer.fine_tune import freeze_backbone, unfreeze_backbone
    from models.registry import model_head

    model = models.build_model("resnet50", (32, 32, 3), 4)
    head = freeze_backbone(model, model_head("resnet50"))
    assert head == ["logits"]
    assert [w.name for w in model.trainable_weights] == ["kernel", "bias"]
    unfrozen = unfreeze_backbone(model, head, 1)
    assert unfrozen == ["conv5_block3_1_conv", "conv5_block3_2_conv", "conv5_block3_3_conv"]
    trainable = {layer.name for layer in model.layers if layer.trainable and layer.weights}
    assert trainable == {*unfrozen, "logits"}


def test_a_file_of_another_model_is_named_in_one_line(examples_uri, weights_file, tmp_path):
    fields = fn_args_dict(examples_uri, str(tmp_path), params={"weights": weights_file,
                                                               "dense_units": 16})
    with pytest.raises(ValueError) as error:
        fit_fields(fields)
    message = str(error.value)
    assert "\n" not in message
    assert f"model.params.weights {weights_file}" in message
    assert "layer 'dense' (Dense) is (256, 16) in the model, (256, 128) in the file" in message


def test_config_refuses_a_missing_weights_file_and_frozen_epochs_beyond_epochs(tmp_path,
                                                                              monkeypatch):
    missing = tmp_path / "nope.weights.h5"
    with pytest.raises(ConfigError, match=rf"model.params.weights: no such file {missing}"):
        load_config(None, [f"model.params.weights={missing}"])
    with pytest.raises(ConfigError, match=r"Keras weights file \(\*\.weights\.h5"):
        load_config(None, ["model.params.weights=model.bin"])
    with pytest.raises(ConfigError, match=r"frozen_epochs \(4\) must be at most "
                                          r"trainer.epochs \(3\)"):
        load_config(None, ["trainer.epochs=3", "trainer.fine_tune.frozen_epochs=4"])
    with pytest.raises(ConfigError, match="trainer.fine_tune.unfreeze"):
        load_config(None, ["trainer.fine_tune.unfreeze=some"])
    relative = tmp_path / "w.weights.h5"
    relative.write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    config = load_config(None, ["model.name=seed_cnn", "model.params.weights=w.weights.h5",
                                "trainer.fine_tune={frozen_epochs: 2, unfreeze: 3}"])
    assert config.model.params["weights"] == str(relative)  # absolute for the Trainer
    assert config.trainer.fine_tune.unfreeze == 3

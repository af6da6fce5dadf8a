"""`model.name: auto` and `model.input_size: auto`: what the data decides, and why.

The rules a user reads in docs/guide/training.md: digits-sized images get the seed CNN at
16x16, photos photo_cnn at 64x64 at most, volumes the 3D U-Net at their slice size, a named
model the sizes it takes; an explicit value always wins. The profile is read from real
Examples written by the Ingest's own writer.
"""

from __future__ import annotations

import pytest

from components.trainer import data as data_lib
from models.choice import ImageProfile, choose_model
from tests.trainer_testdata import write_digits_examples

DIGITS = ImageProfile(images=1437, height=8, width=8, channels=1)
PHOTOS = ImageProfile(images=1600, height=224, width=224, channels=3)


def test_digits_get_the_seed_cnn_upsampled_to_16():
    choice = choose_model("auto", "auto", DIGITS)
    assert (choice.name, choice.input_size) == ("seed_cnn", [16, 16])
    assert "1437 images of 8x8 px (median), 1 channel" in choice.name_reason
    assert "upsampled to seed_cnn's minimum of 16 px" in choice.input_size_reason


def test_photos_get_photo_cnn_at_64_and_say_why():
    choice = choose_model("auto", "auto", PHOTOS)
    assert (choice.name, choice.input_size) == ("photo_cnn", [64, 64])
    assert "photos take photo_cnn" in choice.name_reason
    assert "model.params.weights=imagenet" in choice.name_reason  # how to get pretrained
    assert ("median size is 224x224 px; downscaled: photo_cnn's auto_max is 64 px"
            in choice.input_size_reason)


@pytest.mark.parametrize("name, profile, size", [
    ("mobilenet_v3_small", PHOTOS, [224, 224]),           # its ImageNet resolution
    ("mobilenet_v3_small", ImageProfile(10, 100, 150, 3), [96, 128]),  # multiples of 32
    ("resnet50", ImageProfile(10, 480, 640, 3), [224, 224]),
    ("vit", PHOTOS, [64, 64]),
    ("seed_cnn", PHOTOS, [64, 64]),
    ("photo_cnn", ImageProfile(10, 20, 20, 3), [32, 32]),  # its minimum
])
def test_a_named_model_gets_the_sizes_it_takes(name, profile, size):
    choice = choose_model(name, "auto", profile)
    assert (choice.name, choice.name_reason, choice.input_size) == (name, "model.name", size)


def test_small_colour_images_and_volumes():
    assert choose_model("auto", "auto", ImageProfile(50, 28, 28, 3)).input_size == [28, 28]
    volumes = choose_model("auto", "auto", ImageProfile(100, 16, 16, 1, volumes=True))
    assert (volumes.name, volumes.input_size) == ("unet3d", [16, 16])
    assert "slice size" in volumes.input_size_reason


def test_an_explicit_size_always_wins():
    choice = choose_model("auto", [40, 48], PHOTOS)
    assert (choice.name, choice.input_size, choice.input_size_reason) == (
        "photo_cnn", [40, 48], "model.input_size")


def test_the_profile_is_read_from_the_examples(tmp_path):
    uri = write_digits_examples(str(tmp_path), 30)
    profile = data_lib.read_image_profile([f"{uri}/Split-train/*"])
    assert profile == ImageProfile(images=24, height=8, width=8, channels=1, volumes=False)

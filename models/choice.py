"""`model.name: auto` and `model.input_size: auto`: the model and its input size from the
images the Ingest stored, each with the reason the run prints and records.

The rules (docs/guide/training.md "Model and input size"):
- the model: 3D volumes -> `unet3d`; images whose median side is under 32 px (digits,
  icons) -> `seed_cnn`; larger images (photos) -> `photo_cnn`, trained from scratch. A
  pretrained backbone is never chosen by itself: its weights must be downloadable, so it is
  asked for by name (`model.name=mobilenet_v3_small`, `model.params.weights=imagenet`).
- the input size: each side is the images' median side, rounded down to a multiple the
  model accepts and kept between its minimum (smaller images are upsampled) and its
  `auto_max` (larger ones are downscaled): `models.registry.InputSizes`, one per model.
  Volumes keep their slice size (the U-Net segments whole slices).
An explicit value always wins and is recorded as given.

    profile = ImageProfile(images=1437, height=8, width=8, channels=1, volumes=False)
    choice = choose_model("auto", "auto", profile)
    choice.name, choice.input_size   # "seed_cnn", [16, 16]
"""

from __future__ import annotations

import dataclasses

from models.registry import InputSizes, model_input_sizes

AUTO = "auto"
# Below this median side the images are small (digits, icons): the seed CNN; else photos.
PHOTO_MIN_SIDE = 32


@dataclasses.dataclass(frozen=True)
class ImageProfile:
    """The training images as the Ingest stored them.

    Attributes:
        images: examples in the train split.
        height, width: the median image (a volume's slice) height and width, in pixels.
        channels: the stored channel count.
        volumes: whether the examples are 3D volumes (they have a depth).
    """

    images: int
    height: int
    width: int
    channels: int
    volumes: bool = False

    def describe(self) -> str:
        """e.g. '1437 images of 8x8 px (median), 1 channel'."""
        kind = "volumes of slices" if self.volumes else "images"
        plural = "s" if self.channels != 1 else ""
        return (f"{self.images} {kind} of {self.height}x{self.width} px (median), "
                f"{self.channels} channel{plural}")


@dataclasses.dataclass(frozen=True)
class ModelChoice:
    """The model and input size that train, and why."""

    name: str
    name_reason: str
    input_size: list[int]
    input_size_reason: str


def choose_model_name(profile: ImageProfile) -> tuple[str, str]:
    """(`model.name: auto`'s choice, why) for these images."""
    seen = profile.describe()
    if profile.volumes:
        return "unet3d", f"auto: {seen}: the 3D U-Net segments volumes"
    if min(profile.height, profile.width) < PHOTO_MIN_SIDE:
        return "seed_cnn", (f"auto: {seen}: small images (under {PHOTO_MIN_SIDE} px) take "
                            "the seed CNN")
    return "photo_cnn", (f"auto: {seen}: photos take photo_cnn, trained from scratch "
                         "(pretrained: model.name=mobilenet_v3_small and "
                         "model.params.weights=imagenet)")


def choose_input_size(sizes: InputSizes, name: str, profile: ImageProfile) -> tuple[list[int], str]:
    """(`model.input_size: auto`'s choice for model `name`, why)."""
    if profile.volumes:
        return [profile.height, profile.width], (
            f"auto: the volumes' slice size {profile.height}x{profile.width}")
    size = [sizes.choose(profile.height), sizes.choose(profile.width)]
    median = f"{profile.height}x{profile.width}"
    if max(profile.height, profile.width) > sizes.auto_max:
        how = f"downscaled: {name}'s auto_max is {sizes.auto_max} px"
    elif min(profile.height, profile.width) < sizes.minimum:
        how = f"upsampled to {name}'s minimum of {sizes.minimum} px"
    else:
        how = f"{name} takes sides from {sizes.minimum} to {sizes.auto_max} px"
    if sizes.multiple > 1:
        how += f", in multiples of {sizes.multiple}"
    return size, f"auto: the images' median size is {median} px; {how}"


def choose_model(name: str, input_size: str | list[int], profile: ImageProfile) -> ModelChoice:
    """Resolves `model.name` and `model.input_size` ("auto" or explicit) for `profile`.

    `name` must be a registered model (a user's module file registered first) or "auto".
    """
    if name == AUTO:
        name, name_reason = choose_model_name(profile)
    else:
        name_reason = "model.name"
    if input_size == AUTO:
        size, size_reason = choose_input_size(model_input_sizes(name), name, profile)
    else:
        size, size_reason = [int(v) for v in input_size], "model.input_size"
    return ModelChoice(name, name_reason, size, size_reason)

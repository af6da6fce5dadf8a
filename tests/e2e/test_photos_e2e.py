"""End to end on JPEG photos: `mptfx run --data <photos>` with no --set.

The folder is what a user's photos look like: RGB JPEGs of 224 px, one sub-folder per
class. They are cut from scikit-learn's two sample photos (china.jpg, a temple;
flower.jpg, a dahlia): random crops of different sizes, resized to 224x224 and saved as
JPEG. Nothing is set: the model and its input size are auto's (photo_cnn at 64x64), said in
the run's summary lines and recorded with their reasons.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.e2e

PER_CLASS = 40
PHOTO_SIZE = 224


def _make_photos(root: Path) -> Path:
    from PIL import Image
    from sklearn.datasets import load_sample_images

    sample = load_sample_images()
    rng = np.random.default_rng(0)
    for filename, image in zip(sample.filenames, sample.images, strict=True):
        folder = root / Path(filename).stem  # china, flower
        folder.mkdir(parents=True)
        height, width = image.shape[:2]
        for index in range(PER_CLASS):
            side = int(rng.integers(height // 3, height))
            top = int(rng.integers(0, height - side + 1))
            left = int(rng.integers(0, width - side + 1))
            crop = Image.fromarray(image[top:top + side, left:left + side])
            crop = crop.resize((PHOTO_SIZE, PHOTO_SIZE), Image.BILINEAR)
            crop.save(folder / f"IMG_{index:04d}.jpg", format="JPEG", quality=90)
    return root


@pytest.fixture(scope="module")
def photos_run(mptfx, tmp_path_factory):
    photos = _make_photos(tmp_path_factory.mktemp("data") / "photos")
    workspace = tmp_path_factory.mktemp("workspace")
    result = mptfx("run", "--data", str(photos), "--workspace", str(workspace), "--json",
                   timeout=1200)
    return photos, result


def test_the_photo_folder_is_rgb_jpeg(photos_run):
    from PIL import Image

    photos, _ = photos_run
    files = sorted(photos.glob("*/*.jpg"))
    assert len(files) == 2 * PER_CLASS
    with Image.open(files[0]) as image:
        assert (image.format, image.mode, image.size) == ("JPEG", "RGB", (224, 224))


def test_photos_train_bless_push_and_publish_every_tflite_variant(photos_run):
    from components.core.config import TFLiteSection

    _, result = photos_run
    assert result.returncode == 0, result.stderr[-3000:]
    summary = result.summary
    assert summary.status == "completed"
    assert summary.data.images == 2 * PER_CLASS
    assert summary.config["model"] == {**summary.config["model"], "name": "auto",
                                       "input_size": "auto"}
    assert summary.config["data"]["channels"] == "auto"
    # auto chose a photo model at 64 px or more, and says why.
    trainer = summary.trainer.model_extra
    assert summary.trainer.model == "photo_cnn" and trainer["input_size"] == [64, 64]
    assert "224x224 px" in trainer["model_reason"]
    assert "median size is 224x224 px" in trainer["input_size_reason"]
    assert summary.eval.blessed is True, summary.eval.why_not_blessed
    assert summary.pushed.pushed is True
    assert Path(summary.pushed.path, "saved_model.pb").exists()
    variants = TFLiteSection().variants
    assert sorted(summary.tflite) == sorted(variants)
    for variant in variants:
        info = summary.tflite[variant]
        assert not isinstance(info, str), f"{variant}: {info}"
        assert info.published is True, f"{variant}: {info}"
        assert Path(info.path).stat().st_size > 0

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
    from components.tflite.config import TFLiteSection

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


def _published(result) -> tuple[Path, str, int]:
    """The run's serving folder, model name and pushed version."""
    pushed = Path(result.summary.pushed.path)
    return pushed.parent.parent, pushed.parent.name, int(pushed.name)


def _serving_default_classes(version_dir: Path, files: list[Path]) -> dict[str, str]:
    """What TF Serving's default signature answers for each file in a tf.Example."""
    import tensorflow as tf

    served = tf.saved_model.load(str(version_dir))
    examples = [tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[f.read_bytes()]))})
    ).SerializeToString() for f in files]
    answer = served.signatures["serving_default"](examples=tf.constant(examples))
    return {str(f): name.decode() for f, name in zip(files, answer["class_name"].numpy(),
                                                     strict=True)}


def test_predict_classifies_new_photos_as_serving_default_and_reports_the_unreadable(
        photos_run, mptfx, tmp_path):
    import csv
    import io

    from components.errors import EXIT_SOME_INPUTS_FAILED

    photos, result = photos_run
    serving_dir, model, version = _published(result)
    extra = tmp_path / "extra"
    extra.mkdir()
    jpeg = next(photos.glob("china/*.jpg")).read_bytes()
    (extra / "cut.jpg").write_bytes(jpeg[:len(jpeg) // 2])
    (extra / "scan.pdf").write_bytes(b"%PDF-1.4\n%...")
    predicted = mptfx("predict", str(photos), str(extra), "--workspace",
                      str(serving_dir.parent), "--top-k", "2")
    assert predicted.returncode == EXIT_SOME_INPUTS_FAILED, predicted.stderr[-2000:]
    rows = list(csv.DictReader(io.StringIO(predicted.stdout)))
    files = sorted(photos.glob("*/*.jpg"))
    assert [row["file"] for row in rows] == [*map(str, files), str(extra / "cut.jpg"),
                                             str(extra / "scan.pdf")]
    expected = _serving_default_classes(serving_dir / model / str(version), files)
    assert {row["file"]: row["class"] for row in rows[:-2]} == expected
    assert [row["error"] for row in rows[-2:]] == [
        "undecodable JPEG: jpeg::Uncompress failed. Invalid JPEG data or crop window.",
        "not an image: not a JPEG, PNG, GIF or BMP (first bytes b'%PDF-1.4')"]
    # A trained model: each photo's folder is mostly its class.
    right = sum(row["class"] == Path(row["file"]).parent.name for row in rows[:-2])
    assert right >= 0.8 * len(files)
    assert predicted.stderr.splitlines()[-1].startswith(
        f"mptfx predict: {len(files) + 2} inputs, {len(files)} predicted, 2 without a "
        f"prediction (the rows say why); ")


def test_a_photo_s_own_file_in_a_rest_instances_body_answers_as_serving_default(photos_run):
    import base64

    import requests

    from tests.tf_serving_double import serve_models

    photos, result = photos_run
    infra = result.summary.infra
    assert "predict_image_bytes" in infra.signatures and infra.blessed is True
    serving_dir, model, version = _published(result)
    files = sorted(photos.glob("*/*.jpg"))[::20]
    body = {"signature_name": "predict_image_bytes",
            "instances": [{"b64": base64.b64encode(f.read_bytes()).decode()} for f in files]}
    with serve_models(serving_dir, model) as server:
        reply = requests.post(f"{server.url}/v1/models/{model}:predict", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    expected = _serving_default_classes(serving_dir / model / str(version), files)
    assert [row["class_name"] for row in reply.json()["predictions"]] == [
        expected[str(f)] for f in files]


def test_a_reader_that_stops_early_ends_predict_quietly(photos_run, tmp_path):
    """`mptfx predict ... | head -2`: more rows than a pipe holds, the reader gone after two."""
    import subprocess
    import sys

    from tests.conftest import RUN_DIR

    photos, result = photos_run
    serving_dir, _, _ = _published(result)
    listed = tmp_path / "many.txt"
    listed.write_text("\n".join([str(p) for p in sorted(photos.glob("*/*.jpg"))] * 25) + "\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "predict", "--files-from", str(listed),
         "--workspace", str(serving_dir.parent), "--batch-size", "16"],
        cwd=RUN_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    head = [process.stdout.readline() for _ in range(2)]
    process.stdout.close()
    stderr = process.stderr.read()
    assert process.wait(timeout=300) == 0, stderr
    assert head[0] == "file,class,probability,error\n" and head[1].endswith(",\n")
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr

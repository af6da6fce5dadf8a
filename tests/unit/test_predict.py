"""`mptfx predict` in this process (`mptfx_here`) on a workspace laid out as a run's Pusher
and TF Lite leave it: a seed CNN exported by the Trainer's exporter as version 1 of `pets`,
labelled stable in models.config, its fp32 TF Lite variant beside it; photos cut from
scikit-learn's sample photographs as JPEG and PNG files, a truncated JPEG and a file that is
no image. The classes are compared with what `serving_default` answers for each file in a
tf.Example, the request TF Serving gets."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from components.errors import EXIT_OK, EXIT_SOME_INPUTS_FAILED, EXIT_USAGE

LABELS = ["temple", "dahlia"]
SIZE = 24


def _example(image: bytes, filename: str | None = None) -> bytes:
    feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image]))}
    if filename is not None:
        feature["filename"] = tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[filename.encode()]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _export(folder: Path, channels: int = 3, policy: str | None = None) -> None:
    import keras

    from components.trainer.export import export_serving_model
    from models import build_model

    keras.utils.set_random_seed(5)
    previous = keras.mixed_precision.global_policy()
    if policy:
        keras.mixed_precision.set_dtype_policy(policy)
    try:
        model = build_model("seed_cnn", (SIZE, SIZE, channels), len(LABELS))
    finally:
        keras.mixed_precision.set_dtype_policy(previous)
    export_serving_model(model, "seed_cnn", {}, [SIZE, SIZE], channels, LABELS, str(folder),
                         serving_precision="mixed" if policy else "float32")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    from components.serving.models_config import ServingLabels, write_labels
    from components.tflite.convert import convert

    root = tmp_path_factory.mktemp("predict")
    serving = root / "workspace" / "serving"
    for version in (1, 2):
        _export(serving / "pets" / str(version))
    write_labels(serving / "models.config", "pets", str(serving / "pets"),
                 ServingLabels(stable=1, canary=2))
    tflite = root / "workspace" / "tflite" / "pets" / "1"
    tflite.mkdir(parents=True)
    (tflite / "fp32.tflite").write_bytes(convert(str(serving / "pets" / "1"), "fp32"))
    (tflite / "labels.txt").write_text("".join(f"{name}\n" for name in LABELS))
    return root / "workspace"


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    from sklearn.datasets import load_sample_images

    folder = tmp_path_factory.mktemp("photos") / "new"
    (folder / "more").mkdir(parents=True)
    rng = np.random.default_rng(1)
    for index in range(70):  # more than one batch of 64
        source = load_sample_images().images[index % 2]
        top, left = int(rng.integers(0, 300)), int(rng.integers(0, 500))
        crop = Image.fromarray(source[top:top + 90, left:left + 120])
        fmt = "PNG" if index % 5 == 0 else "JPEG"
        target = folder / ("more" if index % 7 == 0 else ".") / f"photo_{index:03d}.{fmt.lower()}"
        crop.save(target, format=fmt)
    jpeg = (folder / "photo_001.jpeg").read_bytes()
    (folder / "photo_001_cut.jpeg").write_bytes(jpeg[:len(jpeg) // 2])
    (folder / "notes.txt").write_text("taken at the temple, 2026")
    (folder / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")  # hidden: not an input
    return folder


def _serving_default(workspace: Path, files: list[Path], version: int = 1) -> dict[str, dict]:
    served = tf.saved_model.load(str(workspace / "serving" / "pets" / str(version)))
    out = served.signatures["serving_default"](
        examples=tf.constant([_example(f.read_bytes()) for f in files]))
    return {str(f): {"class": name.decode(), "probability": float(np.max(probs))}
            for f, name, probs in zip(files, out["class_name"].numpy(),
                                      out["probabilities"].numpy(), strict=True)}


def _rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_a_folder_gives_a_row_per_file_with_serving_default_s_class_and_the_bad_ones_reasons(
        mptfx_here, workspace, photos, tmp_path):
    out = tmp_path / "predictions.csv"
    result = mptfx_here("predict", str(photos), "--workspace", str(workspace),
                        "--output", str(out))
    assert result.returncode == EXIT_SOME_INPUTS_FAILED, result.stderr
    assert result.stdout == ""  # the rows went to --output
    rows = _rows(out.read_text())
    files = sorted(str(p) for p in photos.rglob("*") if p.is_file() and p.name != ".DS_Store")
    assert sorted(row["file"] for row in rows) == files and len(rows) == 72
    # A folder's files in sorted order, then its sub-folders', as os.walk goes.
    assert [row["file"] for row in rows] == [
        str(p) for p in sorted(photos.iterdir()) if p.is_file() and p.name != ".DS_Store"] + [
        str(p) for p in sorted((photos / "more").iterdir())]
    bad = {Path(row["file"]).name: row["error"] for row in rows if row["error"]}
    assert bad == {
        "photo_001_cut.jpeg": "undecodable JPEG: jpeg::Uncompress failed. Invalid JPEG data "
                              "or crop window.",
        "notes.txt": "not an image: not a JPEG, PNG, GIF or BMP (first bytes b'taken at')"}
    good = [Path(row["file"]) for row in rows if not row["error"]]
    expected = _serving_default(workspace, good)
    for row in rows:
        if not row["error"]:
            assert row["class"] == expected[row["file"]]["class"], row
            assert float(row["probability"]) == pytest.approx(
                expected[row["file"]]["probability"], abs=2e-6)
    assert len({row["class"] for row in rows if row["class"]}) == 2  # both classes answered
    [last] = result.stderr.splitlines()[-1:]
    assert last.startswith("mptfx predict: 72 inputs, 70 predicted, 2 without a prediction")
    assert last.endswith(f"by pets version 1 (stable), SavedModel in float32 on CPU -> {out}")


def test_a_list_of_files_as_json_lines_with_the_top_classes_and_a_missing_file(
        mptfx_here, workspace, photos, tmp_path):
    listed = [photos / "photo_002.jpeg", tmp_path / "gone.jpg", photos / "photo_005.png"]
    (tmp_path / "list.txt").write_text("\n".join(map(str, listed)) + "\n\n")
    result = mptfx_here("predict", "--files-from", str(tmp_path / "list.txt"), "--workspace",
                        str(workspace), "--format", "jsonl", "--top-k", "5", "--label", "canary")
    assert result.returncode == EXIT_SOME_INPUTS_FAILED, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [row["file"] for row in rows] == list(map(str, listed))
    assert rows[1] == {"file": str(tmp_path / "gone.jpg"), "class": None, "probability": None,
                       "top_k": [], "error": "cannot read: No such file or directory"}
    expected = _serving_default(workspace, [listed[0], listed[2]], version=2)
    for row in (rows[0], rows[2]):
        assert row["error"] is None and row["class"] == expected[row["file"]]["class"]
        # --top-k 5 of 2 classes: both, best first, summing to 1.
        assert [entry["class"] for entry in row["top_k"]][0] == row["class"]
        assert sorted(entry["class"] for entry in row["top_k"]) == sorted(LABELS)
        assert sum(entry["probability"] for entry in row["top_k"]) == pytest.approx(1, abs=1e-5)
    assert "by pets version 2 (label canary)" in result.stderr


def test_tfrecords_of_examples_are_named_by_filename_and_a_cut_file_is_one_row(
        mptfx_here, workspace, photos, tmp_path):
    files = [p for p in sorted(photos.glob("photo_0*.*")) if "cut" not in p.name][:6]
    whole, cut = tmp_path / "eval.tfrecord.gz", tmp_path / "cut.tfrecord"
    with tf.io.TFRecordWriter(str(whole), options="GZIP") as writer:
        for index, path in enumerate(files):
            writer.write(_example(path.read_bytes(), path.name if index % 2 == 0 else None))
        writer.write(b"not an Example")
    with tf.io.TFRecordWriter(str(cut)) as writer:
        for path in files[:3]:
            writer.write(_example(path.read_bytes(), path.name))
    data = cut.read_bytes()
    cut.write_bytes(data[:len(data) - 100])  # the third record is cut short
    result = mptfx_here("predict", str(whole), str(cut), "--workspace", str(workspace))
    assert result.returncode == EXIT_SOME_INPUTS_FAILED, result.stderr
    rows = _rows(result.stdout)
    names = [files[i].name if i % 2 == 0 else f"{whole}#{i}" for i in range(6)]
    assert [row["file"] for row in rows] == [*names, f"{whole}#6", files[0].name,
                                             files[1].name, str(cut)]
    expected = _serving_default(workspace, files)
    for row, path in zip(rows[:6], files, strict=True):
        assert row["class"] == expected[str(path)]["class"]
    assert rows[6]["error"] == "a record that is not a tf.Example"
    assert rows[-1]["error"].startswith("truncated or corrupt TFRecord after 2 records (")


def test_a_tf_lite_variant_answers_like_the_saved_model_and_a_missing_one_is_named(
        mptfx_here, workspace, photos):
    inputs = [str(p) for p in sorted(photos.glob("photo_01*.*"))]
    saved = _rows(mptfx_here("predict", *inputs, "--workspace", str(workspace)).stdout)
    lite = mptfx_here("predict", *inputs, "--workspace", str(workspace), "--tflite", "fp32")
    assert lite.returncode == EXIT_OK, lite.stderr
    assert [(r["file"], r["class"]) for r in _rows(lite.stdout)] == [
        (r["file"], r["class"]) for r in saved]
    assert "by pets version 1 (stable), TF Lite fp32" in lite.stderr
    missing = mptfx_here("predict", *inputs, "--workspace", str(workspace), "--tflite", "int8",
                         "--label", "canary")
    assert missing.returncode == EXIT_USAGE and missing.stdout == ""
    assert missing.stderr.strip() == (
        f"mptfx: error: predict: --tflite int8: no {workspace}/tflite/pets/2/int8.tflite; "
        f"pets version 2 has no TF Lite variants")


@pytest.mark.parametrize("args,line", [
    (["--label", "previous"], "predict: pets has no label 'previous' in {serving}/models.config "
                              "(labels: stable 1, canary 2)"),
    (["--version", "7"], "predict: --version 7: pets has no version 7 in {serving}/pets; "
                         "pushed versions: 1, 2"),
    (["--model", "cats"], "predict: --model cats: {serving} serves pets"),
])
def test_a_version_label_or_model_that_is_not_there_is_named_with_what_is(
        mptfx_here, workspace, photos, args, line):
    result = mptfx_here("predict", str(photos / "photo_002.jpeg"), "--workspace",
                        str(workspace), *args)
    assert result.returncode == EXIT_USAGE and result.stdout == ""
    assert result.stderr.strip() == "mptfx: error: " + line.format(serving=workspace / "serving")


def test_inputs_that_are_not_there_and_an_empty_workspace_stop_before_anything_runs(
        mptfx_here, workspace, tmp_path):
    missing = mptfx_here("predict", str(tmp_path / "nope"), "--workspace", str(workspace))
    assert (missing.returncode, missing.stderr.strip()) == (
        EXIT_USAGE, f"mptfx: error: predict: {tmp_path / 'nope'}: no such file or folder")
    (tmp_path / "empty").mkdir()
    empty = mptfx_here("predict", str(tmp_path / "empty"), "--workspace", str(workspace))
    assert empty.stderr.strip() == (f"mptfx: error: predict: nothing to predict: no files in "
                                    f"{tmp_path / 'empty'}")
    (tmp_path / "empty" / "a.jpg").write_bytes(b"\xff\xd8\xff")
    nothing = mptfx_here("predict", str(tmp_path / "empty"), "--workspace", str(tmp_path / "ws"))
    assert nothing.returncode == EXIT_USAGE
    assert nothing.stderr.strip().startswith(
        f"mptfx: error: predict: no served model in {tmp_path / 'ws' / 'serving'} (")


def test_two_served_models_need_model_and_a_mixed_graph_on_a_cpu_is_noted(
        mptfx_here, workspace, photos, tmp_path, restore_dtype_policy):
    from components.serving.models_config import ServingLabels, write_labels

    two = tmp_path / "two"
    shutil.copytree(workspace / "serving", two / "serving")
    _export(two / "serving" / "birds" / "1", policy="mixed_bfloat16")
    write_labels(two / "serving" / "models.config", "birds", str(two / "serving" / "birds"),
                 ServingLabels(stable=1))
    image = str(photos / "photo_002.jpeg")
    both = mptfx_here("predict", image, "--workspace", str(two))
    assert both.returncode == EXIT_USAGE
    assert both.stderr.strip() == (f"mptfx: error: predict: {two / 'serving'} serves 2 models "
                                   f"(pets, birds): choose one with --model")
    birds = mptfx_here("predict", image, "--workspace", str(two), "--model", "birds")
    assert birds.returncode == EXIT_OK, birds.stderr
    assert _rows(birds.stdout)[0]["class"] in LABELS
    assert "mptfx predict: note: birds version 1 computes in bfloat16 (export.serving_" \
           "precision: mixed), made for a GPU, and there is none" in birds.stderr
    assert "SavedModel in bfloat16 on CPU" in birds.stderr


def test_the_progress_line_is_drawn_on_a_terminal_only_and_cleared():
    from pipelines.predict_command import Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal, pipe = Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        progress = Progress(stream, total=10)
        progress.started -= 5  # a long run
        for failed in (False, True, False):
            progress.count(failed)
        progress.close()
    assert terminal.getvalue().startswith("\rmptfx predict: 1 of 10 inputs, 0 without a "
                                          "prediction, ")
    assert terminal.getvalue().endswith("\r\033[K")
    assert pipe.getvalue() == ""

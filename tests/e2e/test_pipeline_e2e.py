"""End to end: the real `mptfx run` on the digits, as a user runs it, shared by every test here.

One pipeline run (about 1.5 minutes) with the default config on the full digits set exported
as image folders, plus a corrupt PNG and a text file among the images.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pipelines.datasets import export_digits

pytestmark = pytest.mark.e2e

COMPONENTS = ["Ingest", "StatisticsGen", "SchemaGen", "ExampleValidator", "DataValidationGate",
              "Trainer", "LatestBlessedModel", "Evaluator", "Pusher", "TFLite"]


@pytest.fixture(scope="session")
def user_data(tmp_path_factory) -> Path:
    root = export_digits(tmp_path_factory.mktemp("data") / "digits")
    (root / "3" / "scanner_glitch.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00garbage" * 20)
    (root / "5" / "notes.txt").write_text("these are not images\n")
    return root


@pytest.fixture(scope="session")
def digits_run(mptfx, user_data, tmp_path_factory):
    workspace = tmp_path_factory.mktemp("workspace")
    result = mptfx("run", "--workspace", str(workspace), "--data", str(user_data), "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    return workspace, result


def _eval_images(summary: dict) -> tuple[np.ndarray, np.ndarray]:
    """The eval split as the ingest wrote it: uint8 images and labels."""
    import tensorflow as tf

    files = tf.io.gfile.glob(f"{summary['data']['examples_uri']}/Split-eval/*.gz")
    images, labels = [], []
    for record in tf.data.TFRecordDataset(files, compression_type="GZIP"):
        example = tf.train.Example.FromString(record.numpy())
        feature = example.features.feature
        images.append(tf.io.decode_png(feature["image"].bytes_list.value[0]).numpy())
        labels.append(feature["label"].int64_list.value[0])
    return np.stack(images), np.array(labels)


def test_run_completes_and_prints_progress_and_summary(digits_run):
    workspace, result = digits_run
    summary = result.summary
    assert summary["status"] == "completed"
    assert set(summary["components"]) == set(COMPONENTS)
    assert list(summary["components"])[0] == "Ingest"  # data-flow order
    assert list(summary["components"])[-1] == "TFLite"
    for name in COMPONENTS:
        assert summary["components"][name]["status"] in ("completed", "cached"), name
    for name in ("Ingest", "Trainer", "Evaluator"):
        assert f"> {name} ..." in result.stderr and f"< {name} done in" in result.stderr
    assert "BLESSED" in result.stderr and "component" in result.stderr
    on_disk = json.loads(Path(summary["summary_path"]).read_text())
    assert on_disk == summary
    assert Path(summary["summary_path"]).parent.parent == workspace / "runs"
    assert summary["wall_seconds"] > 0
    trainer = summary["trainer"]
    assert trainer["precision"] == "float32" and "CPU" in trainer["precision_reason"]
    assert trainer["xla"] in ("off", False) and trainer["epochs"] == 15
    assert trainer["images_per_sec"] > 0 and trainer["strategy"]


def test_corrupt_and_non_image_files_are_quarantined_not_fatal(digits_run):
    summary = digits_run[1].summary
    assert summary["data"]["quarantined"] == 2
    assert summary["data"]["images"] == 1799
    report = json.loads(Path(summary["data"]["quarantine_report"]).read_text())
    named = {Path(entry["path"]).name: entry["reason"] for entry in report["files"]}
    assert set(named) == {"scanner_glitch.png", "notes.txt"}
    assert all(named.values())


def test_model_is_accurate_blessed_and_pushed_in_tf_serving_layout(digits_run):
    summary = digits_run[1].summary
    assert summary["eval"]["accuracy"] >= 0.95
    assert summary["eval"]["blessed"] is True
    pushed = summary["pushed"]
    assert pushed["pushed"] is True
    version_dir = Path(pushed["path"])
    assert version_dir.name == str(pushed["version"]) and version_dir.name.isdigit()
    assert (version_dir / "saved_model.pb").exists()
    assert version_dir.parent.name == "digits"


def test_pushed_saved_model_classifies_eval_images(digits_run):
    import tensorflow as tf

    summary = digits_run[1].summary
    model = tf.saved_model.load(summary["pushed"]["path"])
    images, labels = _eval_images(summary)
    outputs = model.signatures["predict_images"](images=tf.constant(images))
    predicted = outputs["class_id"].numpy()
    assert (predicted == labels).mean() >= 0.95
    names = [name.decode() for name in outputs["class_name"].numpy()]
    assert names[:20] == [str(label) for label in predicted[:20]]


def test_tflite_fp32_matches_saved_model_top1(digits_run):
    import tensorflow as tf

    summary = digits_run[1].summary
    fp32 = summary["tflite"]["fp32"]
    assert fp32["published"] is True and fp32["agreement"] >= 0.99
    path = Path(fp32["path"])
    assert path.exists() and path.stat().st_size == fp32["bytes"]
    assert (path.parent / "labels.txt").read_text().split() == [str(d) for d in range(10)]

    images, _ = _eval_images(summary)
    model = tf.saved_model.load(summary["pushed"]["path"])
    height, width = summary["trainer"]["input_size"]
    normalized = tf.image.resize(tf.cast(images, tf.float32) / 255.0, (height, width)).numpy()
    reference = model.signatures["predict_normalized"](images=tf.constant(normalized))
    reference = reference["probabilities"].numpy().argmax(axis=1)
    interpreter = tf.lite.Interpreter(model_path=str(path))
    runner = interpreter.get_signature_runner()
    lite = np.array([
        runner(images=normalized[i:i + 1])["probabilities"].argmax() for i in range(len(images))
    ])
    assert (lite == reference).mean() >= 0.99

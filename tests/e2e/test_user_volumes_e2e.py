"""End to end: a user's own volume/mask pairs (.npy and .nii.gz) train the 3D U-Net.

The folder holds 40 cubes as `.npy` pairs and 40 spheres as NIfTI `.nii.gz` pairs (the
synthetic shapes of components/ingest/synthetic_volumes.py, saved as a user would save
real scans, CT-like int16 intensities), one volume without its mask and one whose mask has
another shape. The real `mptfx run` ingests them (quarantining the two), trains unet3d and
gates it on Dice, which TFMA computes over the eval voxels. (`data.source:
synthetic:volumes`, the built-in volumes: tests/integration/test_data_selection.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from components.ingest.synthetic_volumes import generate_volumes

pytestmark = pytest.mark.e2e

SHAPE = (16, 16, 16)
PER_CLASS = 40


def write_user_volumes(root: Path, per_class: int = PER_CLASS) -> Path:
    """cube/*.npy + *_mask.npy, sphere/*.nii.gz + *_mask.nii.gz, and two broken pairs."""
    import nibabel

    volumes, masks, labels = generate_volumes(2 * per_class, SHAPE, seed=7)
    (root / "cube").mkdir(parents=True)
    (root / "sphere").mkdir()
    for index, (volume, mask, label) in enumerate(zip(volumes, masks, labels, strict=True)):
        # Hounsfield-like int16 values, as CT scans store them: the ingest rescales them.
        scan = volume.astype(np.int16) * 8 - 1000
        if label == 0:
            np.save(root / "cube" / f"case{index:03d}.npy", scan)
            np.save(root / "cube" / f"case{index:03d}_mask.npy", mask)
        else:
            affine = np.eye(4)
            nibabel.save(nibabel.Nifti1Image(scan, affine),
                         root / "sphere" / f"case{index:03d}.nii.gz")
            nibabel.save(nibabel.Nifti1Image(mask, affine),
                         root / "sphere" / f"case{index:03d}_mask.nii.gz")
    np.save(root / "cube" / "unpaired.npy", volumes[0])
    nibabel.save(nibabel.Nifti1Image(volumes[1], np.eye(4)), root / "sphere" / "odd.nii.gz")
    nibabel.save(nibabel.Nifti1Image(masks[1][:8], np.eye(4)), root / "sphere" / "odd_mask.nii.gz")
    return root


@pytest.fixture(scope="module")
def volumes_run(mptfx, tmp_path_factory):
    data = write_user_volumes(tmp_path_factory.mktemp("scans") / "scans")
    workspace = tmp_path_factory.mktemp("ws")
    result = mptfx("run", "--workspace", str(workspace), "--data", str(data), "--json",
                   "--set", "model.name=unet3d", "--set", "model.input_size=[16,16]",
                   "--set", "trainer.batch_size=8", "--set", "trainer.epochs=6",
                   "--set", "data.max_bad_fraction=0.05",
                   "--set", "tracking.register_model=false")
    assert result.returncode == 0, result.stderr[-3000:]
    return result.summary


def test_user_volumes_train_the_unet_above_the_dice_floor(volumes_run):
    summary = volumes_run
    assert summary.status == "completed"
    trainer = summary.trainer
    assert trainer.task == "segmentation" and trainer.input_shape == [16, 16, 16, 1]
    assert trainer.dice >= 0.8
    assert summary.eval.blessed is True and summary.pushed.pushed is True
    # No TF Lite for a 3D model; every other component ran.
    assert set(summary.components) == {
        "Ingest", "StatisticsGen", "SchemaGen", "ExampleValidator", "DataValidationGate",
        "Trainer", "LatestBlessedModel", "Evaluator", "InfraValidator", "Pusher"}


def test_the_evaluator_gates_on_dice_not_accuracy(volumes_run):
    import tensorflow_model_analysis as tfma

    summary = volumes_run
    assert summary.trainer.dice >= summary.config["evaluator"]["min_dice"]
    metrics = {}
    for slice_metrics in tfma.load_metrics(summary.eval.evaluation_uri):
        if not slice_metrics.slice_key.single_slice_keys:
            for entry in slice_metrics.metric_keys_and_values:
                metrics[entry.key.name] = entry.value.double_value.value
    assert "sparse_categorical_accuracy" not in metrics
    # The served float32 copy agrees with the Trainer's own (mixed-precision) validation Dice.
    assert metrics["dice"] == pytest.approx(summary.trainer.dice, abs=0.02)
    assert summary.eval.blessed is True


def test_broken_pairs_are_quarantined_with_their_reason(volumes_run):
    data = volumes_run.data
    assert data.images == 2 * PER_CLASS + 2 and data.quarantined == 2
    report = json.loads(Path(data.quarantine_report).read_text())
    reasons = {entry["path"]: entry["reason"] for entry in report["files"]}
    assert reasons["cube/unpaired.npy"] == "no mask unpaired_mask.npy beside it"
    assert "mask shape (8, 16, 16) differs from volume shape (16, 16, 16)" in \
        reasons["sphere/odd.nii.gz"]
    assert sum(data.split_counts.values()) == 2 * PER_CLASS

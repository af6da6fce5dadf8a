"""End to end: the real `mptfx run` with the Trainer's precision and model choices.

Three small runs, two at a time (each run spends most of its time importing and compiling
on one core): float32 and resnet50, then mixed_float16 (reusing the float32 run's cached
ingest). The 3D U-Net's run, gated on Dice: tests/e2e/test_user_volumes_e2e.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from components.run_summary import RunSummary
from tests.conftest import RUN_DIR

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DIGITS_8X8 = ["--set", "model.input_size=[8,8]", "--set", "trainer.epochs=5",
              "--set", "tflite.variants=[fp32]"]
RUNS = {
    # wave 1
    "float32": ("digits", [*DIGITS_8X8, "--set", "trainer.precision=float32"]),
    "resnet50": ("resnet", ["--set", "model.name=resnet50", "--set", "data.builtin_per_class=10",
                            "--set", "trainer.epochs=1", "--set", "tflite.variants=[fp32]"]),
    # wave 2
    "mixed_float16": ("digits", [*DIGITS_8X8, "--set", "trainer.precision=mixed_float16"]),
}
WAVES = [("float32", "resnet50"), ("mixed_float16",)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, RunSummary]:
    """name -> summary.json of each run (asserting it exited 0)."""
    workspaces = {}
    summaries = {}
    for wave in WAVES:
        started = {}
        for name in wave:
            workspace_name, args = RUNS[name]
            if workspace_name not in workspaces:
                workspaces[workspace_name] = tmp_path_factory.mktemp(workspace_name)
            command = [sys.executable, "-m", "pipelines.cli", "run", "--workspace",
                       str(workspaces[workspace_name]), "--json", *args]
            started[name] = subprocess.Popen(
                command, cwd=RUN_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
        for name, process in started.items():
            stdout, stderr = process.communicate(timeout=900)
            assert process.returncode == 0, f"{name}: {stderr[-3000:]}"
            summaries[name] = RunSummary.parse(json.loads(stdout), f"{name}'s --json output")
    return summaries


def _assert_completed(summary: RunSummary, components: set[str]) -> None:
    assert summary.status == "completed"
    assert set(summary.components) == components
    for name, info in summary.components.items():
        assert info.status in ("completed", "cached"), name


CLASSIFICATION = {"Ingest", "StatisticsGen", "SchemaGen", "ExampleValidator",
                  "DataValidationGate", "Trainer", "LatestBlessedModel", "Evaluator",
                  "InfraValidator", "Pusher", "TFLite"}


def test_mixed_float16_is_within_two_points_of_float32(runs):
    float32, mixed = runs["float32"], runs["mixed_float16"]
    for summary in (float32, mixed):
        _assert_completed(summary, CLASSIFICATION)
    assert float32.trainer.precision == "float32"
    assert mixed.trainer.precision == "mixed_float16"
    assert mixed.trainer.loss_scale["dynamic"] is True  # float16 is loss-scaled
    assert float32.trainer.loss_scale is None
    assert mixed.components["Ingest"].status == "cached"
    accuracy32, accuracy16 = float32.eval.accuracy, mixed.eval.accuracy
    assert accuracy32 > 0.9
    assert abs(accuracy16 - accuracy32) <= 0.02, (accuracy16, accuracy32)


def test_resnet50_runs_end_to_end_on_the_resized_digits(runs):
    import tensorflow as tf

    summary = runs["resnet50"]
    _assert_completed(summary, CLASSIFICATION)
    trainer = summary.trainer
    assert trainer.model == "resnet50" and trainer.input_size == [16, 16]
    assert trainer.lint == "passed"
    assert summary.eval.accuracy is not None  # TFMA evaluated its serving signature
    served = tf.saved_model.load(os.path.join(trainer.model_uri, "Format-Serving"))
    digits = tf.zeros([2, 8, 8, 1], tf.uint8)  # stored 8x8; resized to 16x16 in the graph
    probabilities = served.signatures["predict_images"](images=digits)["probabilities"]
    np.testing.assert_allclose(probabilities.numpy().sum(axis=1), 1.0, rtol=1e-5)
    assert probabilities.shape == (2, 10)

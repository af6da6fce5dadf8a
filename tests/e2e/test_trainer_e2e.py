"""End to end: the real `mptfx run` with a Keras Applications model by name (resnet50, from
random weights, on the digits resized to its smallest input).

The precision comparison (mixed_float16 within two points of float32) uses the float32 run and
the mixed_float16 sweep point of tests/e2e/test_tracking_e2e.py; the 3D U-Net's run, gated on
Dice: tests/e2e/test_user_volumes_e2e.py.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from components.run_summary import RunSummary

pytestmark = pytest.mark.e2e

CLASSIFICATION = {"Ingest", "StatisticsGen", "SchemaGen", "ExampleValidator",
                  "DataValidationGate", "Trainer", "LatestBlessedModel", "Evaluator",
                  "InfraValidator", "Pusher", "TFLite"}


@pytest.fixture(scope="module")
def resnet50_run(mptfx, tmp_path_factory) -> RunSummary:
    workspace = tmp_path_factory.mktemp("resnet")
    result = mptfx("run", "--workspace", str(workspace), "--json",
                   "--set", "model.name=resnet50", "--set", "data.builtin_per_class=10",
                   "--set", "trainer.epochs=1", "--set", "tflite.variants=[fp32]")
    assert result.returncode == 0, result.stderr[-3000:]
    return result.summary


def test_resnet50_runs_end_to_end_on_the_resized_digits(resnet50_run):
    import tensorflow as tf

    summary = resnet50_run
    assert summary.status == "completed"
    assert set(summary.components) == CLASSIFICATION
    for name, info in summary.components.items():
        assert info.status in ("completed", "cached"), name
    trainer = summary.trainer
    assert trainer.model == "resnet50" and trainer.input_size == [16, 16]
    assert trainer.lint == "passed"
    assert summary.eval.accuracy is not None  # TFMA evaluated its serving signature
    served = tf.saved_model.load(os.path.join(trainer.model_uri, "Format-Serving"))
    digits = tf.zeros([2, 8, 8, 1], tf.uint8)  # stored 8x8; resized to 16x16 in the graph
    probabilities = served.signatures["predict_images"](images=digits)["probabilities"]
    np.testing.assert_allclose(probabilities.numpy().sum(axis=1), 1.0, rtol=1e-5)
    assert probabilities.shape == (2, 10)

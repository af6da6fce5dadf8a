"""End to end with a user's model file: the real `mptfx run` on the digits (8x8, a few
epochs) with examples/my_model.py (a custom layer done right) under mixed_bfloat16 forced.
The same file under float32 and mixed_float16, and its unchanged file reusing the cached
Trainer, are runs of tests/e2e/test_tracking_e2e.py's workspace A; an LSTM under
mixed_float16 with its recurrent layers in float32 trains in tests/integration/test_trainer.py.

mixed_float16 has no fast kernels on a CPU, so each run is kept to the fewest epochs that
still bless (evaluator.min_accuracy 0.9 stays as it is).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.conftest import assert_blessed_exported_and_converted, set_args

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "my_model.py"
TINY = ["--set", "model.input_size=[8,8]", "--set", "tflite.variants=[fp32]"]
# Served as trained (export.serving_precision: mixed); TF Lite converts the float32 rebuild.
BFLOAT16_SETTINGS = (f"model.module_file={EXAMPLE}", "trainer.precision=mixed_bfloat16",
                     "trainer.epochs=8", "export.serving_precision=mixed")


def _run(mptfx, workspace: Path, *settings: str):
    # float16 on a CPU has no fast kernels: allow a busy CI machine the time it takes.
    result = mptfx("run", "--workspace", str(workspace), *TINY, *set_args(*settings), "--json",
                   timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def bfloat16_run(mptfx, tmp_path_factory):
    workspace = tmp_path_factory.mktemp("bf16")
    return workspace, _run(mptfx, workspace, *BFLOAT16_SETTINGS)


def test_custom_layer_model_trains_blessed_and_converts_under_bfloat16(bfloat16_run):
    assert_blessed_exported_and_converted(bfloat16_run[1].summary, "mixed_bfloat16")


def test_serving_precision_mixed_pushes_the_bfloat16_graph_with_float32_outputs(bfloat16_run):
    """`mptfx run --set export.serving_precision=mixed`: TF Serving gets the graph as it
    trained (bfloat16 ops inside, float32 probabilities out); TF Lite's fp32 variant above
    came from the float32 rebuild beside it."""
    import numpy as np
    import tensorflow as tf

    from components.tflite.convert import reduced_precision_dtypes

    summary = bfloat16_run[1].summary
    assert summary.config["export"]["serving_precision"] == "mixed"
    assert reduced_precision_dtypes(summary.pushed.path) == ["bfloat16"]
    served = tf.saved_model.load(summary.pushed.path).signatures["predict_images"]
    probabilities = served(images=tf.zeros([3, 8, 8, 1], tf.uint8))["probabilities"]
    assert probabilities.dtype == tf.float32
    np.testing.assert_allclose(probabilities.numpy().sum(axis=1), 1.0, atol=1e-2)


def test_trainer_imported_the_staged_copy_of_the_file(bfloat16_run):
    workspace, result = bfloat16_run
    trainer = result.summary.trainer
    digest = hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
    assert trainer.model_file == str(EXAMPLE)
    assert trainer.model_file_sha256 == digest
    staged = Path(trainer.model_file_staged)
    assert staged == workspace / "tfx" / "mptfx-digits" / "user_models" / digest[:16] / \
        "my_model.py"
    assert staged.read_bytes() == EXAMPLE.read_bytes()


def test_mlflow_run_records_the_model_file_name_and_hash(bfloat16_run):
    import mlflow

    recorded = bfloat16_run[1].summary.mlflow
    client = mlflow.tracking.MlflowClient(recorded.tracking_uri)
    params = client.get_run(recorded.run_id).data.params
    assert params["model_file"] == "my_model.py"
    assert params["model_file_sha256"] == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()

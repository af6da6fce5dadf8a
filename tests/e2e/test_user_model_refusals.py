"""`mptfx run` refuses a bad model file before anything runs: exit 2, one line naming the
file, the layer and the fix, the traceback in the run's log, and no Ingest output.

Each case is the real `mptfx run` on a file under tests/data/user_models/, with
`trainer.precision=mixed_float16` forced (the policy that catches the most mistakes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e

MODELS = REPO / "tests" / "data" / "user_models"

# file -> what the one line must say besides the file (the layer, the cause, the fix).
REFUSALS = {
    "does_not_import.py": ["does not import", "ImportError", "MultiHeadAtention"],
    "no_builder.py": ["'build_model' (model.builder) is missing",
                      "def build_model(input_shape, num_classes, **params)"],
    "not_a_model.py": ["build_model() returned keras.src.layers.core.dense.Dense",
                       "not a keras.Model"],
    "float16_output.py": ["Layer 'head' (Dense)", "output in float16 under mixed_float16",
                          'dtype="float32"'],
    "float32_constant.py": ["layer 'add_bias' (AddBias) fails under mixed_float16",
                            "dtype float16", "ops.cast(x, self.compute_dtype)"],
    "attention_float16_softmax.py": ["Layer 'row_attention' (MultiHeadAttention)",
                                     "softmax", "in float16 under mixed_float16",
                                     'keras.layers.Softmax(dtype="float32")'],
}


@pytest.mark.parametrize("file_name", sorted(REFUSALS))
def test_bad_model_file_is_refused_before_the_ingest(mptfx, tmp_path, file_name):
    model_file = MODELS / file_name
    workspace = tmp_path / "ws"
    result = mptfx("run", "--workspace", str(workspace),
                   "--set", f"model.module_file={model_file}",
                   "--set", "trainer.precision=mixed_float16")
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("mptfx: error:")]
    assert len(errors) == 1, result.stderr[-2000:]
    line = errors[0]
    assert f"model.module_file {model_file}" in line
    for expected in REFUSALS[file_name]:
        assert expected in line, line
    # Nothing ran: no pipeline root, no Ingest output, no exported digits, no MLflow run.
    assert not (workspace / "tfx").exists()
    assert not list(workspace.rglob("Ingest"))
    assert not (workspace / "data").exists() and not (workspace / "mlflow.db").exists()
    logs = list(workspace.glob("runs/*/pipeline.log"))
    assert len(logs) == 1 and "Traceback (most recent call last)" in logs[0].read_text()


def test_custom_layer_done_right_passes_the_same_check(tmp_path):
    """The README's example file passes the check that refuses the files above, under every
    policy (the check itself, without a pipeline run)."""
    from components.trainer.model_check import check_model_file

    for policy in ("float32", "mixed_float16", "mixed_bfloat16"):
        notes = check_model_file(str(REPO / "examples" / "my_model.py"), "build_model",
                                 "classification", {"units": 8}, (8, 8, 1), policy)
        assert notes == []


def test_missing_model_file_is_refused_naming_it(mptfx, tmp_path):
    missing = tmp_path / "nowhere" / "model.py"
    result = mptfx("run", "--workspace", str(tmp_path / "ws"),
                   "--set", f"model.module_file={missing}")
    assert result.returncode == 2
    assert f"mptfx: error: model.module_file {missing}: cannot read it" in result.stderr
    assert not (tmp_path / "ws" / "tfx").exists()



def test_cluster_commands_refuse_a_bad_model_file_before_writing_any_object(mptfx, tmp_path):
    """`mptfx k8s compile` (and submit, retrain --runner kubernetes, which load the config the
    same way) runs the same check before anything is compiled: exit 2, one line, no objects.
    No cluster is needed: the refusal comes before any Kubernetes call."""
    model_file = MODELS / "float32_constant.py"
    out = tmp_path / "k8s-out"
    result = mptfx("k8s", "compile", "--out", str(out),
                   "--set", f"model.module_file={model_file}",
                   "--set", "trainer.precision=mixed_float16")
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("mptfx: error:")]
    assert len(errors) == 1 and f"model.module_file {model_file}" in errors[0], result.stderr
    assert "layer 'add_bias' (AddBias) fails under mixed_float16" in errors[0]
    assert not list(out.glob("*.yaml")) and not (out / "pipeline.json").exists()

"""End to end: rolling models out with `mptfx serve` after two real, tiny pipeline runs.

One workspace, two real runs (the suite's `canary_workspace`, tests/conftest.py, copied): the
first pushes version 1 with `pusher.rollout: direct` (it becomes stable, MLflow champion), the
second, a retraining on the next span started by drift (tests/drift_canary.py), pushes version
2 with `pusher.rollout: canary` (it becomes canary, MLflow challenger). The tests then drive
`mptfx serve` as a user would and read back what TF Serving would read: models.config
parsed with TF Serving's own `model_server_config_pb2`, and the aliases in MLflow.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.conftest import RUN_DIR, CliResult
from tests.tf_serving_double import serve_models
from tests.tf_serving_double import served as served_models
from tests.workspaces import relocated_copy

pytestmark = pytest.mark.e2e

@pytest.fixture(scope="module")
def workspace(canary_workspace, tmp_path_factory) -> Path:
    """This module's copy of the suite's v1 stable + v2 canary workspace (tests/conftest.py),
    which the tests below change."""
    return relocated_copy(canary_workspace, tmp_path_factory.mktemp("serve") / "ws")


def serve(mptfx, workspace: Path, *args: str, process: bool = False, env: dict | None = None):
    """`mptfx serve ARGS`: in this process through the CLI's own `main` (each new process
    spends most of a minute importing TensorFlow and MLflow on this machine), or as a real
    console process with `process=True`."""
    argv = ["serve", *args, "--workspace", str(workspace)]
    if process or env is not None:
        return subprocess.run([sys.executable, "-m", "pipelines.cli", *argv], cwd=RUN_DIR,
                              env={**os.environ, **(env or {})}, capture_output=True,
                              text=True, timeout=600)
    from pipelines.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse refusals
            code = exit_.code
    return CliResult(code, out.getvalue(), err.getvalue())


def served(workspace: Path) -> dict:
    """models.config as TF Serving parses it: labels and the versions its policy loads."""
    entry = served_models(workspace / "serving", "digits")
    assert entry.pop("base_path") == str(workspace / "serving" / "digits")
    return entry


def aliases(workspace: Path) -> dict[str, int]:
    """MLflow alias → the TF Serving version its registered version was pushed as."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{workspace}/mlflow.db"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    model = client.get_registered_model("digits")
    return {alias: int(client.get_model_version("digits", version).tags["serving_version"])
            for alias, version in (model.aliases or {}).items()
            if "serving_version" in client.get_model_version("digits", version).tags}


def status(mptfx, workspace: Path) -> dict:
    result = serve(mptfx, workspace, "status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def assert_status_says_what_models_config_says(mptfx, workspace: Path) -> dict:
    state = status(mptfx, workspace)
    config = served(workspace)
    assert state["labels"] == config["labels"]
    assert state["served_versions"] == config["versions"]
    assert state["out_of_sync"] == [] and state["problems"] == []
    return state


def test_direct_then_canary_push_label_versions_and_move_aliases(mptfx, workspace):
    assert served(workspace) == {"labels": {"stable": 1, "canary": 2}, "versions": [1, 2]}
    assert aliases(workspace) == {"champion": 1, "challenger": 2}
    state = assert_status_says_what_models_config_says(mptfx, workspace)
    rows = {row["version"]: row for row in state["versions"]}
    assert rows[1]["labels"] == ["stable"] and rows[1]["aliases"] == ["champion"]
    assert rows[2]["labels"] == ["canary"] and rows[2]["aliases"] == ["challenger"]
    assert rows[1]["blessed"] is rows[2]["blessed"] is True


@pytest.fixture
def tf_serving(workspace):
    with serve_models(workspace / "serving", "digits") as server:
        yield server.handler, server.url


def test_check_replays_warmup_requests_and_reports_agreement_and_latency(
        mptfx, workspace, tf_serving):
    handler, url = tf_serving
    result = serve(mptfx, workspace, "check", "--url", url, "--label", "canary", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["url"] == f"{url}/v1/models/digits/labels/canary:predict"
    assert report["version"] == 2 and report["agreement"] == 1.0
    assert {r["signature_name"] for r in report["requests"]} == {
        "serving_default", "predict_image_bytes", "predict_images"}
    assert all(r["latency_ms"] > 0 for r in report["requests"])
    assert [s["version"] for s in report["model_status"]] == ["1", "2"]
    # A server answering the canary label from the wrong version is caught.
    handler.answer_from["canary"] = 1
    wrong = serve(mptfx, workspace, "check", "--url", url, "--label", "canary")
    assert wrong.returncode == 1 and "DISAGREES" in wrong.stdout, wrong.stdout + wrong.stderr


def test_check_names_the_host_when_nothing_answers(mptfx, workspace):
    result = serve(mptfx, workspace, "check", "--url", "http://127.0.0.1:9", process=True)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("mptfx: error: serve check: "
                                                             "127.0.0.1:9 did not answer")


def _snapshot(workspace: Path) -> tuple:
    serving = workspace / "serving"
    route = workspace / "k8s" / "serving-route.yaml"
    return ((serving / "models.config").read_bytes(),
            route.read_bytes() if route.exists() else None,
            sorted(os.listdir(serving / "digits")), aliases(workspace))


def test_every_refusal_is_one_line_exit_2_and_changes_nothing(mptfx, workspace):
    from mlflow import MlflowClient

    uri = f"sqlite:///{workspace}/mlflow.db"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    # What an unblessed run registers: a version that was never pushed (no serving_version).
    unpushed = str(client.create_model_version("digits", source=str(workspace),
                                               tags={"blessed": "false"}).version)
    # A folder nobody blessed: copied by hand beside the pushed versions.
    shutil.copytree(workspace / "serving" / "digits" / "1", workspace / "serving" / "digits" / "7")
    before = _snapshot(workspace)
    refusals = {
        ("canary", "42"): "unknown version 42",
        ("pin", "42"): "unknown version 42",
        ("canary", unpushed): f"version {unpushed} is not pushed",
        ("pin", "7"): "version 7 in ",
        ("rollback", "--to", "7"): "was never blessed",
        ("canary", "1"): "version 1 is already stable",
        ("canary", "2", "--weight", "150"): "--weight must be between 0 and 100",
    }
    for index, (argv, expected) in enumerate(refusals.items()):
        result = serve(mptfx, workspace, *argv, process=index == 0)  # one as a real process
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, (argv, result.stderr)
        assert len(lines) == 1 and expected in lines[0], (argv, lines)
        assert result.stdout == ""
        assert _snapshot(workspace) == before, argv
    shutil.rmtree(workspace / "serving" / "digits" / "7")


def _route_weights(workspace: Path) -> list[int]:
    [route] = yaml.safe_load_all((workspace / "k8s" / "serving-route.yaml").read_text())
    return [ref["weight"] for ref in route["spec"]["rules"][0]["backendRefs"]]


def test_canary_weight_promote_rollback_and_pin(mptfx, workspace):
    result = serve(mptfx, workspace, "canary", "2", "--weight", "30")
    assert result.returncode == 0, result.stderr
    assert _route_weights(workspace) == [70, 30]
    assert served(workspace)["labels"] == {"stable": 1, "canary": 2}

    assert serve(mptfx, workspace, "promote").returncode == 0
    assert served(workspace) == {"labels": {"stable": 2, "previous": 1}, "versions": [1, 2]}
    assert aliases(workspace) == {"champion": 2}  # the challenger label went with the canary
    assert _route_weights(workspace) == [100, 0]
    assert_status_says_what_models_config_says(mptfx, workspace)

    assert serve(mptfx, workspace, "rollback").returncode == 0
    assert served(workspace)["labels"] == {"stable": 1, "previous": 2}
    assert aliases(workspace) == {"champion": 1}
    assert_status_says_what_models_config_says(mptfx, workspace)

    assert serve(mptfx, workspace, "pin", "2").returncode == 0
    assert served(workspace)["labels"] == {"stable": 2, "previous": 1}
    assert aliases(workspace) == {"champion": 2}
    assert_status_says_what_models_config_says(mptfx, workspace)


def test_a_kill_between_models_config_and_aliases_is_repaired_by_status(mptfx, workspace):
    assert aliases(workspace) == {"champion": 2}
    killed = serve(mptfx, workspace, "rollback",
                   env={"MPTFX_SERVE_FAULT": "after_models_config"})
    assert killed.returncode == -9  # SIGKILL: no alias moved, nothing cleaned up
    assert served(workspace)["labels"] == {"stable": 1, "previous": 2}
    assert aliases(workspace) == {"champion": 2}  # MLflow still says the old stable

    result = serve(mptfx, workspace, "status")
    assert result.returncode == 0
    assert "repaired (aliases follow models.config): champion:" in result.stdout
    assert aliases(workspace) == {"champion": 1}
    state = assert_status_says_what_models_config_says(mptfx, workspace)
    assert state["repaired"] == []  # nothing left to repair


def test_pyfunc_of_a_canary_push_predicts_like_its_saved_model(workspace, monkeypatch):
    import mlflow
    import tensorflow as tf

    uri = f"sqlite:///{workspace}/mlflow.db"
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    [record] = [v for v in client.search_model_versions("name = 'digits'")
                if v.tags.get("serving_version") == "2"]
    # Else MLflow creates ./mlflow.db in the working directory. Through the environment, not
    # mlflow.set_*_uri: those pin process-wide URIs that outlive the test.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", uri)
    model = mlflow.pyfunc.load_model(f"models:/digits/{record.version}")
    images = np.random.default_rng(0).integers(0, 256, (5, 8, 8, 1), dtype=np.uint8)
    saved = tf.saved_model.load(str(workspace / "serving" / "digits" / "2"))
    expected = saved.signatures["predict_images"](images=tf.constant(images))
    predicted = model.predict(images)
    np.testing.assert_array_equal(predicted["class_id"], expected["class_id"].numpy())

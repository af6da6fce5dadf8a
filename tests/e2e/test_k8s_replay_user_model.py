"""The Kubernetes replay (tests/e2e/test_k8s_replay.py) with a user's model file: the
driver stages the file into the pipeline root while compiling, the source file is then
deleted, and the Trainer pod -- a separate `python -m pipelines.node_entrypoint` process,
as every node of the replay -- imports the staged copy from the pipeline root.

The only stand-in is the Kubernetes API (the replay's `ProcessCluster`: each Job's pod is a
local process); ML Metadata is the real PostgreSQL server of the `postgres` fixture.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil

import pytest

from tests.k8s_double import REPO, SMALL, ProcessCluster, k8s_overrides, submit

pytestmark = pytest.mark.e2e

EXAMPLE = REPO / "examples" / "my_model.py"


@pytest.fixture(scope="module")
def user_model_replay(postgres, tmp_path_factory):
    from pipelines.config import load_config
    from pipelines.k8s_commands import compile_for_kubernetes

    tmp = tmp_path_factory.mktemp("replay-user-model")
    source = tmp / "src" / "my_model.py"
    source.parent.mkdir()
    shutil.copy(EXAMPLE, source)
    workspace = tmp / "ws"
    config = load_config(REPO / "configs/local.yaml", SMALL + [
        "model.input_size=[8,8]", f"model.module_file={source}",
        *k8s_overrides(postgres, workspace)])
    run_id = "replay-user-" + secrets.token_hex(2)
    cluster = ProcessCluster({("mptfx-postgres", "password"): postgres["password"]}, tmp)
    _, ir, _ = compile_for_kubernetes(config, run_id, None)  # stages the file
    source.unlink()  # from here on only the staged copy in the pipeline root exists
    report, _, out = submit(config, ir, run_id, cluster, tmp)
    return {"report": report, "out": out, "cluster": cluster, "ir": ir,
            "workspace": workspace, "digest": hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()}


def _trainer_custom_config(ir) -> dict:
    trainer = next(n.pipeline_node for n in ir.nodes if n.pipeline_node.node_info.id == "Trainer")
    value = trainer.parameters.parameters["custom_config"].field_value.string_value
    return json.loads(value)


def test_compiled_trainer_names_the_staged_copy_in_the_pipeline_root(user_model_replay):
    model = _trainer_custom_config(user_model_replay["ir"])["model"]
    digest = user_model_replay["digest"]
    staged = user_model_replay["workspace"] / "tfx" / "mptfx-digits" / "user_models" / \
        digest[:16] / "my_model.py"
    assert model["module_file"] == str(staged) and model["module_sha256"] == digest
    assert staged.read_bytes() == EXAMPLE.read_bytes()


def test_each_pod_runs_and_the_trainer_pod_imports_the_staged_copy(user_model_replay):
    report, cluster = user_model_replay["report"], user_model_replay["cluster"]
    assert report.succeeded, user_model_replay["out"]
    assert len(cluster.order) == 11 and cluster.order[-1] == "TFLite"
    [pod] = cluster.jobs[report.nodes["Trainer"].job]["pods"]
    assert pod["process"].returncode == 0
    model_runs = list(user_model_replay["workspace"].rglob("training_summary.json"))
    assert len(model_runs) == 1
    summary = json.loads(model_runs[0].read_text())
    staged = _trainer_custom_config(user_model_replay["ir"])["model"]["module_file"]
    assert summary["model_file_staged"] == staged
    assert summary["model_file_sha256"] == user_model_replay["digest"]
    assert summary["model"].startswith("user:my_model.py:build_model@")
    assert list(user_model_replay["workspace"].rglob("saved_model.pb"))

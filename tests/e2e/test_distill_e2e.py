"""Distillation through the whole pipeline: a champion, then a student distilled from it
with `trainer.distill.teacher: champion`. Two pipeline runs in one workspace: the teacher's
(the suite's shared local run, copied: `mptfx retrain` of the digits' first span with the
baseline settings, SMALL) and the student's through the Python API on the same span (a
narrower seed_cnn, the int8 TF Lite variant).

What a user would check: the student is gated against its own model's baseline, published
under its own name with a TF Lite int8 model that passed the parity gate, the teacher's
serving versions and labels are byte for byte as they were, and summary.json, MLflow and
the model card say who taught whom and how each scored on the same eval split.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from components.run_summary import RunSummary
from components.serving.models_config import models_config_path, read_labels
from components.tracking.store import mlflow_client
from pipelines.api import run_pipeline
from tests.folders import tree_hash
from tests.workspaces import SMALL, relocated_copy

REPO = Path(__file__).resolve().parents[2]
STUDENT = ["trainer.distill.teacher=champion", "model.name=seed_cnn",
           "model.params.dense_units=16", "tflite.variants=[int8]"]


@pytest.fixture(scope="module")
def runs(local_run_workspace, local_run_data, tmp_path_factory):
    """(teacher summary, student summary, the teacher's serving hash and labels before the
    student's run, the workspace). The teacher's run is the suite's local run
    (tests/conftest.py), copied."""
    workspace = relocated_copy(local_run_workspace, tmp_path_factory.mktemp("distill") / "ws")
    [teacher] = [RunSummary.read(path) for path in workspace.glob("runs/*/summary.json")]
    assert teacher.status == "completed" and teacher.pushed.pushed, teacher.error
    serving = workspace / "serving"
    before = (tree_hash(serving / "digits"),
              read_labels(models_config_path(serving), "digits"))
    student = run_pipeline(REPO / "configs/local.yaml", workspace,
                           overrides=[*SMALL, f"data.source={local_run_data}", *STUDENT])
    assert student.status == "completed", student.error
    return teacher, student, before, workspace


def test_the_student_is_gated_and_published_under_its_own_name(runs):
    teacher, student, _, workspace = runs
    assert (student.pipeline, student.config["pusher"]["model_name"]) == (
        "mptfx-digits-student", "digits-student")
    # Its own pipeline's baseline: none yet, never the teacher's blessed model.
    assert student.eval.blessed and student.eval.baseline_accuracy is None
    assert student.pushed.path == str(workspace / "serving" / "digits-student" / "1")
    assert read_labels(models_config_path(workspace / "serving"), "digits-student").stable == 1
    int8 = student.tflite["int8"]
    assert int8.published, int8.reason
    assert Path(int8.path).is_file() and Path(int8.path).parent.parent == (
        workspace / "tflite" / "digits-student")


def test_the_teachers_serving_versions_and_labels_are_untouched(runs):
    _, _, (hash_before, labels_before), workspace = runs
    serving = workspace / "serving"
    assert tree_hash(serving / "digits") == hash_before
    assert read_labels(models_config_path(serving), "digits") == labels_before
    assert labels_before.stable == 1


def test_summary_mlflow_and_model_card_say_who_taught_whom(runs):
    teacher, student, _, workspace = runs
    record = student.trainer.distill
    assert record["teacher"] == str(workspace / "serving" / "digits" / "1")
    assert (record["temperature"], record["alpha"]) == (4.0, 0.1)
    assert record["teacher_model"] == teacher.trainer.model == "seed_cnn"
    assert record["student_parameters"] < record["teacher_parameters"]
    # The teacher scored on the student's eval split: the same images it was validated on
    # (in the precision distillation chose for it: within one image).
    assert record["eval_examples"] == student.data.split_counts["eval"]
    assert record["teacher_accuracy"] == pytest.approx(teacher.trainer.to_dict()[
        "val_accuracy"], abs=1.01 / record["eval_examples"])
    client = mlflow_client(student.mlflow.tracking_uri)
    run = client.get_run(student.mlflow.run_id)
    assert run.data.params["distill_teacher"] == record["teacher"]
    assert run.data.params["config.trainer.distill.teacher"] == "champion"
    assert run.data.metrics["distill/teacher_accuracy"] == pytest.approx(
        record["teacher_accuracy"])
    assert run.data.metrics["distill/student_accuracy"] == pytest.approx(
        record["student_accuracy"])
    card = run.data.tags["mlflow.note.content"]
    assert "## Distillation" in card and "| teacher | SavedModel |" in card
    assert "| student | TF Lite int8 |" in card
    assert str(client.get_model_version_by_alias("digits-student", "champion").version) == "1"
    assert str(client.get_model_version_by_alias("digits", "champion").version) == "1"

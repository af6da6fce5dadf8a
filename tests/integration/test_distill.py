"""Knowledge distillation (`trainer.distill`): the loss, the Trainer with a real teacher on
the digits, the teacher found from a path or the champion, and what stops a run before
the Ingest. (Mixed precision under MirroredStrategy: tests/integration/
test_trainer_distribution.py; the whole pipeline: tests/e2e/test_distill_e2e.py.)"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from components.errors import UsageError
from components.ingest.selection import DataSelection, select_folder
from components.trainer import module
from components.trainer.distill import DistillationLoss
from components.trainer.teacher import (
    SAVED_MODEL_DESCRIPTION,
    TeacherError,
    check_classes,
    read_teacher,
)
from pipelines.config import ConfigError, load_config
from pipelines.distill import check_teacher, resolve_teacher
from pipelines.workspace import Workspace
from tests.folders import tree_hash
from tests.trainer_testdata import fn_args_dict, make_fn_args, write_digits_examples

REPO = Path(__file__).resolve().parents[2]
SIZE = (16, 16)


def _train(examples_uri: str, out: Path, **trainer: object) -> module.TrainingResult:
    fields = fn_args_dict(examples_uri, str(out), input_size=SIZE, autotune="off", **trainer)
    return module.train_and_export(make_fn_args(fields, light=True))


@pytest.fixture(scope="module")
def examples_uri(tmp_path_factory) -> str:
    return write_digits_examples(str(tmp_path_factory.mktemp("digits")), 300)


@pytest.fixture(scope="module")
def teacher(examples_uri, tmp_path_factory) -> module.TrainingResult:
    return _train(examples_uri, tmp_path_factory.mktemp("teacher"), epochs=6,
                  learning_rate=0.003)


def _teacher_weights(teacher: module.TrainingResult) -> str:
    return str(Path(teacher.serving_model_dir).parent / "Format-Keras" / "model.weights.h5")


@pytest.fixture(scope="module")
def students(examples_uri, teacher, tmp_path_factory):
    """The same small student (same seed) trained alone and from the teacher's weights
    file; the teacher's files hashed before the distilled run."""
    student = {"epochs": 2, "params": {"dense_units": 16}}
    alone = _train(examples_uri, tmp_path_factory.mktemp("alone"), **student)
    teacher_dir = Path(teacher.serving_model_dir).parent
    before = tree_hash(teacher_dir)
    distilled = _train(examples_uri, tmp_path_factory.mktemp("distilled"), **student,
                       distill={"teacher": _teacher_weights(teacher), "temperature": 2.0,
                                "alpha": 0.3, "precision": "float32"})
    return alone, distilled, before


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("temperature", [1.0, 4.0])
def test_the_distillation_loss_is_t_squared_times_the_kl_of_the_softened_predictions(
        temperature):
    rng = np.random.default_rng(0)
    teacher, student = (_softmax(rng.normal(size=(8, 5)) * 3).astype(np.float32)
                        for _ in range(2))
    soft_t, soft_s = (_softmax(np.log(p) / temperature) for p in (teacher, student))
    expected = temperature ** 2 * np.mean(np.sum(soft_t * np.log(soft_t / soft_s), axis=-1))
    loss = DistillationLoss(temperature)
    assert float(loss(teacher, student)) == pytest.approx(expected, rel=1e-5)
    assert float(loss(teacher, teacher)) == pytest.approx(0.0, abs=1e-6)
    # A probability that underflowed to 0 stays finite.
    assert np.isfinite(float(loss(teacher, np.eye(5, dtype=np.float32)[[0] * 8])))


def test_a_distilled_student_records_the_teacher_and_both_accuracies_on_one_eval_split(
        teacher, students):
    _, distilled, _ = students
    record = distilled.summary.distill
    assert record["teacher"] == _teacher_weights(teacher)
    assert (record["temperature"], record["alpha"]) == (2.0, 0.3)
    assert record["teacher_model"] == "seed_cnn" and record["teacher_precision"] == "float32"
    assert record["eval_examples"] == 60
    # Scored on the same eval split Keras validates on: each model's own val_accuracy.
    assert record["teacher_accuracy"] == pytest.approx(teacher.summary.final_metric, abs=1e-6)
    assert record["student_accuracy"] == pytest.approx(distilled.summary.final_metric,
                                                       abs=1e-6)
    assert record["student_parameters"] < record["teacher_parameters"] == \
        teacher.model.count_params()
    assert record["teacher_saved_model_bytes"] > 0 and record["teacher_latency_ms"] > 0
    losses = distilled.summary.history["distillation_loss"]
    assert len(losses) == 2 and all(np.isfinite(v) and v > 0 for v in losses)


def test_the_teacher_changes_the_training_not_the_students_start(students):
    alone, distilled, _ = students
    assert alone.summary.distill is None and "distillation_loss" not in alone.summary.history
    assert distilled.summary.initial_weights_checksum == alone.summary.initial_weights_checksum
    assert distilled.summary.final_weights_checksum != alone.summary.final_weights_checksum


def test_the_teacher_stays_frozen_and_out_of_the_student(teacher, students):
    alone, distilled, before = students
    assert tree_hash(Path(teacher.serving_model_dir).parent) == before
    # The student's weights, checkpoint and export hold the student alone.
    assert len(distilled.model.weights) == len(alone.model.weights)
    exported = Path(distilled.serving_model_dir).parent / "Format-Keras" / "model.weights.h5"
    fresh = module.build_training_model("seed_cnn", {"dense_units": 16}, (*SIZE, 1), 10,
                                        "float32")
    fresh.load_weights(str(exported))
    description = json.loads((Path(distilled.serving_model_dir) /
                              SAVED_MODEL_DESCRIPTION).read_text())
    assert description["model"] == "seed_cnn" and description["keras_weights"] == str(exported)


def test_a_saved_model_without_its_keras_weights_teaches_through_its_signature(
        examples_uri, teacher, tmp_path):
    """A served version copied to another machine: its description points at Keras
    weights that are not there, so the SavedModel's own graph teaches."""
    served = tmp_path / "serving" / "digits" / "7"
    shutil.copytree(teacher.serving_model_dir, served)
    described = served / SAVED_MODEL_DESCRIPTION
    description = json.loads(described.read_text())
    described.write_text(json.dumps({**description, "keras_weights": "/elsewhere/w.h5"}))
    student = _train(examples_uri, tmp_path / "student", epochs=1,
                     distill={"teacher": str(served)})
    record = student.summary.distill
    assert record["teacher_precision"].startswith("saved graph")
    assert record["teacher_accuracy"] == pytest.approx(teacher.summary.final_metric, abs=1e-6)
    assert record["teacher_saved_model"] == str(served)


def test_a_missing_or_unusable_teacher_is_named(teacher, tmp_path):
    with pytest.raises(TeacherError, match=f"no such file or folder {tmp_path}/absent"):
        read_teacher(str(tmp_path / "absent"))
    bare = tmp_path / "bare.weights.h5"
    shutil.copy(_teacher_weights(teacher), bare)
    with pytest.raises(TeacherError, match=r"no .*model\.json beside .*bare\.weights\.h5"):
        read_teacher(str(bare))
    (tmp_path / "folder").mkdir()
    with pytest.raises(TeacherError, match="neither a SavedModel folder"):
        read_teacher(str(tmp_path / "folder"))


def test_a_teacher_of_other_classes_is_refused_naming_both_lists(teacher):
    source = read_teacher(teacher.serving_model_dir)
    with pytest.raises(TeacherError) as refused:
        check_classes(source, ["cat", "dog"])
    message = str(refused.value)
    assert "trainer.distill.teacher" in message and "\n" not in message
    assert "the teacher's [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" in message
    assert "the data's [cat, dog]" in message


def test_a_distilled_run_is_published_and_gated_under_names_of_its_own():
    config = load_config(REPO / "configs" / "local.yaml", ["trainer.distill.teacher=champion"])
    assert (config.pusher.model_name, config.pipeline.name) == ("digits-student",
                                                                "mptfx-digits-student")
    assert config.trainer.distill.teacher_model_name == "digits"
    named = load_config(REPO / "configs" / "local.yaml", [
        "trainer.distill.teacher=champion", "trainer.distill.teacher_model_name=digits",
        "pusher.model_name=digits-edge", "pipeline.name=edge"])
    assert (named.pusher.model_name, named.pipeline.name) == ("digits-edge", "edge")
    plain = load_config(REPO / "configs" / "local.yaml", [])
    assert (plain.pusher.model_name, plain.trainer.distill.enabled) == ("digits", False)


@pytest.mark.parametrize("override, named", [
    ("trainer.distill.alpha=1.5", "trainer.distill.alpha"),
    ("trainer.distill.temperature=0", "trainer.distill.temperature"),
    ("trainer.distill.precision=float8", "trainer.distill.precision"),
])
def test_bad_distill_values_are_named(override, named):
    with pytest.raises(ConfigError, match=named):
        load_config(REPO / "configs" / "local.yaml", [override])


def _class_folders(root: Path, names: list[str]) -> DataSelection:
    for name in names:
        (root / name).mkdir(parents=True)
        buffer = io.BytesIO()
        Image.new("L", (8, 8), 128).save(buffer, format="PNG")
        (root / name / "a.png").write_bytes(buffer.getvalue())
    return select_folder(root)  # the run's one listing, as resolve_data makes it


def test_before_the_ingest_a_teacher_of_other_classes_stops_the_run(teacher, tmp_path):
    config = load_config(REPO / "configs" / "local.yaml",
                         [f"trainer.distill.teacher={teacher.serving_model_dir}"])
    workspace = Workspace(tmp_path / "ws")
    out = io.StringIO()
    check_teacher(config, workspace, _class_folders(tmp_path / "digits", [str(d) for d in
                                                                           range(10)]), out)
    assert f"distilling from {teacher.serving_model_dir}" in out.getvalue()
    with pytest.raises(UsageError, match=r"the data's \[cat, dog\]"):
        check_teacher(config, workspace, _class_folders(tmp_path / "pets", ["cat", "dog"]), out)


def test_champion_is_the_stable_served_version_and_its_absence_stops_the_run(teacher,
                                                                              tmp_path):
    from components.serving.models_config import ServingLabels, models_config_path, write_labels

    workspace = Workspace(tmp_path / "ws")
    config = load_config(REPO / "configs" / "local.yaml", ["trainer.distill.teacher=champion"])
    with pytest.raises(UsageError, match="digits has no champion"):
        resolve_teacher(config, workspace)
    base = Path(workspace.serving_dir("digits"))
    for version in (1, 2):
        shutil.copytree(teacher.serving_model_dir, base / str(version))
    write_labels(models_config_path(base.parent), "digits", str(base),
                 ServingLabels(stable=1, previous=None))
    path, origin = resolve_teacher(config, workspace)
    assert path == str(base / "1") and "stable" in origin


def test_a_teacher_trained_in_the_students_own_pipeline_is_refused(examples_uri, tmp_path):
    """Its Evaluator would compare the student with the teacher (the pipeline's latest
    blessed model): the student needs a pipeline of its own."""
    workspace = Workspace(tmp_path / "ws")
    inside = _train(examples_uri, workspace.pipeline_root("edge") / "Trainer", epochs=1)
    config = load_config(REPO / "configs" / "local.yaml", [
        f"trainer.distill.teacher={_teacher_weights(inside)}",
        "trainer.distill.teacher_model_name=digits", "pusher.model_name=edge",
        "pipeline.name=edge"])
    digits = _class_folders(tmp_path / "digits", [str(d) for d in range(10)])
    with pytest.raises(UsageError, match="was trained in pipeline edge, the student's"):
        check_teacher(config, workspace, digits, io.StringIO())


def test_a_student_named_as_its_teacher_is_refused(teacher, tmp_path):
    config = load_config(REPO / "configs" / "local.yaml", ["trainer.distill.teacher=champion"])
    config.pusher.model_name = "digits"  # a Config changed in Python after load_config
    digits = _class_folders(tmp_path / "digits", [str(d) for d in range(10)])
    with pytest.raises(UsageError, match="would be published as digits, the teacher's name"):
        check_teacher(config, Workspace(tmp_path / "ws"), digits, io.StringIO())

"""The summary `mptfx run` prints at the end: the distillation line says who taught the model
and how teacher and student scored on the same eval images."""

from __future__ import annotations

import io

from pipelines.run_command import _print_summary
from tests.run_summaries import fake_summary

DISTILL = {"teacher": "/ws/serving/digits/1", "teacher_model": "resnet50", "temperature": 4.0,
           "alpha": 0.1, "eval_examples": 363, "teacher_accuracy": 0.9752,
           "student_accuracy": 0.9807}


def _printed(tmp_path, distill: dict | None) -> str:
    summary = fake_summary(tmp_path)
    summary.trainer.distill = distill
    out = io.StringIO()
    _print_summary(summary, out)
    return out.getvalue()


def test_a_distilled_run_names_its_teacher_and_both_accuracies(tmp_path):
    printed = _printed(tmp_path, {**DISTILL, "student_accuracy": 0.9697})
    [line] = [line for line in printed.splitlines() if line.strip().startswith("distill")]
    assert ("from resnet50 (/ws/serving/digits/1): teacher 0.9752, student 0.9697 on the same "
            "363 eval images (T 4, alpha 0.1)") in line
    assert "outscores" not in line


def test_a_student_above_its_teacher_is_told_to_compare_with_training_alone(tmp_path):
    printed = _printed(tmp_path, DISTILL)
    assert ("student 0.9807 on the same 363 eval images (T 4, alpha 0.1); the student "
            "outscores its teacher, so the teacher has little to teach: compare with the "
            "student trained alone (docs/guide/distillation.md)") in printed


def test_a_run_without_a_teacher_prints_no_distill_line(tmp_path):
    assert "distill" not in _printed(tmp_path, None)

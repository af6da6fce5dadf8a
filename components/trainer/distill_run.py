"""The Trainer's distillation steps (`trainer.distill`): the teacher ready before the fit,
and after it the record training_summary.json carries (`distill`): teacher and student on
the same eval split, their sizes, and the teacher's SavedModel size and latency.

    prepared = prepare_distillation(config.trainer, runtime, task, fn_args.train_files)
    fitted = fit_model(..., distillation=prepared.distillation)
    summary_record = prepared.record(fitted.model, task, fn_args.eval_files)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from components.trainer import data as data_lib
from components.trainer.config import CHAMPION, TrainerSection
from components.trainer.distill import Distillation, adapt_images
from components.trainer.runtime import Runtime, Task
from components.trainer.teacher import (
    KEY,
    BuiltTeacher,
    TeacherSource,
    build_frozen_model,
    build_teacher,
    check_classes,
    folder_bytes,
    read_teacher,
    saved_model_latency_ms,
)
from components.trainer.tuning import real_batch, tune_teacher_precision
from components.trainer.tuning_record import TuningRecord

_EVAL_BATCH = 64
# Eval images kept for timing the teacher's SavedModel one image at a time.
_LATENCY_IMAGES = 50
_SAVED_GRAPH_REASON = "a SavedModel's graph keeps the precision it was exported in"


@dataclasses.dataclass
class PreparedTeacher:
    """The teacher built for this run, and how its precision was decided."""

    source: TeacherSource
    teacher: BuiltTeacher
    distillation: Distillation
    precision: TuningRecord | None  # None: a SavedModel's graph keeps its precision

    def record(self, student: keras.Model, task: Task, eval_files: Sequence[str]
               ) -> dict[str, Any]:
        """training_summary.json's `distill`: the settings, the teacher, and teacher vs
        student accuracy on the same eval split (each model in its own precision)."""
        teacher_accuracy, student_accuracy, examples, images = _eval_accuracies(
            self.teacher, student, task, eval_files)
        saved = self.source.saved_model_dir
        latency = saved_model_latency_ms(saved, images) if saved and len(images) else None
        student_parameters = int(student.count_params())
        record = {
            "teacher": self.source.path,
            "teacher_model": self.source.model_name,
            "teacher_parameters": self.teacher.parameters,
            "student_parameters": student_parameters,
            "parameter_ratio": student_parameters / max(1, self.teacher.parameters),
            "temperature": self.distillation.temperature,
            "alpha": self.distillation.alpha,
            "teacher_precision": self.teacher.precision,
            "teacher_precision_reason": self._precision_reason(),
            "teacher_autotune": _teacher_autotune(self.precision),
            "teacher_input_size": self.teacher.input_size,
            "eval_examples": examples,
            "teacher_accuracy": teacher_accuracy,
            "student_accuracy": student_accuracy,
            "teacher_saved_model": saved,
            "teacher_saved_model_bytes": folder_bytes(saved),
            "teacher_latency_ms": latency,
        }
        logging.info("Trainer: distilled from %s (%s, %d parameters, %s): on the %d eval "
                     "images the teacher scores %.4f, the student (%d parameters, %.3fx) "
                     "%.4f", self.source.path, self.source.model_name,
                     self.teacher.parameters, self.teacher.precision, examples,
                     teacher_accuracy, student_parameters, record["parameter_ratio"],
                     student_accuracy)
        return record

    def _precision_reason(self) -> str:
        return self.precision.reason if self.precision else _SAVED_GRAPH_REASON


def _teacher_autotune(precision: TuningRecord | None) -> dict[str, Any]:
    """The `teacher_autotune` record: how the teacher's precision was decided."""
    if precision is None:
        return {"status": "saved graph", "table": None, "probe_seconds": None, "key": None,
                "cache_file": None}
    content = precision.to_dict()
    return {key: content[key] for key in ("status", "table", "probe_seconds", "key",
                                          "cache_file")}


def prepare_distillation(trainer: TrainerSection, runtime: Runtime, task: Task,
                         train_files: Sequence[str]) -> PreparedTeacher:
    """Finds the teacher `trainer.distill.teacher` names, checks its classes against the
    data's, decides its precision and builds it frozen in the run's strategy.

    Raises:
        ValueError: one line naming trainer.distill.teacher (a missing or unusable teacher,
            other classes, a segmentation model, an unresolved `champion`).
    """
    settings = trainer.distill
    if settings.teacher == CHAMPION:
        raise ValueError(f"{KEY}: champion is resolved to the champion's folder when the "
                         "pipeline is built (mptfx run); the Trainer needs a path")
    if not task.is_classification:
        raise ValueError(f"{KEY}: distillation needs a classifier; {task.model_name} "
                         "segments volumes")
    source = read_teacher(settings.teacher)
    check_classes(source, task.label_names)
    images = _teacher_batch(source, task, runtime, train_files)
    if source.keras_weights is None:
        precision = None
        policy = ""
    else:
        description = source.description
        precision = tune_teacher_precision(
            settings.precision, trainer, runtime,
            lambda policy: build_frozen_model(description, source.keras_weights, policy,
                                              runtime.strategy),
            images,
            {"model": description.get("model"), "params": description.get("params"),
             "input_shape": description.get("input_shape"), "weights": source.keras_weights})
        policy = precision.choice.precision
    teacher = build_teacher(source, policy, runtime.strategy)
    distillation = Distillation(teacher.predict, settings.temperature, settings.alpha,
                                teacher.input_size, teacher.channels)
    logging.info("Trainer: teacher %s (%s, %d parameters) in %s (%s); temperature %g, "
                 "alpha %g", source.path, source.model_name, teacher.parameters,
                 teacher.precision, precision.reason if precision else _SAVED_GRAPH_REASON,
                 settings.temperature,
                 settings.alpha)
    return PreparedTeacher(source, teacher, distillation, precision)


def _teacher_batch(source: TeacherSource, task: Task, runtime: Runtime,
                   train_files: Sequence[str]) -> tf.Tensor:
    """A real training batch as the teacher sees it, for timing its precisions."""
    images, _ = real_batch(list(train_files), task, runtime.global_batch_size)
    shape = source.description.get("input_shape")
    if not shape:
        return images
    return adapt_images(images, shape[:2], int(shape[2]))


def _eval_accuracies(teacher: BuiltTeacher, student: keras.Model, task: Task,
                     eval_files: Sequence[str]) -> tuple[float, float, int, np.ndarray]:
    """Top-1 accuracy of the teacher and of the student on the eval split, its example
    count, and its first images as the teacher takes them."""
    dataset = data_lib.make_dataset(list(eval_files), task.input_shape[:2], task.channels,
                                    _EVAL_BATCH, shuffle=False, seed=0, cache_max_mb=0)
    right = {"teacher": 0, "student": 0}
    seen, kept = 0, []
    for images, labels in dataset:
        adapted = adapt_images(images, teacher.input_size, teacher.channels)
        labels = tf.reshape(tf.cast(labels, tf.int64), [-1])
        for name, probabilities in (("teacher", teacher.predict(adapted)),
                                    ("student", student(images, training=False))):
            predicted = tf.argmax(probabilities, axis=-1, output_type=tf.int64)
            right[name] += int(tf.reduce_sum(tf.cast(predicted == labels, tf.int32)))
        seen += int(labels.shape[0])
        if sum(len(batch) for batch in kept) < _LATENCY_IMAGES:
            kept.append(adapted.numpy()[:_LATENCY_IMAGES])
    images = np.concatenate(kept) if kept else np.zeros((0,), np.float32)
    return right["teacher"] / max(1, seen), right["student"] / max(1, seen), seen, images

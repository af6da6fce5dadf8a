"""`trainer.distill` around the pipeline: the student's own names, the champion resolved to
its folder, and the teacher checked before the Ingest.

- Names (`name_the_student` in pipelines/sections.py, applied by `load_config`): a
  distilled run is published under its own model name so that the teacher keeps serving.
  When `trainer.distill.teacher_model_name` is empty or equals `pusher.model_name`, the
  run's `pusher.model_name` and `pipeline.name` get `-student` (digits -> digits-student,
  mptfx-digits -> mptfx-digits-student): the student has its own serving folder, MLflow
  registered model, TF Lite folder and pipeline, so its Evaluator's baseline is its own
  latest blessed model, never the teacher.
- `champion` is the version the teacher's serving folder labels `stable` (which is what the
  MLflow registry aliases `champion`); without a serving folder, the MLflow registry's
  champion alias names it.
- `check_teacher` runs before the Ingest: a missing teacher, one with other classes than the
  data, or a student that would share the teacher's pipeline stops the run with one line
  (UsageError, exit 2).

    path, origin = resolve_teacher(config, workspace)
"""

from __future__ import annotations

import os
from typing import Any, TextIO

from components.errors import UsageError
from pipelines.config import Config

_KEY = "trainer.distill.teacher"


def teacher_model_name(config: Config) -> str:
    """Whose champion teaches: `trainer.distill.teacher_model_name`, else the run's own."""
    return config.trainer.distill.teacher_model_name or config.pusher.model_name


def resolve_teacher(config: Config, workspace: Any) -> tuple[str, str]:
    """(the teacher's path, where it came from) for `trainer.distill.teacher`.

    Raises:
        UsageError: `champion` of a model that has none.
    """
    from components.trainer.config import CHAMPION

    teacher = config.trainer.distill.teacher
    if teacher != CHAMPION:
        return teacher, "trainer.distill.teacher"
    name = teacher_model_name(config)
    model_dir = workspace.serving_dir(name, config.pusher.serving_dir)
    stable = _stable_version(model_dir)
    if stable is not None:
        return stable, f"the champion of {name}: its stable TF Serving version"
    registered = _registry_champion(config, workspace, name)
    if registered is not None:
        return registered, f"the champion of {name}: its MLflow alias"
    raise UsageError(f"{_KEY}: champion: {name} has no champion (no stable version in "
                     f"{model_dir}, no MLflow alias champion); run the teacher's pipeline first "
                     "or give the teacher's path")


def _stable_version(model_dir: str) -> str | None:
    from components.serving.models_config import models_config_path, read_labels

    serving_dir, name = os.path.split(model_dir.rstrip("/"))
    if "://" in model_dir:
        return None
    stable = read_labels(models_config_path(serving_dir), name).stable
    folder = os.path.join(model_dir, str(stable))
    return folder if stable is not None and os.path.isdir(folder) else None


def _registry_champion(config: Config, workspace: Any, name: str) -> str | None:
    """The champion's folder by its MLflow alias: the served version it was pushed as,
    else the Trainer's Model artifact it was made from."""
    from components.tracking import store as store_lib
    from components.tracking.registry import CHAMPION, MODEL_URI_TAG, current_aliases

    store = store_lib.resolve_store(config.tracking, config.pipeline.name, name,
                                    workspace.root)
    local = store.uri.removeprefix("sqlite:///") if store.uri.startswith("sqlite:///") else ""
    if store.is_fallback or (local and not os.path.exists(local)):
        return None  # no store to ask (and none is created by asking)
    client = store_lib.mlflow_client(store.uri)
    version = current_aliases(client, name).get(CHAMPION)
    if version is None:
        return None
    tags = client.get_model_version(name, version).tags or {}
    for folder in (tags.get("serving_path"), tags.get(MODEL_URI_TAG)):
        if folder and os.path.isdir(folder):
            return folder
    return None


def check_teacher(config: Config, workspace: Any, data: Any, out: TextIO) -> None:
    """Before the Ingest: the teacher exists and predicts the data's classes, and the
    student has names of its own; prints where the teacher came from.

    Raises:
        UsageError: one line naming trainer.distill.teacher and what is wrong.
    """
    settings = config.trainer.distill
    if not settings.enabled:
        return
    from components.trainer.teacher import TeacherError, check_classes, read_teacher

    if data.kind == "volumes":
        raise UsageError(f"{_KEY}: distillation needs a classifier; {data.root} holds volumes "
                         "(a segmentation model)")
    if teacher_model_name(config) == config.pusher.model_name:
        raise UsageError(f"{_KEY}: the student would be published as "
                         f"{config.pusher.model_name}, the teacher's name: set "
                         "pusher.model_name and pipeline.name of their own")
    path, origin = resolve_teacher(config, workspace)
    try:
        source = read_teacher(path)
        labels = _data_classes(data)
        if labels is not None:
            check_classes(source, labels)
    except TeacherError as error:
        raise UsageError(str(error)) from None
    own_root = str(workspace.pipeline_root(config.pipeline.name))
    if str(source.description.get("keras_weights", "")).startswith(own_root + os.sep):
        raise UsageError(f"{_KEY} {path} was trained in pipeline {config.pipeline.name}, the "
                         "student's: give the student a pipeline.name of its own (its "
                         "Evaluator compares it with its pipeline's latest blessed model)")
    print(f"mptfx: distilling from {path} ({origin}; {source.model_name}, "
          f"{len(source.label_names)} classes) into {config.pusher.model_name}", file=out)


def _data_classes(data: Any) -> list[str] | None:
    """The class folders the Ingest will label, in its order (None: TFRecords, whose
    classes the Trainer checks once they are read)."""
    if data.kind != "images":
        return None
    return list(data.listing.label_names)  # the run's one listing (components/ingest)

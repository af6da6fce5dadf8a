"""A user's own model file: staged with its content hash, imported, registered.

`model.module_file` names a Python file (a local path, `gs://` or `s3://`) defining
`build_model(input_shape, num_classes, **params)` (or the function `model.builder` names)
that returns an uncompiled `keras.Model`, like the registry's builders. The file is copied
into the pipeline root under its sha256 (`<root>/user_models/<sha256[:16]>/<file name>`),
so every runner (local, each Kubernetes pod, KFP) imports that same copy, and the path and
hash in the Trainer's `custom_config` change exactly when the file does (TFX then reruns
the Trainer instead of reusing a cached one).

Example:

    staged = stage_module_file("my_model.py", "/ws/pipelines/mptfx-digits")
    name = register_user_model(staged.path, "build_model", "classification", staged.sha256)
    build_model(name, (16, 16, 1), 10)  # models.registry, like any other model
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import tensorflow as tf

from components.core.text import one_line
from models.registry import TASKS, known_builder, register_model

STAGED_DIR = "user_models"
_HASH_PREFIX = 16  # hex digits of the sha256 in folder, module and model names
_REGISTERED_PREFIX = "user:"


class UserModelError(ValueError):
    """A user's model file cannot be used; the message names the file and what to do."""


@dataclasses.dataclass(frozen=True)
class StagedModule:
    """A model file copied into the pipeline root.

    Attributes:
        source: the path the config named.
        path: the staged copy every runner imports.
        sha256: hex digest of the file's bytes.
    """

    source: str
    path: str
    sha256: str

    @property
    def file_name(self) -> str:
        """The file's base name, e.g. `my_model.py` (an MLflow param)."""
        return os.path.basename(self.source)


def file_sha256(path: str) -> str:
    """sha256 hex digest of the file at `path` (local, gs:// or s3://).

    Raises:
        UserModelError: the file does not exist or cannot be read.
    """
    try:
        with tf.io.gfile.GFile(path, "rb") as source:
            return hashlib.sha256(source.read()).hexdigest()
    except (tf.errors.OpError, OSError) as error:
        raise UserModelError(
            f"model.module_file {path}: cannot read it ({one_line(error) or 'not found'})"
        ) from None


def stage_module_file(source: str, pipeline_root: str) -> StagedModule:
    """Copies `source` to `<pipeline_root>/user_models/<sha256[:16]>/<name>` (kept when there).

    Raises:
        UserModelError: `source` cannot be read or is not a `.py` file.
    """
    if not source.endswith(".py"):
        raise UserModelError(f"model.module_file {source}: must be a Python file ending in .py")
    digest = file_sha256(source)
    folder = f"{pipeline_root.rstrip('/')}/{STAGED_DIR}/{digest[:_HASH_PREFIX]}"
    staged = f"{folder}/{os.path.basename(source)}"
    try:
        if not tf.io.gfile.exists(staged):
            tf.io.gfile.makedirs(folder)
            # Copy to a temporary name and rename, so a pod never imports a half-written file.
            partial = f"{staged}.partial"
            tf.io.gfile.copy(source, partial, overwrite=True)
            tf.io.gfile.rename(partial, staged, overwrite=True)
    except (tf.errors.OpError, OSError) as error:
        raise UserModelError(
            f"model.module_file {source}: cannot stage it into {folder} "
            f"({one_line(error)}); the pipeline root must be "
            "writable where the pipeline is built"
        ) from None
    return StagedModule(source, staged, digest)


def load_module(path: str, sha256: str | None = None) -> ModuleType:
    """Imports the model file at `path` once per content hash and returns the module.

    A remote file is copied to a local temporary folder first (importlib reads local files).

    Raises:
        UserModelError: unreadable file, a hash other than `sha256` (the staged copy changed),
            or any exception while importing (the line names it; the traceback is chained).
    """
    digest = file_sha256(path)
    if sha256 and digest != sha256:
        raise UserModelError(
            f"model.module_file {path}: its sha256 is {digest[:_HASH_PREFIX]}, not the staged "
            f"{sha256[:_HASH_PREFIX]}; the file changed after staging. Fix: run the pipeline again"
        )
    module_name = f"mptfx_user_model_{digest[:_HASH_PREFIX]}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    local_path = _local_copy(path, digest)
    spec = importlib.util.spec_from_file_location(module_name, local_path)
    if spec is None or spec.loader is None:
        raise UserModelError(f"model.module_file {path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # before exec, as importlib does (dataclasses need it)
    try:
        spec.loader.exec_module(module)
    except BaseException as error:
        del sys.modules[module_name]
        if isinstance(error, KeyboardInterrupt):
            raise
        raise UserModelError(
            f"model.module_file {path} does not import: {type(error).__name__}: "
            f"{one_line(error)}"
        ) from error
    return module


def load_builder(path: str, builder: str = "build_model", sha256: str | None = None) -> Callable:
    """Imports the file and returns its builder function.

    Raises:
        UserModelError: as `load_module`, or when the file has no callable named `builder`.
    """
    module = load_module(path, sha256)
    function = getattr(module, builder, None)
    if not callable(function):
        found = "is not a function" if function is not None else "is missing"
        raise UserModelError(
            f"model.module_file {path}: {builder!r} (model.builder) {found}. Fix: define "
            f"def {builder}(input_shape, num_classes, **params) returning a keras.Model"
        )
    return function


def register_user_model(
    path: str, builder: str, task: str, sha256: str | None = None
) -> str:
    """Imports the file, registers its builder in the model registry; returns the name.

    The name (`user:<file name>@<sha256[:16]>`) changes with the file's content, so two
    versions of one file never share a registry entry.

    Raises:
        UserModelError: as `load_builder`, or an unknown task.
    """
    if task not in TASKS:
        raise UserModelError(f"model.task must be one of {list(TASKS)}. Received: {task!r}")
    function = load_builder(path, builder, sha256)
    digest = sha256 or file_sha256(path)
    name = f"{_REGISTERED_PREFIX}{os.path.basename(path)}:{builder}@{digest[:_HASH_PREFIX]}"
    if known_builder(name) is not function:
        register_model(name, task)(function)
    return name


def resolve_model_name(model_config: Mapping[str, Any]) -> str:
    """The registry name to build: the registered module file's, else `model_config["name"]`.

    `model_config` is the Trainer's `custom_config["model"]`: with `module_file` (the staged
    copy), `module_sha256`, `builder` and `task`.
    """
    module_file = model_config.get("module_file")
    if not module_file:
        return str(model_config["name"])
    return register_user_model(
        str(module_file),
        str(model_config.get("builder") or "build_model"),
        str(model_config.get("task") or TASKS[0]),
        model_config.get("module_sha256") or None,
    )


def is_user_model(name: str) -> bool:
    """Whether a registry name came from `register_user_model`."""
    return name.startswith(_REGISTERED_PREFIX)


def _local_copy(path: str, digest: str) -> str:
    if "://" not in path:
        return path
    import tempfile

    folder = os.path.join(tempfile.gettempdir(), f"mptfx-user-model-{digest[:_HASH_PREFIX]}")
    os.makedirs(folder, exist_ok=True)
    local = os.path.join(folder, os.path.basename(path))
    tf.io.gfile.copy(path, local, overwrite=True)
    return local

"""The one typed configuration object, composed and read: YAML file + dotted `--set
key=value` overrides.

`Config` composes the sections each package owns (components/<pkg>/config.py) and the
runner's own (pipelines/sections.py); every one refuses unknown keys and coerces nothing
(components/core/sections.py). The defaults are the embedded local setup; `configs/local.yaml`
spells out the same values for people to copy. This module reads a file and the overrides into
a `Config`, and turns pydantic's errors into a one-line `ConfigError` that names the key and
the `--set` it came from (exit code 2).

    config = load_config("configs/local.yaml", overrides=["trainer.epochs=3"])
    config.trainer.epochs  # 3
    Config().pusher.model_name  # "digits"
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, PrivateAttr, ValidationError

from components.core.sections import StrictSection, describe_validation_error, key_path
from components.core.text import one_line
from components.infra.config import InfraSection
from components.ingest.config import BUILTIN_DIGITS
from components.monitor.config import MonitorSection
from components.pusher.config import PusherSection
from components.tflite.config import TFLiteSection
from components.tracking.config import TrackingSection
from components.trainer.config import ExportSection, ModelSection, TrainerConfig, TrainerSection
from components.validation.config import EvaluatorSection
from pipelines.sections import (
    BUILTIN_NAMES,
    DataSection,
    KubernetesSection,
    PipelineSection,
    ServingSection,
    name_the_student,
    names_for_data,
)

DEFAULT_CONFIG_PATH = Path("configs/local.yaml")


class Config(StrictSection):
    """The whole pipeline configuration; see `configs/local.yaml` for every key."""

    pipeline: PipelineSection = Field(default_factory=PipelineSection)
    data: DataSection = Field(default_factory=DataSection)
    model: ModelSection = Field(default_factory=ModelSection)
    trainer: TrainerSection = Field(default_factory=TrainerSection)
    evaluator: EvaluatorSection = Field(default_factory=EvaluatorSection)
    infra: InfraSection = Field(default_factory=InfraSection)
    pusher: PusherSection = Field(default_factory=PusherSection)
    export: ExportSection = Field(default_factory=ExportSection)
    tflite: TFLiteSection = Field(default_factory=TFLiteSection)
    tracking: TrackingSection = Field(default_factory=TrackingSection)
    serving: ServingSection = Field(default_factory=ServingSection)
    monitor: MonitorSection = Field(default_factory=MonitorSection)
    kubernetes: KubernetesSection = Field(default_factory=KubernetesSection)
    # The data pipeline.name and pusher.model_name were named after, when the config file
    # and --set gave neither (load_config below); None when they were given.
    _named_after: str | None = PrivateAttr(default=None)

    @property
    def named_after(self) -> str | None:
        """The data source the pipeline and model were named after, or None."""
        return self._named_after

    def name_after(self, source: str) -> None:
        """Record that the names came from `source` (load_config does it)."""
        self._named_after = source

    @property
    def run_names(self) -> tuple[str, str]:
        """(pipeline.name, pusher.model_name): the MLflow experiment's and the model's."""
        return self.pipeline.name, self.pusher.model_name

    def trainer_custom_config(self) -> dict[str, Any]:
        """The JSON-able dict the Trainer's run_fn receives as `custom_config`: each section
        of `TrainerConfig` with the keys that section declares (of `data`, the Trainer's)."""
        return {
            name: getattr(self, name).model_dump(include=set(field.annotation.model_fields))
            for name, field in TrainerConfig.model_fields.items()
        }


class ConfigError(ValueError):
    """A configuration problem the user can fix: unknown key, bad value, unreadable file."""


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split `a.b.c=value` into its key path and a YAML-typed value (`3` → int, `[1,2]` → list)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set expects KEY=VALUE, e.g. trainer.epochs=3. Received: {text!r}")
    if not raw.strip():
        # `--set data.source=$DIR` with DIR unset: an error, never the default. An empty
        # string on purpose is written as such: --set tracking.uri=""
        raise ConfigError(f"--set {text} has no value; give one (an empty string "
                          f"is written \"\"), or leave the --set out for the default")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def _apply_override(tree: dict[str, Any], path: list[str], value: Any) -> None:
    node = tree
    for part in path[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"config key {'.'.join(path)}: {part!r} is not a section")
        node = child
    node[path[-1]] = value


def load_config(path: str | os.PathLike | None = None, overrides: list[str] = (),
                data: str | None = None) -> Config:
    """Read YAML (default `configs/local.yaml` when it exists) and apply `--set` overrides.

    When neither names `pipeline.name` or `pusher.model_name` (absent or null), they are
    named after the data: `data` (the `--data` of a command), else `data.source`
    (`names_for_data`; `config.named_after` records it). A distilled run's names get
    `-student` (pipelines/sections.py `name_the_student`).

    Raises ConfigError with a one-line message naming the file or key.
    """
    if path is not None and not str(path).strip():
        raise ConfigError("--config is empty: give a config file, or leave --config out to "
                          f"use {DEFAULT_CONFIG_PATH} (when present) and the defaults")
    tree: dict[str, Any] = {}
    source = Path(path) if path else (DEFAULT_CONFIG_PATH if DEFAULT_CONFIG_PATH.exists() else None)
    if source is not None:
        try:
            loaded = yaml.safe_load(source.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {source}") from None
        except UnicodeDecodeError as error:
            raise ConfigError(f"cannot read config file {source}: not UTF-8 text (byte "
                              f"{error.object[error.start]:#04x} at offset {error.start})") \
                from None
        except (OSError, yaml.YAMLError) as error:
            raise ConfigError(f"cannot read config file {source}: {one_line(error)}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {source} must hold a mapping of sections")
        tree = loaded or {}
    for text in overrides:
        _apply_override(tree, *parse_override(text))
    named_after = _name_after_data(tree, data)
    name_the_student(tree)  # trainer.distill: the student is published under its own name
    try:
        config = Config.model_validate(tree)
    except ValidationError as error:
        raise ConfigError(
            describe_validation_error(error) + _where(error, source, overrides)
        ) from None
    if named_after:
        config.name_after(named_after)
    return config


def _name_after_data(tree: dict[str, Any], data: str | None) -> str | None:
    """Fill in the pipeline's and the model's names the config leaves out (absent or null)
    from the data's; returns the data they were named after, or None."""
    sections = [tree.get(name, {}) for name in ("pipeline", "pusher")]
    if not all(isinstance(section, dict) for section in sections):
        return None  # validation names the section that is not a mapping
    pipeline, pusher = sections
    if pipeline.get("name") is not None and pusher.get("model_name") is not None:
        return None
    data_section = tree.get("data") if isinstance(tree.get("data"), dict) else {}
    source = data or data_section.get("source") or BUILTIN_DIGITS
    names = names_for_data(str(source))
    if names is None:
        raise ConfigError(f"cannot name the pipeline after the data folder {source}: set "
                          "pipeline.name and pusher.model_name")
    if pipeline.get("name") is None:
        tree["pipeline"] = {**pipeline, "name": names[0]}
    if pusher.get("model_name") is None:
        tree["pusher"] = {**pusher, "model_name": names[1]}
    return None if source in BUILTIN_NAMES else str(source)


def _where(error: ValidationError, source: Path | None, overrides: list[str]) -> str:
    """Point at the --set that set the failing key, else at the file."""
    failing = key_path(error.errors()[0]["loc"])
    for text in reversed(overrides):
        path = parse_override(text)[0]
        shared = min(len(path), len(failing))
        if path[:shared] == failing[:shared]:
            return f" (from --set {text})"
    return f" in {source}" if source else ""

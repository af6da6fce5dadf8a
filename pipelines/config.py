"""The one typed configuration object, read: YAML file + dotted `--set key=value` overrides.

The sections themselves are components/core/config.py (`Config`); this module reads a file
and the overrides into one, and turns pydantic's errors into a one-line `ConfigError` that
names the key and the `--set` it came from (exit code 2).

    config = load_config("configs/local.yaml", overrides=["trainer.epochs=3"])
    config.trainer.epochs  # 3
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from components.core.config import BUILTIN_DIGITS, BUILTIN_NAMES, Config, names_for_data
from components.core.text import one_line
from components.trainer.config import describe_validation_error, key_path
from pipelines.distill import name_the_student

DEFAULT_CONFIG_PATH = Path("configs/local.yaml")


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
    `-student` (pipelines/distill.py `name_the_student`).

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

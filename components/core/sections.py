"""The base of every configuration section, and its errors in one line.

Each package owns the section it reads (components/<pkg>/config.py); pipelines/config.py
composes them into the one `Config`. They all derive from `StrictSection`, which refuses
unknown keys and coerces nothing, so `trainer.epoch=3` fails naming the key instead of being
silently ignored. A leaf: it imports pydantic only.

    class PusherSection(StrictSection):
        keep_versions: int = 5
    PusherSection(keep_version=3)   # ValidationError: extra_forbidden
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError

# What pipeline.name and pusher.model_name must match: an MLflow experiment, a TF Serving
# model name and a Kubernetes label value alike (63 characters at most).
NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$"


class StrictSection(BaseModel):
    """A config section that refuses unknown keys and coerces nothing."""

    # strict=True: YAML `true` is not the int 1, nor "3" the int 3 (a float field still
    # takes an int, as JSON Schema's number does).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)


def key_path(loc: tuple) -> list[str]:
    """The config key of a pydantic error location, without union member tags."""
    # A union (e.g. trainer.batch_size: int >= 1 | "auto") adds the member's tag to the
    # location ('constrained-int', "literal['auto']"); config keys never contain - or [.
    return [str(part) for part in loc if not set(str(part)) & set("-[")]


def describe_validation_error(error: ValidationError) -> str:
    """The first error in one line: the dotted key, what was wrong and the value received."""
    first = error.errors()[0]
    key = ".".join(key_path(first["loc"]))
    if first["type"] == "extra_forbidden":
        return f"unknown config key {key!r}"
    received = first.get("input")
    return f"bad value for config key {key!r}: {first['msg']} (received {received!r})"

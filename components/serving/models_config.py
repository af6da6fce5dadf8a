"""`<serving_dir>/models.config`: what TF Serving serves, in its own ModelServerConfig text.

One entry per model: `base_path`, a `specific` version policy listing exactly the labelled
versions, and `version_labels`:

- `stable`: what clients of `/v1/models/<name>` (and `/labels/stable`) get;
- `canary`: the version under trial, while one exists;
- `previous`: the stable before the last change, kept loaded so `mptfx serve rollback` is
  instant and never waits for a reload (and so pruning cannot delete it).

TF Serving re-reads the file every `--model_config_file_poll_wait_seconds`; it must never
see it half-written, so it is written to a temporary file beside it and renamed.

    labels = read_labels(path, "digits")               # ServingLabels(stable=3, canary=4)
    write_labels(path, "digits", base_path, labels.with_canary(5))
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

MODELS_CONFIG_FILE = "models.config"
STABLE, CANARY, PREVIOUS = "stable", "canary", "previous"
LABEL_NAMES = (STABLE, CANARY, PREVIOUS)


class ModelsConfigError(ValueError):
    """models.config cannot be parsed or does not describe what mptfx wrote."""


@dataclass(frozen=True)
class ServingLabels:
    """The version each label points at (None = label absent) for one model."""

    stable: int | None = None
    canary: int | None = None
    previous: int | None = None

    def as_dict(self) -> dict[str, int]:
        """label → version, only the labels that exist."""
        return {name: getattr(self, name) for name in LABEL_NAMES
                if getattr(self, name) is not None}

    @property
    def versions(self) -> list[int]:
        """Every labelled version, oldest first: what the `specific` policy loads."""
        return sorted(set(self.as_dict().values()))

    def with_stable(self, version: int) -> ServingLabels:
        """`version` becomes stable; the old stable becomes previous (unless unchanged)."""
        if version == self.stable:
            return self
        canary = None if self.canary == version else self.canary
        return ServingLabels(stable=version, canary=canary,
                             previous=self.stable if self.stable is not None else self.previous)

    def with_canary(self, version: int) -> ServingLabels:
        """`version` is put on trial beside the stable."""
        return dataclasses.replace(self, canary=version)


def models_config_path(serving_dir: str | os.PathLike) -> Path:
    """Where the file lives: `<serving_dir>/models.config`, beside the model folders."""
    return Path(serving_dir) / MODELS_CONFIG_FILE


def _parse(path: Path):
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    config = model_server_config_pb2.ModelServerConfig()
    if not path.exists():
        return config
    try:
        text_format.Parse(path.read_text(), config)
    except text_format.ParseError as error:
        raise ModelsConfigError(f"{path}: not a TF Serving ModelServerConfig: {error}") from None
    return config


def served_model_names(path: str | os.PathLike) -> list[str]:
    """The names of the models the file at `path` serves ([] when absent)."""
    return [entry.name for entry in _parse(Path(path)).model_config_list.config]


def read_labels(path: str | os.PathLike, model_name: str) -> ServingLabels:
    """The labels of `model_name` in the file at `path` (all None when absent)."""
    config = _parse(Path(path))
    for entry in config.model_config_list.config:
        if entry.name == model_name:
            labels = dict(entry.version_labels)
            return ServingLabels(**{name: labels[name] for name in LABEL_NAMES if name in labels})
    return ServingLabels()


def render(model_name: str, base_path: str, labels: ServingLabels, config=None) -> str:
    """The text of a ModelServerConfig where `model_name` serves exactly `labels`; other
    models' entries in `config` are kept as they are."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    config = config or model_server_config_pb2.ModelServerConfig()
    entries = config.model_config_list.config
    entry = next((e for e in entries if e.name == model_name), None) or entries.add()
    entry.Clear()
    entry.name = model_name
    entry.base_path = base_path
    entry.model_platform = "tensorflow"
    if labels.versions:
        entry.model_version_policy.specific.versions.extend(labels.versions)
    else:  # nothing labelled yet: serve the newest, as TF Serving does by default
        entry.model_version_policy.latest.num_versions = 1
    for name, version in labels.as_dict().items():
        entry.version_labels[name] = version
    return text_format.MessageToString(config)


def write_labels(path: str | os.PathLike, model_name: str, base_path: str,
                 labels: ServingLabels) -> None:
    """Rewrite the entry of `model_name` atomically (temp file + fsync + rename)."""
    path = Path(path)
    text = render(model_name, base_path, labels, _parse(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide it from the server's user
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise

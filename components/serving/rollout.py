"""One served model's folder and labels: what the Pusher records after a push, and what
pruning must keep.

`models.config` is what TF Serving serves, so it holds the labels (stable, canary,
previous). The verbs that move them together with the MLflow aliases (`mptfx serve canary`,
promote, rollback, pin, status) are pipelines/rollout_verbs.py.

    target = ServingTarget(Path("workspace/serving"), "digits")
    target.labels().stable      # the version TF Serving serves as stable
    record_push("workspace/serving", "digits", 4, "canary")
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from components.serving.models_config import (
    ServingLabels,
    models_config_path,
    read_labels,
    write_labels,
)

_SAVED_MODEL_FILE = "saved_model.pb"


@dataclass(frozen=True)
class ServingTarget:
    """One model under `<serving_dir>`: versions in `<serving_dir>/<model_name>/<N>/`."""

    serving_dir: Path
    model_name: str

    @property
    def base_path(self) -> str:
        """TF Serving's `base_path` for the model."""
        return str(self.serving_dir / self.model_name)

    @property
    def config_path(self) -> Path:
        """The models.config TF Serving reads."""
        return models_config_path(self.serving_dir)

    def pushed_versions(self) -> list[int]:
        """Complete version folders on disk (saved_model.pb present), oldest first."""
        base = Path(self.base_path)
        if not base.is_dir():
            return []
        return sorted(int(p.name) for p in base.iterdir()
                      if p.name.isdigit() and (p / _SAVED_MODEL_FILE).exists())

    def labels(self) -> ServingLabels:
        """What models.config serves now."""
        return read_labels(self.config_path, self.model_name)


def labels_after_push(current: ServingLabels, version: int, rollout: str) -> ServingLabels:
    """The Pusher's policy: `direct` makes `version` stable, `canary` puts it on trial (a
    first push becomes stable either way: a canary needs a stable beside it)."""
    if rollout == "canary" and current.stable is not None and current.stable != version:
        return current.with_canary(version)
    return current.with_stable(version)


def record_push(serving_dir: str, model_name: str, version: int, rollout: str) -> ServingLabels:
    """Called by the Pusher after publishing `version`: label it in models.config."""
    target = ServingTarget(Path(serving_dir), model_name)
    labels = labels_after_push(target.labels(), version, rollout)
    write_labels(target.config_path, model_name, target.base_path, labels)
    return labels


def protected_versions(serving_dir: str, model_name: str) -> set[int]:
    """Versions pruning must keep: every labelled one (stable, canary, previous)."""
    return set(ServingTarget(Path(serving_dir), model_name).labels().versions)

"""Rollout verbs over `models.config` and the MLflow aliases, and the check that repairs them.

Each verb computes the new labels, refuses (RolloutRefused, nothing written) a version that
is unknown, not pushed or never blessed, then takes one step: write `models.config`
atomically, then move the aliases (`champion` = stable, `challenger` = canary). models.config
is what TF Serving serves, so it is the truth: when the process dies between the two writes,
`check_and_repair` (run by every `mptfx serve status`) moves the aliases after it. The verbs
join the serving folder (components/serving/rollout.py) and the MLflow registry
(components/tracking/), so they live here, above both.

    target = ServingTarget(Path("workspace/serving"), "digits")
    registry = RegistryView.open(open_reader(uri), "digits", connect=lambda: mlflow_client(uri))
    apply(target, registry, canary(target, registry, 4))
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from components.serving.models_config import ServingLabels, write_labels
from components.serving.rollout import ServingTarget
from components.tracking.reader import StoreReader, VersionRecord
from components.tracking.registry import (
    CHALLENGER,
    CHAMPION,
    point_alias,
    serving_version_of,
)

# Test and drill hook: `MPTFX_SERVE_FAULT=after_models_config` kills the process with SIGKILL
# right after models.config is written and before any alias moves (see README).
FAULT_ENV = "MPTFX_SERVE_FAULT"
FAULT_AFTER_MODELS_CONFIG = "after_models_config"

class RolloutRefused(ValueError):
    """The verb cannot apply to this version; nothing was changed."""


@dataclass
class RegistryView:
    """The registered versions and aliases of one model. Reads go through `reader` (a
    workspace's sqlite store is read without importing MLflow); `connect()` opens MLflow's
    client, once, for what writes (moving an alias, recording a rollout). `reader` None =
    no MLflow record."""

    reader: StoreReader | None
    model_name: str
    versions: list[VersionRecord] = field(default_factory=list)
    connect: Callable[[], Any] | None = None
    _client: Any = field(default=None, repr=False)

    @classmethod
    def open(cls, reader: StoreReader | None, model_name: str,
             connect: Callable[[], Any] | None = None) -> RegistryView:
        """Read the registered versions of `model_name` once."""
        versions = reader.model_versions(model_name) if reader is not None else []
        return cls(reader, model_name, versions, connect)

    @property
    def client(self) -> Any | None:
        """MLflow's client for the writes (imports MLflow the first time); None when there
        is no MLflow record."""
        if self._client is None and self.reader is not None and self.connect is not None:
            self._client = self.connect()
        return self._client

    def pushed_as(self, serving_version: int) -> VersionRecord | None:
        """The newest registered version that was pushed as TF Serving `serving_version`."""
        matching = [v for v in self.versions if serving_version_of(v) == serving_version]
        return matching[-1] if matching else None

    def number(self, registered: int) -> VersionRecord | None:
        """Registered version number `registered`, if it exists."""
        return next((v for v in self.versions if int(v.version) == registered), None)

    def aliases(self) -> dict[str, str]:
        """alias → registered version number, as MLflow holds them now."""
        return self.reader.model_aliases(self.model_name) if self.reader is not None else {}


def require_servable(target: ServingTarget, registry: RegistryView, version: int) -> None:
    """Refuse a version that is not on disk, or that MLflow never recorded as blessed."""
    pushed = target.pushed_versions()
    if version not in pushed:
        registered = registry.number(version)
        if registered is not None and serving_version_of(registered) is None:
            blessed = (registered.tags or {}).get("blessed") == "true"
            raise RolloutRefused(
                f"version {version} is not pushed: registered {target.model_name} v{version} "
                f"({'blessed' if blessed else 'never blessed'}) has no folder in "
                f"{target.base_path}; pushed versions: {pushed or 'none'}")
        raise RolloutRefused(f"unknown version {version}: no {target.base_path}/{version}; "
                             f"pushed versions: {pushed or 'none'}")
    if registry.versions:
        record = registry.pushed_as(version)
        if record is None or (record.tags or {}).get("blessed") != "true":
            raise RolloutRefused(
                f"version {version} in {target.base_path} was never blessed: no registered "
                f"version of {target.model_name} in MLflow records a blessed push of it")


def canary(target: ServingTarget, registry: RegistryView, version: int) -> ServingLabels:
    """`version` becomes the canary beside the stable."""
    labels = target.labels()
    require_servable(target, registry, version)
    if labels.stable is None:
        raise RolloutRefused(f"no stable version in {target.config_path}: a canary needs one; "
                             f"use `mptfx serve pin {version}`")
    if version == labels.stable:
        raise RolloutRefused(f"version {version} is already stable")
    return labels.with_canary(version)


def promote(target: ServingTarget, registry: RegistryView) -> ServingLabels:
    """The canary becomes stable; the canary label goes; the old stable becomes previous."""
    labels = target.labels()
    if labels.canary is None:
        raise RolloutRefused(f"no canary in {target.config_path}: nothing to promote")
    require_servable(target, registry, labels.canary)
    return labels.with_stable(labels.canary)


def rollback(target: ServingTarget, registry: RegistryView, to: int | None = None) -> ServingLabels:
    """Back to the previous stable (or to version `to`); a canary on that version goes."""
    labels = target.labels()
    version = to if to is not None else labels.previous
    if version is None:
        raise RolloutRefused(f"no previous stable in {target.config_path}; "
                             f"name one with --to VERSION")
    require_servable(target, registry, version)
    if version == labels.stable:
        raise RolloutRefused(f"version {version} is already stable")
    return labels.with_stable(version)


def pin(target: ServingTarget, registry: RegistryView, version: int) -> ServingLabels:
    """Serve only `version` as stable: any canary is dropped."""
    labels = target.labels()
    require_servable(target, registry, version)
    previous = labels.stable if labels.stable not in (None, version) else labels.previous
    return ServingLabels(stable=version, previous=None if previous == version else previous)


def expected_aliases(registry: RegistryView, labels: ServingLabels) -> dict[str, str | None]:
    """What the aliases must be for `labels`: champion = stable, challenger = canary.

    Without a canary the challenger is only taken away from a pushed version (a finished
    canary); a challenger on an unblessed, unpushed model is the Evaluator's and stays.
    """
    wanted: dict[str, str | None] = {}
    stable = registry.pushed_as(labels.stable) if labels.stable is not None else None
    if stable is not None:
        wanted[CHAMPION] = str(stable.version)
    if labels.canary is not None:
        record = registry.pushed_as(labels.canary)
        if record is not None:
            wanted[CHALLENGER] = str(record.version)
    else:
        current = registry.aliases().get(CHALLENGER)
        held = registry.number(int(current)) if current else None
        if held is not None and serving_version_of(held) is not None:
            wanted[CHALLENGER] = None
    return wanted


def sync_aliases(registry: RegistryView, labels: ServingLabels) -> list[str]:
    """Move the aliases to match `labels`; returns one line per alias moved."""
    if registry.reader is None or not registry.versions:
        return []
    current = registry.aliases()
    moved = []
    for alias, version in expected_aliases(registry, labels).items():
        if current.get(alias) == version:
            continue
        point_alias(registry.client, registry.model_name, alias, version)
        before = f"v{current[alias]}" if alias in current else "none"
        moved.append(f"{alias}: {before} -> {'v' + version if version else 'none'}")
    return moved


def apply(target: ServingTarget, registry: RegistryView, labels: ServingLabels) -> list[str]:
    """Write models.config, then move the aliases; returns the alias moves."""
    write_labels(target.config_path, target.model_name, target.base_path, labels)
    if os.environ.get(FAULT_ENV) == FAULT_AFTER_MODELS_CONFIG:
        os.kill(os.getpid(), signal.SIGKILL)
    return sync_aliases(registry, labels)


def check_and_repair(target: ServingTarget, registry: RegistryView,
                     repair: bool = True) -> dict[str, Any]:
    """The state `mptfx serve status` prints: versions, labels, aliases, what was repaired
    (aliases that disagreed with models.config) and problems it cannot repair."""
    labels = target.labels()
    pushed = target.pushed_versions()
    problems = [f"label {name} points at version {version}, which is not in {target.base_path}"
                for name, version in labels.as_dict().items() if version not in pushed]
    wanted = expected_aliases(registry, labels) if registry.versions else {}
    current = registry.aliases()
    differences = [alias for alias, version in wanted.items() if current.get(alias) != version]
    repaired = sync_aliases(registry, labels) if repair and differences else []
    aliases = registry.aliases()
    by_label: dict[int, list[str]] = {}
    for name, version in labels.as_dict().items():
        by_label.setdefault(version, []).append(name)
    rows = []
    for version in pushed:
        record = registry.pushed_as(version)
        rows.append({
            "version": version,
            "path": f"{target.base_path}/{version}",
            "labels": by_label.get(version, []),
            "registered_version": str(record.version) if record is not None else None,
            "blessed": (record.tags or {}).get("blessed") == "true" if record else None,
            "aliases": sorted(a for a, v in aliases.items()
                              if record is not None and v == str(record.version)),
        })
    return {
        "model": target.model_name,
        "models_config": str(target.config_path),
        "base_path": target.base_path,
        "labels": labels.as_dict(),
        "served_versions": labels.versions,
        "versions": rows,
        "aliases": aliases,
        "out_of_sync": [] if repaired else differences,
        "repaired": repaired,
        "problems": problems,
    }

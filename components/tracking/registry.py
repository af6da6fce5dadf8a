"""The MLflow Model Registry side: one version per trained model, aliases champion/challenger.

- The Pusher published the model → its SavedModel is registered under the model name and
  holds the alias `champion` (TF Serving's `stable` label), or `challenger` when the Pusher
  labelled it `canary` (`pusher.rollout: canary`; `mptfx serve` moves both aliases later).
- The Evaluator did not bless it → it is registered and holds `challenger`.

A model (identified by the Trainer's artifact URI) is registered once: a re-run that reuses
it from TFX's cache points at the existing version instead of adding a copy, and moves an
alias only when the deciding component (Pusher or Evaluator) ran in this run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from components.run_summary import RunSummary
from components.tracking.content import serving_model_dir

CHAMPION = "champion"
CHALLENGER = "challenger"
SERVING_ARTIFACT = "serving_model"
MODEL_URI_TAG = "mptfx.model_uri"
# Run tags that let `mptfx tracking sync` redo the registration on a server.
REGISTERED_MODEL_TAG = "mptfx.registered_model"
REGISTERED_VERSION_TAG = "mptfx.registered_version"
REGISTERED_ALIAS_TAG = "mptfx.registered_alias"


@dataclass(frozen=True)
class Candidate:
    """A model this run may register: which alias it earns, and where its files are."""

    alias: str
    model_dir: str
    model_uri: str
    decided_now: bool


def choose_candidate(summary: RunSummary) -> Candidate | None:
    """champion for a pushed model, challenger for an evaluated, unblessed one, else None."""
    evaluation, pushed = summary.eval, summary.pushed
    model_uri = summary.trainer.model_uri
    folder = serving_model_dir(summary)
    if not model_uri or not folder:
        return None

    def ran(component: str) -> bool:
        record = summary.components.get(component)
        return record is not None and record.status == "completed"

    if pushed.pushed:
        alias = CHALLENGER if pushed.label == "canary" else CHAMPION
        return Candidate(alias, folder, model_uri, ran("Pusher"))
    if evaluation.present() and not evaluation.blessed:
        return Candidate(CHALLENGER, folder, model_uri, ran("Evaluator"))
    return None


def find_version(client: Any, model_name: str, model_uri: str) -> Any | None:
    """The registered version of `model_name` made from the Trainer artifact `model_uri`."""
    from mlflow.exceptions import MlflowException

    try:
        versions = client.search_model_versions(f"name = '{model_name}'")
    except MlflowException:
        return None
    matching = [v for v in versions if (v.tags or {}).get(MODEL_URI_TAG) == model_uri]
    return max(matching, key=lambda v: int(v.version)) if matching else None


def ensure_registered_model(client: Any, model_name: str) -> None:
    """Create the registered model `model_name` unless it exists."""
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(model_name)
    except MlflowException:
        try:
            client.create_registered_model(
                model_name, description="Registered by mptfx: champion = served by TF Serving, "
                "challenger = latest evaluated model that was not blessed.")
        except MlflowException:
            client.get_registered_model(model_name)  # created concurrently; else re-raise


def set_alias(client: Any, model_name: str, alias: str, version: Any) -> None:
    """Point `alias` at `version`; a new champion stops being the challenger."""
    client.set_registered_model_alias(model_name, alias, version.version)
    if alias != CHAMPION:
        return
    # Version objects from searches do not always carry aliases; the registered model does.
    aliases = client.get_registered_model(model_name).aliases or {}
    if str(aliases.get(CHALLENGER)) == str(version.version):
        client.delete_registered_model_alias(model_name, CHALLENGER)


def log_serving_model(client: Any, run_id: str, model_dir: str) -> None:
    """Log `serving_model/`: an MLflow pyfunc model wrapping the SavedModel (so
    `mlflow.pyfunc.load_model("models:/<name>@champion")` predicts), or the SavedModel as
    is when it has no image warm-up request to serve as input example (segmentation)."""
    import tempfile

    from components.serving.pyfunc import save_pyfunc_model

    with tempfile.TemporaryDirectory(prefix="mptfx-pyfunc-") as folder:
        wrapped = os.path.join(folder, SERVING_ARTIFACT)
        if save_pyfunc_model(model_dir, wrapped):
            client.log_artifacts(run_id, wrapped, SERVING_ARTIFACT)
            return
    client.log_artifacts(run_id, model_dir, SERVING_ARTIFACT)


def create_version(
    client: Any, run_id: str, artifact_uri: str, model_name: str, tags: Mapping[str, str]
) -> Any:
    """Register the run's `serving_model/` artifact as a new version of `model_name`."""
    ensure_registered_model(client, model_name)
    return client.create_model_version(
        model_name, source=f"{artifact_uri.rstrip('/')}/{SERVING_ARTIFACT}", run_id=run_id,
        tags=dict(tags),
    )


def register_run_model(
    client: Any, run: Any, summary: RunSummary, model_name: str
) -> dict[str, Any] | None:
    """Register this run's model (logging its SavedModel as `serving_model/`) and set its alias.

    Returns {"name", "version", "alias", "source"} (alias None when left unchanged), or None
    when the run produced nothing to register.
    """
    candidate = choose_candidate(summary)
    if candidate is None:
        return None
    run_id = run.info.run_id
    version = find_version(client, model_name, candidate.model_uri)
    if version is None:
        if not os.path.isdir(candidate.model_dir):
            return None
        log_serving_model(client, run_id, candidate.model_dir)
        evaluation, pushed = summary.eval, summary.pushed
        tags = {
            MODEL_URI_TAG: candidate.model_uri,
            "mptfx.tfx_run_id": str(summary.run_id),
            "precision": str(summary.trainer.precision),
            "eval_accuracy": str(evaluation.accuracy),
            "blessed": str(evaluation.blessed).lower(),
        }
        if pushed.pushed:
            tags.update({"serving_path": str(pushed.path),
                         "serving_version": str(pushed.version)})
        version = create_version(client, run_id, run.info.artifact_uri, model_name, tags)
        moved = True
    else:
        moved = candidate.decided_now
    if moved:
        set_alias(client, model_name, candidate.alias, version)
    client.set_tag(run_id, REGISTERED_MODEL_TAG, model_name)
    client.set_tag(run_id, REGISTERED_VERSION_TAG, str(version.version))
    client.set_tag(run_id, MODEL_URI_TAG, candidate.model_uri)
    if moved:
        client.set_tag(run_id, REGISTERED_ALIAS_TAG, candidate.alias)
    return {"name": model_name, "version": str(version.version),
            "alias": candidate.alias if moved else None, "source": version.source}


def registered_versions(client: Any, model_name: str) -> list[Any]:
    """Every registered version of `model_name`, oldest first ([] when the model is unknown)."""
    from mlflow.exceptions import MlflowException

    try:
        versions = client.search_model_versions(f"name = '{model_name}'")
    except MlflowException:
        return []
    return sorted(versions, key=lambda v: int(v.version))


def serving_version_of(version: Any) -> int | None:
    """The TF Serving version a registered version was pushed as (its `serving_version` tag)."""
    value = (version.tags or {}).get("serving_version", "")
    return int(value) if value.isdigit() else None


def current_aliases(client: Any, model_name: str) -> dict[str, str]:
    """alias → registered version number of `model_name` ({} when the model is unknown)."""
    from mlflow.exceptions import MlflowException

    try:
        aliases = client.get_registered_model(model_name).aliases or {}
    except MlflowException:
        return {}
    return {name: str(version) for name, version in aliases.items()}


def point_alias(client: Any, model_name: str, alias: str, version: str | None) -> None:
    """Move `alias` to registered `version`, or delete it when `version` is None."""
    from mlflow.exceptions import MlflowException

    if version is not None:
        client.set_registered_model_alias(model_name, alias, version)
        return
    try:
        client.delete_registered_model_alias(model_name, alias)
    except MlflowException:  # already absent
        pass

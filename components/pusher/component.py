"""AtomicPusher: TFX's Pusher contract (blessing in, PushedModel out) with atomic versions.

TFX's own filesystem Pusher names versions by Unix time and copies straight into the
version folder; this one publishes the next integer version through a staging folder (see
publish.py), keeps the newest `keep_versions`, and records the same `pushed`,
`pushed_destination` and `pushed_version` properties on the PushedModel artifact, so
anything that reads TFX's Pusher output reads this one.

Rollout (`rollout`): after publishing, the version is labelled in `<serving_dir>/models.config`
(components/serving/): `direct` makes it `stable`, `canary` makes it `canary` beside the
stable. Pruning never deletes a labelled version (stable, canary, previous stable).
"""


import logging
import posixpath

from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import standard_artifacts
from tfx.utils import io_utils, path_utils

from components.core.publish import prune_versions
from components.pusher.publish import publish_version
from components.serving.rollout import protected_versions, record_push


def push_with_rollout(serving_model: str, base_directory: str, keep_versions: int,
                      rollout: str) -> tuple[int, str, str | None]:
    """Publish `serving_model`, label it in models.config by `rollout`, prune around the
    labelled versions; returns (version, version_dir, label), label None on object stores
    (no models.config there: TF Serving then serves the newest version)."""
    serving_dir, model_name = posixpath.split(base_directory.rstrip("/"))
    labelled = "://" not in base_directory
    protected = protected_versions(serving_dir, model_name) if labelled else set()
    version, version_dir = publish_version(serving_model, base_directory, keep_versions,
                                           protected=protected)
    if not labelled:
        return version, version_dir, None
    labels = record_push(serving_dir, model_name, version, rollout)
    # Versions the push just unlabelled (an old previous, a replaced canary) may go now.
    removed = prune_versions(base_directory, keep_versions, labels.versions)
    logging.info("models.config: %s serves %s (rollout %s); removed %s", model_name,
                 labels.as_dict(), rollout, removed)
    return version, version_dir, "canary" if labels.canary == version else "stable"


@component
def AtomicPusher(
    model: InputArtifact[standard_artifacts.Model],
    model_blessing: InputArtifact[standard_artifacts.ModelBlessing],
    pushed_model: OutputArtifact[standard_artifacts.PushedModel],
    base_directory: Parameter[str],
    keep_versions: Parameter[int] = 5,
    rollout: Parameter[str] = "direct",
) -> None:
    """Publish the Trainer's serving model under `base_directory` when it is blessed."""
    if not model_blessing.get_int_custom_property("blessed"):
        logging.info("model not blessed: nothing pushed to %s", base_directory)
        pushed_model.set_int_custom_property("pushed", 0)
        return
    serving_model = path_utils.serving_model_path(model.uri)
    version, version_dir, label = push_with_rollout(serving_model, base_directory,
                                                    keep_versions, rollout)
    # Archive what was pushed with the artifact, as TFX's Pusher does.
    io_utils.copy_dir(serving_model, pushed_model.uri)
    pushed_model.set_int_custom_property("pushed", 1)
    pushed_model.set_string_custom_property("pushed_destination", version_dir)
    pushed_model.set_string_custom_property("pushed_version", str(version))
    pushed_model.set_string_custom_property("rollout", rollout)
    if label:
        pushed_model.set_string_custom_property("serving_label", label)

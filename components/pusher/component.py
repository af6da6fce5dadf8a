"""AtomicPusher: TFX's Pusher contract (blessing in, PushedModel out) with atomic versions.

TFX's own filesystem Pusher names versions by Unix time and copies straight into the
version folder; this one publishes the next integer version through a staging folder (see
publish.py), keeps the newest `keep_versions`, and records the same `pushed`,
`pushed_destination` and `pushed_version` properties on the PushedModel artifact, so
anything that reads TFX's Pusher output reads this one.
"""


import logging

from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import standard_artifacts
from tfx.utils import io_utils, path_utils

from components.pusher.publish import publish_version


@component
def AtomicPusher(
    model: InputArtifact[standard_artifacts.Model],
    model_blessing: InputArtifact[standard_artifacts.ModelBlessing],
    pushed_model: OutputArtifact[standard_artifacts.PushedModel],
    base_directory: Parameter[str],
    keep_versions: Parameter[int] = 5,
) -> None:
    """Publish the Trainer's serving model under `base_directory` when it is blessed."""
    if not model_blessing.get_int_custom_property("blessed"):
        logging.info("model not blessed: nothing pushed to %s", base_directory)
        pushed_model.set_int_custom_property("pushed", 0)
        return
    serving_model = path_utils.serving_model_path(model.uri)
    version, version_dir = publish_version(serving_model, base_directory, keep_versions)
    # Archive what was pushed with the artifact, as TFX's Pusher does.
    io_utils.copy_dir(serving_model, pushed_model.uri)
    pushed_model.set_int_custom_property("pushed", 1)
    pushed_model.set_string_custom_property("pushed_destination", version_dir)
    pushed_model.set_string_custom_property("pushed_version", str(version))

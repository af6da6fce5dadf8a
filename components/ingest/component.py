"""`ImageExampleGen`: the TFX component that runs `ingest` and publishes its artifacts.

Its `examples` output is laid out like TFX's own ExampleGen output, so StatisticsGen,
SchemaGen, ExampleValidator, Trainer and Evaluator read it unchanged.

Example:
    selection = stage_listing(select_folder("/data/digits"), pipeline_root)  # selection.py
    ingest = ImageExampleGen(
        data_selection=selection.parameter(),
        splits='{"train": 0.8, "eval": 0.2}',
    )
"""

# No `from __future__ import annotations`: TFX's decorator reads the real annotation objects.

import json
import os

import apache_beam as beam
from tfx.dsl.component.experimental.annotations import (
    BeamComponentParameter,
    OutputArtifact,
    Parameter,
)
from tfx.dsl.component.experimental.decorators import component
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.artifact import Artifact

from components.examples_format import DEFAULT_SHARD_MB
from components.ingest.headers import DEFAULT_MAX_FILE_MB, DEFAULT_MAX_PIXELS, SizeLimits
from components.ingest.ingest import QUARANTINE_FILE, ingest
from components.ingest.reader import parse_image_size
from components.ingest.selection import load_selection
from components.ingest.splits import parse_split_ratios

PAYLOAD_FORMAT = example_gen_pb2.PayloadFormat.Name(example_gen_pb2.FORMAT_TF_EXAMPLE)


class QuarantineReport(Artifact):
    """The files ingest could not use and why: `<uri>/quarantine.json`."""

    TYPE_NAME = "mptfx.QuarantineReport"


def _failure_report_path(quarantine_uri: str) -> str:
    # TFX deletes a failed execution's output folders, so the report that explains the
    # failure is kept beside them, named after the execution's folder.
    parent, execution = os.path.split(os.path.normpath(quarantine_uri))
    return os.path.join(parent, f"failed-{execution}-{QUARANTINE_FILE}")


# A Beam component (TFX builds `beam_pipeline` from the pipeline's Beam args, as for
# StatisticsGen); only `ingest_engine: beam` runs it, the local engine never does.
@component(use_beam=True)
def ImageExampleGen(  # noqa: N802 (TFX names components like classes)
    examples: OutputArtifact[standard_artifacts.Examples],
    quarantine: OutputArtifact[QuarantineReport],
    data_selection: Parameter[str],
    splits: Parameter[str] = '{"train": 0.8, "eval": 0.2}',
    image_size: Parameter[str] = "null",
    resize_method: Parameter[str] = "stretch",
    channels: Parameter[str] = "auto",
    max_bad_fraction: Parameter[float] = 0.01,
    max_pixels: Parameter[int] = DEFAULT_MAX_PIXELS,
    max_file_mb: Parameter[float] = DEFAULT_MAX_FILE_MB,
    jpeg_quality: Parameter[int] = 95,
    shard_mb: Parameter[float] = DEFAULT_SHARD_MB,
    ingest_engine: Parameter[str] = "local",
    beam_pipeline: BeamComponentParameter[beam.Pipeline] = None,
) -> None:
    """Ingest the selected image folders, TFRecords or volumes into `examples`.

    Args:
        examples: output; `Split-<name>/data_tfrecord-*.gz` plus `labels.json`.
        quarantine: output; `quarantine.json` listing every unusable file with its reason.
        data_selection: `DataSelection.parameter()` (selection.py): the data root, its span
            folders and latest span, its kind, and the listing file in the pipeline root
            named by its sha256. The files are the listing's (nothing is listed again), and
            the parameter changes exactly when the listing does, so TFX's cache re-runs the
            Ingest exactly when the data changes. Stored on `examples`: `span`, `span_dirs`
            and `input_fingerprint` (the listing's digest).
        splits: JSON dict of split name to ratio, e.g. `{"train": 0.8, "eval": 0.2}`.
        image_size: JSON `null` (keep each image's size) or `[height, width]`.
        resize_method: `"stretch"` or `"pad"` (keep aspect ratio, pad with black).
        channels: `"auto"` (1 if every image is gray, else 3), `"1"` or `"3"`.
        max_bad_fraction: fail when a larger fraction of the files is quarantined.
        max_pixels: quarantine, without decoding, an image whose header has more pixels.
        max_file_mb: quarantine, without reading it, a larger file.
        jpeg_quality: quality of the JPEGs that must be re-encoded (resized, alpha, gray).
        shard_mb: about this many MB of serialized Examples per TFRecord shard.
        ingest_engine: `"local"` (this process) or `"beam"` (a Beam pipeline on
            `beam_pipeline`: the same Examples, decoded by the runner's workers).
        beam_pipeline: given by TFX from the Beam pipeline args.
    """
    ratios = parse_split_ratios(splits)
    selection = load_selection(data_selection)
    ingest(
        selection,
        examples.uri,
        os.path.join(quarantine.uri, QUARANTINE_FILE),
        splits=ratios,
        image_size=parse_image_size(image_size),
        resize_method=resize_method,
        channels=channels,
        max_bad_fraction=max_bad_fraction,
        failure_report_path=_failure_report_path(quarantine.uri),
        limits=SizeLimits(max_pixels, max_file_mb),
        jpeg_quality=jpeg_quality,
        shard_mb=shard_mb,
        engine=ingest_engine,
        beam_pipeline=beam_pipeline if ingest_engine == "beam" else None,
    )
    examples.split_names = artifact_utils.encode_split_names(list(ratios))
    examples.span = selection.span
    examples.set_string_custom_property("payload_format", PAYLOAD_FORMAT)
    examples.set_int_custom_property("span", selection.span)
    examples.set_string_custom_property("input_fingerprint", selection.fingerprint)
    examples.set_string_custom_property("span_dirs", json.dumps(selection.span_dirs))

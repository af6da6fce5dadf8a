"""TFX component `TFLiteExport`: convert the pushed model to TF Lite, gate on parity, publish.

Runs after the Pusher (docs/INTERFACES.md, "TF Lite"). For each requested variant it
converts the serving model's `predict_normalized` signature, compares the TF Lite model
with the SavedModel on the eval split, and publishes the variants that pass their gate to
`<publish_dir>/<pushed_version>/<variant>.tflite` beside a `labels.txt`. A `mixed` serving
model (float16/bfloat16 compute) is not convertible to TF Lite builtins: its float32
rebuild, `Format-Float32` in the Model artifact, is converted and compared instead.

Example (in the pipeline):

    tflite_export = TFLiteExport(
        model=trainer.outputs["model"],
        examples=ingest.outputs["examples"],
        pushed_model=pusher.outputs["pushed_model"],
        variants='["fp32", "fp16", "int8"]',
        publish_dir=os.path.join(workspace, "tflite", model_name),
    )
"""

# No `from __future__ import annotations` here: the TFX decorator reads the function's
# annotations as objects, not strings.

import dataclasses
import json
import os
import time
import uuid

import numpy as np
import tensorflow as tf
from absl import logging
from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import artifact, standard_artifacts
from tfx.utils import path_utils

from components.core.publish import commit_staged_version, new_staging_dir, prune_versions
from components.examples_format import EVAL_SPLIT, TRAIN_SPLIT, read_label_names
from components.faults import fault_point
from components.tflite.convert import (
    SIGNATURE_KEY,
    VARIANTS,
    convert,
    read_signature_input,
    reduced_precision_dtypes,
)
from components.tflite.data import load_split_images
from components.tflite.parity import check_parity, savedmodel_predictions
from components.trainer.export import FLOAT32_DIR, float32_model_dir

NOT_PUSHED_REASON = "model not pushed (not blessed)"


class TFLiteModels(artifact.Artifact):
    """TF Lite models converted from one pushed serving model.

    * File structure:
        - `{uri}/<variant>.tflite`: every converted variant, published or not.
        - `{uri}/labels.txt`: class names, one per line, in class index order.
        - `{uri}/report.json`: `{variant: {"path", "bytes", "agreement", "accuracy",
          "savedmodel_accuracy", "accuracy_delta", "latency_ms", "examples", "published",
          "reason"}}`, or `{"skipped": reason}` when the model was not pushed.

    * Custom properties: `skipped` (int 0/1), `version` (str, the pushed version; empty
      when skipped), `published_variants` (str, JSON list).
    """

    TYPE_NAME = "mptfx.TFLiteModels"


def parse_variants(variants_json: str) -> list[str]:
    """Parses the `variants` parameter: a JSON list of distinct names from `VARIANTS`.

    Raises:
        ValueError: naming the received text or the unknown variant.
    """
    try:
        variants = json.loads(variants_json)
    except json.JSONDecodeError as error:
        raise ValueError(
            f'variants must be a JSON list such as \'["fp32", "int8"]\'; received '
            f"{variants_json!r} ({error})."
        ) from error
    if (
        not isinstance(variants, list)
        or not variants
        or not all(isinstance(variant, str) for variant in variants)
    ):
        raise ValueError(
            f"variants must be a non-empty JSON list of strings; received {variants_json!r}."
        )
    unknown = [variant for variant in variants if variant not in VARIANTS]
    if unknown:
        raise ValueError(
            f"Unknown TF Lite variant(s) {unknown} in variants={variants_json!r}; valid "
            f"variants are {list(VARIANTS)}."
        )
    if len(set(variants)) != len(variants):
        raise ValueError(f"variants lists a variant twice; received {variants_json!r}.")
    return variants


def pushed_version(pushed_model: artifact.Artifact) -> str | None:
    """The version the Pusher published, or None when it did not push.

    TFX's Pusher sets the custom properties `pushed` (1/0), `pushed_version` and
    `pushed_destination` (`.../<version>`).

    Raises:
        ValueError: when the model was pushed but no version can be found.
    """
    if pushed_model.get_int_custom_property("pushed") != 1:
        return None
    version = pushed_model.get_string_custom_property("pushed_version")
    if not version:
        destination = pushed_model.get_string_custom_property("pushed_destination")
        version = os.path.basename(destination.rstrip("/"))
    if not version:
        raise ValueError(
            f"PushedModel {pushed_model.uri!r} is marked pushed but has neither a "
            "'pushed_version' nor a 'pushed_destination' custom property."
        )
    return version


def tflite_source_dir(model_uri: str) -> str:
    """The SavedModel TF Lite converts: the Trainer's float32 rebuild (`Format-Float32`,
    written beside a `mixed` serving model) when there is one, else `Format-Serving`."""
    serving = path_utils.serving_model_path(model_uri)
    rebuilt = float32_model_dir(serving)
    return rebuilt if tf.io.gfile.isdir(rebuilt) else serving


def export_tflite_models(
    saved_model_dir: str,
    examples_uri: str,
    output_dir: str,
    publish_version_dir: str,
    variants: list[str],
    uint8_io: bool = False,
    representative_samples: int = 200,
    parity_limit: int = 0,
    reported_version_dir: str | None = None,
) -> dict[str, dict]:
    """Converts, checks and publishes each variant; returns the report.

    Args:
        saved_model_dir: the SavedModel to convert (float32; see `tflite_source_dir`).
        examples_uri: the ingest Examples artifact (eval split for parity, train split for
            int8 calibration, labels.json).
        output_dir: where every converted model, labels.txt and report.json are written.
        publish_version_dir: where variants that pass their gate are copied, with
            labels.txt.
        variants: names from `VARIANTS`.
        uint8_io: give the `int8` variant uint8 input and output.
        representative_samples: train images used to calibrate `int8`.
        parity_limit: compare on at most this many eval images; 0 uses the whole split.
        reported_version_dir: the folder the report names as each variant's `path`, when
            `publish_version_dir` is a staging folder renamed there afterwards.

    Returns:
        `{variant: {"path", "bytes", "agreement", "accuracy", "savedmodel_accuracy",
        "accuracy_delta", "latency_ms", "examples", "published", "reason"}}`; `path` is
        the published file or None.
    """
    labels_text = "".join(f"{name}\n" for name in read_label_names(examples_uri))
    tf.io.gfile.makedirs(output_dir)
    _write_atomically(os.path.join(output_dir, "labels.txt"), labels_text.encode())
    reduced = reduced_precision_dtypes(saved_model_dir)
    if reduced:
        reason = (f"skipped: {SIGNATURE_KEY} of {saved_model_dir} computes in "
                  f"{'/'.join(reduced)} (export.serving_precision: mixed) and has no "
                  f"{FLOAT32_DIR} rebuild beside it; TF Lite builtins need a float32 graph")
        logging.warning("TFLite: %s", reason)
        report = {variant: _skipped_variant(reason) for variant in variants}
    else:
        images = _ParityImages.load(saved_model_dir, examples_uri, "int8" in variants,
                                    representative_samples, parity_limit)
        publication = _Publication(output_dir, publish_version_dir,
                                   reported_version_dir or publish_version_dir, labels_text)
        report = {variant: _export_variant(variant, saved_model_dir, images, publication,
                                           uint8_io and variant == "int8")
                  for variant in variants}
    _write_atomically(
        os.path.join(output_dir, "report.json"), json.dumps(report, indent=2).encode()
    )
    return report


@dataclasses.dataclass(frozen=True)
class _ParityImages:
    """What every variant is checked on: the eval images and labels, the SavedModel loaded
    once with its predictions on them, and the train images that calibrate int8."""

    loaded: object
    eval_images: np.ndarray
    eval_labels: np.ndarray
    reference: np.ndarray
    representative: np.ndarray | None

    @classmethod
    def load(cls, saved_model_dir: str, examples_uri: str, calibrate: bool,
             representative_samples: int, parity_limit: int) -> "_ParityImages":
        signature_input = read_signature_input(saved_model_dir)
        size, channels = signature_input.input_size, signature_input.channels
        eval_images, eval_labels = load_split_images(examples_uri, EVAL_SPLIT, size, channels,
                                                     limit=parity_limit or None)
        representative = None
        if calibrate:
            representative, _ = load_split_images(examples_uri, TRAIN_SPLIT, size, channels,
                                                  limit=representative_samples)
        loaded = tf.saved_model.load(saved_model_dir)
        reference = savedmodel_predictions(saved_model_dir, eval_images, loaded=loaded)
        return cls(loaded, eval_images, eval_labels, reference, representative)


@dataclasses.dataclass(frozen=True)
class _Publication:
    """Where converted variants go: every one to `output_dir`, those that pass their gate
    (with labels.txt) to `version_dir`, reported under `reported_dir`."""

    output_dir: str
    version_dir: str
    reported_dir: str
    labels_text: str

    def publish(self, variant: str, tflite_model: bytes) -> str:
        tf.io.gfile.makedirs(self.version_dir)
        _write_atomically(os.path.join(self.version_dir, "labels.txt"), self.labels_text.encode())
        _write_atomically(os.path.join(self.version_dir, f"{variant}.tflite"), tflite_model)
        return os.path.join(self.reported_dir, f"{variant}.tflite")


def _export_variant(variant: str, saved_model_dir: str, images: _ParityImages,
                    publication: _Publication, uint8_io: bool) -> dict:
    """Converts one variant, checks it against the SavedModel, publishes it if it passes;
    returns its report entry."""
    try:
        tflite_model = convert(saved_model_dir, variant,
                               representative_images=images.representative,
                               uint8_io=uint8_io, loaded=images.loaded)
    except Exception as error:
        # One unconvertible variant (an op without an int8 kernel, say) must not stop the
        # others from being published; the report says what failed.
        logging.exception("TFLite %s: conversion failed.", variant)
        return _conversion_failure(error)
    _write_atomically(os.path.join(publication.output_dir, f"{variant}.tflite"), tflite_model)
    result = check_parity(tflite_model, variant, saved_model_dir, images.eval_images,
                          images.eval_labels, reference=images.reference)
    published_path = None
    if result.passed:
        published_path = publication.publish(variant, tflite_model)
        fault_point("tflite")
    logging.info(
        "TFLite %-12s %9d bytes  agreement %.4f  accuracy %.4f (%+.2f points)  "
        "%.3f ms/image  %s: %s", variant, result.bytes, result.agreement, result.accuracy,
        result.accuracy_delta * 100, result.latency_ms,
        f"published {published_path}" if result.passed else "NOT published", result.reason,
    )
    return {
        "path": published_path,
        "bytes": result.bytes,
        "agreement": result.agreement,
        "accuracy": result.accuracy,
        "savedmodel_accuracy": result.savedmodel_accuracy,
        "accuracy_delta": result.accuracy_delta,
        "latency_ms": result.latency_ms,
        "examples": result.examples,
        "published": result.passed,
        "reason": result.reason,
    }


@component
def TFLiteExport(
    model: InputArtifact[standard_artifacts.Model],
    examples: InputArtifact[standard_artifacts.Examples],
    pushed_model: InputArtifact[standard_artifacts.PushedModel],
    tflite_models: OutputArtifact[TFLiteModels],
    publish_dir: Parameter[str],
    variants: Parameter[str] = '["fp32", "fp16", "int8"]',
    uint8_io: Parameter[int] = 0,
    representative_samples: Parameter[int] = 200,
    parity_limit: Parameter[int] = 0,
    keep_versions: Parameter[int] = 5,
) -> None:
    """Converts the pushed serving model to TF Lite variants and publishes those that pass.

    Args:
        model: the Trainer's Model; the SavedModel converted is `<uri>/Format-Float32`
            when the Trainer wrote one (a mixed serving model), else `<uri>/Format-Serving`.
        examples: the ingest Examples (eval split, train split, labels.json).
        pushed_model: the Pusher's output; nothing is converted unless `pushed` is 1.
        tflite_models: every converted model, labels.txt and report.json.
        publish_dir: passing variants go to `<publish_dir>/<pushed_version>/`.
        variants: JSON list of variants from `VARIANTS`.
        uint8_io: 1 gives the `int8` variant uint8 input/output (microcontrollers, Edge TPU).
        representative_samples: train images used to calibrate `int8`.
        parity_limit: eval images compared with the SavedModel; 0 means the whole split.
        keep_versions: published versions kept in `publish_dir` (the newest).
    """
    fault_point("before-tflite")
    started = time.monotonic()
    variant_names = parse_variants(variants)
    version = pushed_version(pushed_model)
    tf.io.gfile.makedirs(tflite_models.uri)
    if version is None:
        _write_atomically(
            os.path.join(tflite_models.uri, "report.json"),
            json.dumps({"skipped": NOT_PUSHED_REASON}).encode(),
        )
        tflite_models.set_int_custom_property("skipped", 1)
        tflite_models.set_string_custom_property("version", "")
        tflite_models.set_string_custom_property("published_variants", "[]")
        logging.info(
            "TFLiteExport skipped: %s (PushedModel %s).", NOT_PUSHED_REASON, pushed_model.uri
        )
        return

    # Every passing variant goes into a staging folder that becomes the version folder in
    # one rename, so no reader ever sees a version with some of its variants.
    staging = new_staging_dir(publish_dir, version)
    report = export_tflite_models(
        saved_model_dir=tflite_source_dir(model.uri),
        examples_uri=examples.uri,
        output_dir=tflite_models.uri,
        publish_version_dir=staging,
        variants=variant_names,
        uint8_io=bool(uint8_io),
        representative_samples=representative_samples,
        parity_limit=parity_limit,
        reported_version_dir=os.path.join(publish_dir, version),
    )
    commit_staged_version(staging, publish_dir, version)
    prune_versions(publish_dir, keep_versions)
    published = [variant for variant, entry in report.items() if entry["published"]]
    tflite_models.set_int_custom_property("skipped", 0)
    tflite_models.set_string_custom_property("version", version)
    tflite_models.set_string_custom_property("published_variants", json.dumps(published))
    logging.info(
        "TFLiteExport finished in %.1f s: version %s, published %s of %s.",
        time.monotonic() - started,
        version,
        published,
        variant_names,
    )


def _conversion_failure(error: Exception) -> dict:
    """The report entry of a variant the converter could not produce."""
    return _skipped_variant(f"conversion failed: {type(error).__name__}: {error}"[:2000])


def _skipped_variant(reason: str) -> dict:
    """The report entry of a variant that was not converted, saying why in `reason`."""
    return {
        "path": None,
        "bytes": None,
        "agreement": None,
        "accuracy": None,
        "savedmodel_accuracy": None,
        "accuracy_delta": None,
        "latency_ms": None,
        "examples": 0,
        "published": False,
        "reason": reason,
    }


def _write_atomically(path: str, content: bytes) -> None:
    """Writes a file under a temporary name, then renames it.

    A reader (a device fleet syncing the publish folder) never sees a half-written model.
    """
    # Unique: two exports writing the same path never share (and clobber) one temporary.
    temporary_path = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with tf.io.gfile.GFile(temporary_path, "wb") as f:
        f.write(content)
    tf.io.gfile.rename(temporary_path, path, overwrite=True)

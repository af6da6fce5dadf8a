"""Publish a SavedModel as the next integer version of a TF Serving model base path.

TF Serving polls `<base>/<integer version>/` and loads the highest version it finds, so a
version must never be visible half-written. On a local or mounted filesystem (a PVC) the
copy goes to a hidden temporary folder beside the versions and is then renamed into place:
rename is atomic there, and TF Serving ignores names that are not integers. Object stores
(`gs://`, `s3://`) have no atomic directory rename; there the copy is staged the same way and
then copied into the version folder with `saved_model.pb` last, the file TF Serving's loader
treats as the sign of a complete model.

    version_dir = publish_version("exported/model", "serving/digits", keep_versions=5)
"""

from __future__ import annotations

import logging
import posixpath
import time
import uuid
from collections.abc import Callable, Collection

import tensorflow as tf

_STAGING_PREFIX = ".staging-"
_SAVED_MODEL_FILE = "saved_model.pb"
_STALE_STAGING_SECONDS = 3600

CopyFile = Callable[[str, str], None]


class PublishError(RuntimeError):
    """The model could not be published; the serving folder is as it was before."""


def _is_object_store(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _default_copy(source: str, destination: str) -> None:
    tf.io.gfile.copy(source, destination, overwrite=True)


def existing_versions(base_dir: str) -> list[int]:
    """The integer version folders under `base_dir`, oldest first."""
    if not tf.io.gfile.isdir(base_dir):
        return []
    names = (name.rstrip("/") for name in tf.io.gfile.listdir(base_dir))
    return sorted(int(name) for name in names if name.isdigit())


def _copy_tree(source: str, destination: str, copy_file: CopyFile) -> None:
    """Copy every file, the top folder's `saved_model.pb` last."""
    deferred = []
    for folder, _, files in tf.io.gfile.walk(source):
        relative = posixpath.relpath(folder, source)
        target = destination if relative == "." else posixpath.join(destination, relative)
        tf.io.gfile.makedirs(target)
        for name in files:
            pair = (posixpath.join(folder, name), posixpath.join(target, name))
            if relative == "." and name == _SAVED_MODEL_FILE:
                deferred.append(pair)
            else:
                copy_file(*pair)
    for pair in deferred:
        copy_file(*pair)


def _fingerprint(model_dir: str) -> dict[str, object]:
    """Relative path → size for every file, plus the bytes of the two files that change
    whenever the graph or the weights change (saved_model.pb, variables/variables.index)."""
    prints: dict[str, object] = {}
    for folder, _, files in tf.io.gfile.walk(model_dir):
        for name in files:
            path = posixpath.join(folder, name)
            relative = posixpath.relpath(path, model_dir)
            prints[relative] = tf.io.gfile.stat(path).length
            if relative in (_SAVED_MODEL_FILE, "variables/variables.index"):
                with tf.io.gfile.GFile(path, "rb") as handle:
                    prints[relative + "#bytes"] = handle.read()
    return prints


def _remove_stale_staging(base_dir: str) -> None:
    """Staging folders left by a killed push are deleted once they are an hour old."""
    now = time.time()
    for name in tf.io.gfile.listdir(base_dir):
        name = name.rstrip("/")
        if not name.startswith(_STAGING_PREFIX):
            continue
        path = posixpath.join(base_dir, name)
        try:
            started = float(name[len(_STAGING_PREFIX):].split("-")[0])
        except ValueError:
            started = 0.0
        if now - started > _STALE_STAGING_SECONDS:
            tf.io.gfile.rmtree(path)


def prune_versions(base_dir: str, keep_versions: int,
                   protected: Collection[int] = ()) -> list[int]:
    """Delete all but the newest `keep_versions` versions, never one in `protected` (the
    versions models.config labels: stable, canary, previous); returns the deleted ones."""
    versions = existing_versions(base_dir)
    doomed = versions[:-keep_versions] if keep_versions > 0 else []
    doomed = [version for version in doomed if version not in set(protected)]
    for version in doomed:
        tf.io.gfile.rmtree(posixpath.join(base_dir, str(version)))
    return doomed


def publish_version(
    source_dir: str,
    base_dir: str,
    keep_versions: int = 5,
    copy_file: CopyFile = _default_copy,
    protected: Collection[int] = (),
) -> tuple[int, str]:
    """Copy the SavedModel at `source_dir` to `<base_dir>/<next integer version>`.

    Returns (version, version_dir). When the newest version already holds this very model,
    that version is returned and nothing is copied. Pruning spares `protected` versions.
    On any failure the staging copy is removed, no new version is visible, and PublishError
    names the destination.
    """
    if not tf.io.gfile.exists(posixpath.join(source_dir, _SAVED_MODEL_FILE)):
        raise PublishError(f"no {_SAVED_MODEL_FILE} in {source_dir}: not a SavedModel")
    tf.io.gfile.makedirs(base_dir)
    _remove_stale_staging(base_dir)
    versions = existing_versions(base_dir)
    if versions:
        newest = posixpath.join(base_dir, str(versions[-1]))
        if _fingerprint(newest) == _fingerprint(source_dir):
            # Re-pushing the model already served (e.g. a cached re-run) adds no version.
            logging.info("%s already serves this model; nothing new published", newest)
            return versions[-1], newest
    version = (versions or [0])[-1] + 1
    version_dir = posixpath.join(base_dir, str(version))
    staging = posixpath.join(base_dir, f"{_STAGING_PREFIX}{time.time():.0f}-{uuid.uuid4().hex[:8]}")
    try:
        _copy_tree(source_dir, staging, copy_file)
        if _is_object_store(base_dir):
            _copy_tree(staging, version_dir, copy_file)
            tf.io.gfile.rmtree(staging)
        else:
            tf.io.gfile.rename(staging, version_dir, overwrite=False)
    except Exception as error:
        for leftover in (staging, version_dir if _is_object_store(base_dir) else None):
            if leftover and tf.io.gfile.exists(leftover):
                tf.io.gfile.rmtree(leftover)
        raise PublishError(f"publishing to {version_dir} failed, nothing published: "
                           f"{error}") from error
    removed = prune_versions(base_dir, keep_versions, protected)
    logging.info("published version %d to %s (removed old versions %s)", version,
                 version_dir, removed)
    return version, version_dir

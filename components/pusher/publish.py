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
import os
import posixpath
import time
from collections.abc import Callable, Collection

import tensorflow as tf

from components.core.publish import (
    STALE_STAGING_SECONDS,
    existing_versions,
    new_staging_dir,
    prune_versions,
    remove_stale_staging,
)
from components.core.saved_model import SAVED_MODEL_FILE
from components.faults import fault_point

# `<base>/.reserved-<version>`: taken with an exclusive mkdir before a version is staged, so
# two pushers never pick the same number. Hidden, so TF Serving never sees it.
_RESERVED_PREFIX = ".reserved-"
_RESERVE_ATTEMPTS = 100

CopyFile = Callable[[str, str], None]


class PublishError(RuntimeError):
    """The model could not be published; the serving folder is as it was before."""


def _is_object_store(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _default_copy(source: str, destination: str) -> None:
    tf.io.gfile.copy(source, destination, overwrite=True)


def _copy_tree(source: str, destination: str, copy_file: CopyFile) -> None:
    """Copy every file, the top folder's `saved_model.pb` last."""
    deferred = []
    copied = 0
    for folder, _, files in tf.io.gfile.walk(source):
        relative = posixpath.relpath(folder, source)
        target = destination if relative == "." else posixpath.join(destination, relative)
        tf.io.gfile.makedirs(target)
        for name in files:
            pair = (posixpath.join(folder, name), posixpath.join(target, name))
            if relative == "." and name == SAVED_MODEL_FILE:
                deferred.append(pair)
            else:
                copy_file(*pair)
                copied += 1
                if copied == 1:
                    fault_point("push-copy")
    for pair in deferred:
        copy_file(*pair)


def _fsync_tree(root: str) -> None:
    """fsync every file and folder below `root` (local filesystems): without it a power
    loss after the rename can leave a version whose files are empty or missing."""
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as handle:
                os.fsync(handle.fileno())
        _fsync_dir(folder)


def _fsync_dir(folder: str) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _reserved_versions(base_dir: str) -> list[int]:
    names = (name.rstrip("/") for name in tf.io.gfile.listdir(base_dir))
    return [int(name[len(_RESERVED_PREFIX):]) for name in names
            if name.startswith(_RESERVED_PREFIX) and name[len(_RESERVED_PREFIX):].isdigit()]


def reserve_version(base_dir: str) -> tuple[int, str]:
    """Take the next free version number with an exclusive mkdir of its reservation folder;
    a number another pusher took first is skipped. Returns (version, reservation folder).

    On local filesystems and PVCs mkdir is atomic and exclusive; object stores have no
    exclusive create, so there two pushers racing in the same second can still collide
    (the loser's rename or copy then fails and nothing half-written is left).
    """
    candidate = max(existing_versions(base_dir) + _reserved_versions(base_dir) + [0]) + 1
    for _ in range(_RESERVE_ATTEMPTS):
        reservation = posixpath.join(base_dir, f"{_RESERVED_PREFIX}{candidate}")
        version_dir = posixpath.join(base_dir, str(candidate))
        try:
            if _is_object_store(base_dir):
                if tf.io.gfile.exists(reservation) or tf.io.gfile.exists(version_dir):
                    raise FileExistsError(reservation)
                tf.io.gfile.makedirs(reservation)
            else:
                os.mkdir(reservation)
            if tf.io.gfile.exists(version_dir):  # published by a pusher without reservations
                tf.io.gfile.rmtree(reservation)
                raise FileExistsError(version_dir)
            return candidate, reservation
        except FileExistsError:
            candidate += 1
    raise PublishError(f"no free version number under {base_dir} after "
                       f"{_RESERVE_ATTEMPTS} attempts")


def _remove_stale_reservations(base_dir: str) -> None:
    """Reservations of a killed pusher are removed after an hour (its mtime)."""
    now = time.time()
    for version in _reserved_versions(base_dir):
        path = posixpath.join(base_dir, f"{_RESERVED_PREFIX}{version}")
        try:
            age = now - tf.io.gfile.stat(path).mtime_nsec / 1e9
        except tf.errors.NotFoundError:
            continue
        if age > STALE_STAGING_SECONDS:
            tf.io.gfile.rmtree(path)


def _remove_half_versions(base_dir: str) -> list[int]:
    """On object stores, a version folder without `saved_model.pb` (copied last) and without
    a live reservation is what a killed copy left: removed so TF Serving never loads it."""
    if not _is_object_store(base_dir):
        return []  # there versions appear by rename only: whole or not at all
    reserved = set(_reserved_versions(base_dir))
    removed = []
    for version in existing_versions(base_dir):
        folder = posixpath.join(base_dir, str(version))
        if version not in reserved and not tf.io.gfile.exists(
                posixpath.join(folder, SAVED_MODEL_FILE)):
            tf.io.gfile.rmtree(folder)
            removed.append(version)
    return removed


def _fingerprint(model_dir: str) -> dict[str, object]:
    """Relative path → size for every file, plus the bytes of the two files that change
    whenever the graph or the weights change (saved_model.pb, variables/variables.index)."""
    prints: dict[str, object] = {}
    for folder, _, files in tf.io.gfile.walk(model_dir):
        for name in files:
            path = posixpath.join(folder, name)
            relative = posixpath.relpath(path, model_dir)
            prints[relative] = tf.io.gfile.stat(path).length
            if relative in (SAVED_MODEL_FILE, "variables/variables.index"):
                with tf.io.gfile.GFile(path, "rb") as handle:
                    prints[relative + "#bytes"] = handle.read()
    return prints


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
    if not tf.io.gfile.exists(posixpath.join(source_dir, SAVED_MODEL_FILE)):
        raise PublishError(f"no {SAVED_MODEL_FILE} in {source_dir}: not a SavedModel")
    tf.io.gfile.makedirs(base_dir)
    remove_stale_staging(base_dir)
    _remove_stale_reservations(base_dir)
    _remove_half_versions(base_dir)
    versions = existing_versions(base_dir)
    if versions:
        newest = posixpath.join(base_dir, str(versions[-1]))
        if _fingerprint(newest) == _fingerprint(source_dir):
            # Re-pushing the model already served (e.g. a cached re-run) adds no version.
            logging.info("%s already serves this model; nothing new published", newest)
            return versions[-1], newest
    version, reservation = reserve_version(base_dir)
    version_dir = posixpath.join(base_dir, str(version))
    staging = new_staging_dir(base_dir)  # also removes a killed push's stale staging
    try:
        _copy_tree(source_dir, staging, copy_file)
        if _is_object_store(base_dir):
            _copy_tree(staging, version_dir, copy_file)
            tf.io.gfile.rmtree(staging)
        else:
            _fsync_tree(staging)
            tf.io.gfile.rename(staging, version_dir, overwrite=False)
            _fsync_dir(base_dir)  # the rename itself survives a power loss
    except Exception as error:
        for leftover in (staging, version_dir if _is_object_store(base_dir) else None):
            if leftover and tf.io.gfile.exists(leftover):
                tf.io.gfile.rmtree(leftover)
        raise PublishError(f"publishing to {version_dir} failed, nothing published: "
                           f"{error}") from error
    finally:
        if tf.io.gfile.exists(reservation):
            tf.io.gfile.rmtree(reservation)
    removed = prune_versions(base_dir, keep_versions, protected)
    logging.info("published version %d to %s (removed old versions %s)", version,
                 version_dir, removed)
    return version, version_dir

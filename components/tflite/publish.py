"""Publish TF Lite variants as whole version folders: `<publish_dir>/<version>/`.

A device fleet syncing `publish_dir` must never pick up a version holding one variant of
three, or a half-written `.tflite`. Variants are written into a hidden staging folder
beside the versions, which is renamed into place once every variant is in (the same
staging-then-rename as the Pusher's TF Serving versions); old versions are pruned.

    staging = new_staging_dir(publish_dir, "3")
    ...  # write variants into staging
    commit_version(staging, publish_dir, "3")
    prune_versions(publish_dir, keep_versions=5)
"""

from __future__ import annotations

import posixpath
import time
import uuid

import tensorflow as tf

_STAGING_PREFIX = ".staging-"
_STALE_STAGING_SECONDS = 3600


def new_staging_dir(publish_dir: str, version: str) -> str:
    """A fresh hidden folder to fill with version `version`'s files (not created yet)."""
    tf.io.gfile.makedirs(publish_dir)
    remove_stale_staging(publish_dir)
    return posixpath.join(publish_dir,
                          f"{_STAGING_PREFIX}{time.time():.0f}-{version}-{uuid.uuid4().hex[:8]}")


def remove_stale_staging(publish_dir: str) -> list[str]:
    """Delete staging folders a killed export left, once they are an hour old."""
    removed = []
    for name in tf.io.gfile.listdir(publish_dir):
        name = name.rstrip("/")
        if not name.startswith(_STAGING_PREFIX):
            continue
        try:
            started = float(name[len(_STAGING_PREFIX):].split("-")[0])
        except ValueError:
            started = 0.0
        if time.time() - started > _STALE_STAGING_SECONDS:
            tf.io.gfile.rmtree(posixpath.join(publish_dir, name))
            removed.append(name)
    return removed


def commit_version(staging: str, publish_dir: str, version: str) -> str | None:
    """Rename `staging` to `<publish_dir>/<version>` (replacing an older copy of the same
    version, e.g. a re-run after a failed export); None when nothing was staged."""
    if not tf.io.gfile.isdir(staging):
        return None
    final = posixpath.join(publish_dir, version)
    replaced = None
    if tf.io.gfile.exists(final):
        replaced = f"{staging}.replaced"
        tf.io.gfile.rename(final, replaced, overwrite=False)
    tf.io.gfile.rename(staging, final, overwrite=False)
    if replaced:
        tf.io.gfile.rmtree(replaced)
    return final


def prune_versions(publish_dir: str, keep_versions: int) -> list[int]:
    """Delete all but the newest `keep_versions` integer version folders."""
    names = (name.rstrip("/") for name in tf.io.gfile.listdir(publish_dir))
    versions = sorted(int(name) for name in names if name.isdigit())
    doomed = versions[:-keep_versions] if keep_versions > 0 else []
    for version in doomed:
        tf.io.gfile.rmtree(posixpath.join(publish_dir, str(version)))
    return doomed

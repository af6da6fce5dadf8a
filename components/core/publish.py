"""Versioned publication: integer version folders under one directory, written in a hidden
staging folder and renamed into place, old versions pruned. TF Serving's model base path
(components/pusher/publish.py) and the TF Lite publish folder (components/tflite/component.py)
both publish this way, so a reader polling the directory (TF Serving, a device fleet syncing
it) never sees a half-written version.

    staging = new_staging_dir(publish_dir, "3")
    ...  # write the version's files into staging
    commit_staged_version(staging, publish_dir, "3")
    prune_versions(publish_dir, keep_versions=5, protected={2})
"""

from __future__ import annotations

import posixpath
import time
import uuid
from collections.abc import Collection

import tensorflow as tf

# Hidden names: TF Serving and version listings ignore what is not an integer.
STAGING_PREFIX = ".staging-"
# A staging folder older than this was left by a killed publisher.
STALE_STAGING_SECONDS = 3600


def existing_versions(publish_dir: str) -> list[int]:
    """The integer version folders under `publish_dir`, oldest first ([] when absent)."""
    if not tf.io.gfile.isdir(publish_dir):
        return []
    names = (name.rstrip("/") for name in tf.io.gfile.listdir(publish_dir))
    return sorted(int(name) for name in names if name.isdigit())


def new_staging_dir(publish_dir: str, tag: str = "") -> str:
    """A fresh hidden folder beside the versions to fill (not created yet); stale staging
    folders of killed publishers are removed first."""
    tf.io.gfile.makedirs(publish_dir)
    remove_stale_staging(publish_dir)
    suffix = f"-{tag}" if tag else ""
    return posixpath.join(publish_dir,
                          f"{STAGING_PREFIX}{time.time():.0f}{suffix}-{uuid.uuid4().hex[:8]}")


def remove_stale_staging(publish_dir: str) -> list[str]:
    """Delete the staging folders a killed publisher left, once they are an hour old (the
    time is in their name); returns their names."""
    removed = []
    for name in tf.io.gfile.listdir(publish_dir):
        name = name.rstrip("/")
        if not name.startswith(STAGING_PREFIX):
            continue
        try:
            started = float(name[len(STAGING_PREFIX):].split("-")[0])
        except ValueError:
            started = 0.0
        if time.time() - started > STALE_STAGING_SECONDS:
            tf.io.gfile.rmtree(posixpath.join(publish_dir, name))
            removed.append(name)
    return removed


def commit_staged_version(staging: str, publish_dir: str, version: str) -> str | None:
    """Rename `staging` to `<publish_dir>/<version>`, replacing an older copy of the same
    version (a re-run after a failed export); None when nothing was staged."""
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


def prune_versions(publish_dir: str, keep_versions: int,
                   protected: Collection[int] = ()) -> list[int]:
    """Delete all but the newest `keep_versions` versions, never one in `protected` (for TF
    Serving, the versions models.config labels: stable, canary, previous); returns them."""
    keep = set(protected)
    versions = existing_versions(publish_dir)
    doomed = versions[:-keep_versions] if keep_versions > 0 else []
    doomed = [version for version in doomed if version not in keep]
    for version in doomed:
        tf.io.gfile.rmtree(posixpath.join(publish_dir, str(version)))
    return doomed

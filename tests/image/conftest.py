"""Fixtures of the image tier (tests/image/containers.py says how the image is built and run):
the image, built or reused, and one working container of it shared by the session."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from containers import ENV, REPO, Container, buildah, image_tag


@pytest.fixture(scope="session")
def image() -> str:
    """The built image's tag: built now, or every layer reused when nothing changed."""
    if shutil.which("buildah") is None:
        message = ("buildah is not installed: the image tests need it "
                   "(apt-get install -y buildah debootstrap, or `make image` as root)")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    tag = image_tag()
    if os.environ.get("MPTFX_IMAGE_BUILT") != tag:  # `make test` built it just before
        build = subprocess.run(["bash", "scripts/build_image.sh", tag], cwd=REPO, env=ENV,
                               capture_output=True, text=True, timeout=3600)
        assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-3000:]
    return tag


@pytest.fixture(scope="session")
def container(image: str) -> Iterator[Container]:
    """One working container for the session (under vfs each one is a full copy of the
    image, so the tests share it and prove with `changed_since` that nothing in it moved)."""
    name = buildah("from", "--pull-never", "--quiet", image).stdout.strip()
    rootfs = Path(buildah("mount", name).stdout.strip())
    try:
        yield Container(name, rootfs)
    finally:
        buildah("umount", name, check=False)
        buildah("rm", name, check=False)

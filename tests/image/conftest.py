"""Fixtures of the image tier (tests/image/containers.py says how the image is built and run):
the image, built or reused, and one working container of it shared by the session."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from containers import ENV, REPO, Container, buildah, image_tag

BUILD_TIMEOUT_S = 3600


def _strict() -> bool:
    """Whether a missing image fails the tests instead of skipping them: under CI=true, or
    where buildah is installed (the build then had every means to succeed)."""
    return os.environ.get("CI", "").lower() == "true" or shutil.which("buildah") is not None


def _wait_for_the_build_beside(build: Path, tag: str) -> str:
    """The tag, once the build scripts/run_tests.sh started beside the other tests has ended
    (it writes its exit code to `build/exit`); a failed build fails or skips, with its log."""
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    while not (build / "exit").exists():
        if time.monotonic() > deadline:
            pytest.fail(f"the image build beside the tests did not end in {BUILD_TIMEOUT_S} s "
                        f"(log: {build / 'log'})")
        time.sleep(2)
    code = (build / "exit").read_text().strip()
    if code == "0":
        return tag
    log = (build / "log").read_text(errors="replace").splitlines() or ["(no output)"]
    if _strict():
        pytest.fail(f"the image build failed (exit {code}); its last lines:\n"
                    + "\n".join(log[-20:]))
    pytest.skip(f"no image ({log[-1]})")


@pytest.fixture(scope="session")
def image() -> str:
    """The built image's tag: built beside the other tests by `make test`, else built now, or
    every layer reused when nothing changed."""
    tag = image_tag()
    if os.environ.get("MPTFX_IMAGE_BUILD"):  # scripts/run_tests.sh builds it beside the tests
        return _wait_for_the_build_beside(Path(os.environ["MPTFX_IMAGE_BUILD"]), tag)
    if shutil.which("buildah") is None:
        message = ("buildah is not installed: the image tests need it "
                   "(apt-get install -y buildah debootstrap, or `make image` as root)")
        if _strict():
            pytest.fail(message)
        pytest.skip(message)
    if os.environ.get("MPTFX_IMAGE_BUILT") != tag:  # `make test-image` built it just before
        build = subprocess.run(["bash", "scripts/build_image.sh", tag], cwd=REPO, env=ENV,
                               capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
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

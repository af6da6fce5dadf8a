"""Helpers of the image tier: build the image, run commands inside it as the pods do.

No Docker engine runs here, so the image is built and run with buildah (chroot isolation, as
root, buildah's configured storage or STORAGE_DRIVER's): `scripts/build_image.sh` builds it,
or reuses every layer when nothing it contains changed; `buildah run --user 10001:10001`
runs a command in it with the environment and mounts a manifest gives the container. chroot
isolation shares the host's network, so a server on 127.0.0.1 (PostgreSQL, an MLflow server
started in the image) is reachable both ways.

Without buildah these tests skip with one line, except under CI=true, where they fail: CI must
prove the image. The image tag comes from MPTFX_IMAGE (default mptfx:<pyproject version>).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UID = "10001:10001"  # runAsUser/runAsGroup of every manifest
ENV = dict(os.environ)
# The storage scripts/build_image.sh used (buildah reads no STORAGE_DRIVER variable itself).
STORAGE = ["--storage-driver", ENV["STORAGE_DRIVER"]] if ENV.get("STORAGE_DRIVER") else []


def image_tag() -> str:
    version = re.search(r'^version = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.M)
    return os.environ.get("MPTFX_IMAGE", f"mptfx:{version.group(1)}")


def buildah(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    """Run `buildah ARGS` with the storage the build used; text output captured."""
    result = subprocess.run(["buildah", *STORAGE, *args], env=ENV, capture_output=True, text=True,
                            timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"buildah {' '.join(args[:3])} failed: {result.stderr[-2000:]}")
    return result


def _run_options(env: dict[str, str], mounts: dict[Path, str], user: str) -> list[str]:
    options = ["--isolation", "chroot", "--user", user]
    for name, value in env.items():
        options += ["--env", f"{name}={value}"]
    for host, path in mounts.items():
        options += ["--volume", f"{host}:{path}"]
    return options


@dataclass
class Container:
    """A working container of the image: run commands in it as the pods would. ENV is added
    to the image's own environment, each host folder of MOUNTS is bound at its container
    path (the pod's volumeMounts), USER is the pod's runAsUser:runAsGroup."""

    name: str
    rootfs: Path

    def run(self, argv: list[str], env: dict[str, str] | None = None,
            mounts: dict[Path, str] | None = None, user: str = UID, timeout: float = 900,
            ) -> subprocess.CompletedProcess:
        """`buildah run` ARGV to completion; output captured."""
        options = _run_options(env or {}, mounts or {}, user)
        return buildah("run", *options, self.name, "--", *argv, timeout=timeout, check=False)

    def popen(self, argv: list[str], env: dict[str, str], mounts: dict[Path, str],
              log: Path, user: str = UID) -> subprocess.Popen:
        """Start ARGV in the background, its output into LOG."""
        command = ["buildah", *STORAGE, "run", *_run_options(env, mounts, user), self.name,
                   "--", *argv]
        with open(log, "w") as out:  # its own process group: stop() ends the whole tree
            return subprocess.Popen(command, env=ENV, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    @staticmethod
    def stop(process: subprocess.Popen) -> None:
        """End a process started by popen and everything it started in the container."""
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 20)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def find(self, *expression: str) -> list[str]:
        """`find`'s EXPRESSION over the container's root file system, run on the host
        (mounted host folders are not in it), as container paths ("/." is the root). Read
        on the host, not through `buildah run`, whose relayed output once came back empty
        under load."""
        found = subprocess.run(["find", str(self.rootfs), "-xdev", *expression],
                               capture_output=True, text=True, check=True).stdout.splitlines()
        return ["/" + str(Path(p).relative_to(self.rootfs)) for p in found]

    def changed_since(self, marker: Path, ignore: tuple[str, ...]) -> list[str]:
        """The container's own files modified after MARKER was touched, IGNORE's prefixes
        left out."""
        paths = self.find("-newer", str(marker))
        return sorted(p for p in paths if p != "/." and not p.startswith(ignore))


def container_env(spec: dict, secrets: dict[tuple[str, str], str]) -> dict[str, str]:
    """A manifest container's `env`, Secret references resolved from SECRETS."""
    env = {}
    for item in spec.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = secrets[(ref["name"], ref["key"])]
    return env


def empty_dir(path: Path) -> Path:
    """A host folder standing in for an emptyDir volume: writable by every pod user."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o1777)
    return path


def pod_volume(path: Path, uid: int = 10001) -> Path:
    """A host folder standing in for the workspace claim as `fsGroup: 10001` presents it."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, uid)
    return path

"""The setup scripts on a fresh machine: a PATH without the programs they need, and `apt-get`
replaced by a recorder, as on a machine where `apt-get remove buildah debootstrap postgresql`
ran. Each script must ask apt-get for every missing package, and when it cannot install them,
stop with one line naming the packages and the command to run (exit 2).

The recorder stands in for apt-get only: installing real packages would change this machine
(the scripts' real install runs in `.ci/run` on a fresh clone)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO

SYSTEM_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
IMAGE_PROGRAMS = ("buildah", "debootstrap", "docker")
PROMETHEUS_PROGRAMS = ("prometheus", "promtool")
POSTGRES_PROGRAMS = ("pg_lsclusters", "pg_createcluster", "pg_ctlcluster", "pg_isready", "psql",
                     "postgres", "pg_ctl", "initdb")

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the scripts install packages as root")


def _path_without(tmp_path: Path, hidden: tuple[str, ...], apt_exit: int = 1) -> tuple[str, Path]:
    """A PATH of links to every program of the system's folders but `hidden`, and an apt-get
    that records its arguments and exits `apt_exit`."""
    shim = tmp_path / "bin"
    shim.mkdir()
    calls = tmp_path / "apt-get.calls"
    for folder in SYSTEM_DIRS:
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            if name in hidden or name == "apt-get" or (shim / name).exists():
                continue
            (shim / name).symlink_to(Path(folder) / name)
    recorder = shim / "apt-get"
    recorder.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n'
                        f'case "$*" in *install*) exit {apt_exit};; esac\n')
    recorder.chmod(0o755)
    return str(shim), calls


def _run(script: str, path: str, tmp_path: Path, *args: str, user: str | None = None,
         extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": path, "HOME": str(tmp_path), "LANG": "C.UTF-8", **(extra_env or {})}
    command = ["bash", str(REPO / "scripts" / script), *args]
    if user:
        command = ["/usr/sbin/runuser", "-u", user, "--", *command]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)


def _installs(calls: Path) -> list[str]:
    lines = calls.read_text().splitlines() if calls.exists() else []
    return [line for line in lines if "install" in line.split()]


@root_only
def test_the_image_build_asks_apt_get_for_buildah_and_debootstrap(tmp_path):
    path, calls = _path_without(tmp_path, IMAGE_PROGRAMS)
    result = _run("build_image.sh", path, tmp_path, "mptfx:setup-probe")
    [install] = _installs(calls)
    assert {"buildah", "debootstrap"} <= set(install.split()), install
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("build_image: apt-get could not install buildah debootstrap")
    assert line.endswith("as root run: apt-get update && apt-get install -y buildah debootstrap")


@root_only
def test_the_base_image_build_asks_for_them_too(tmp_path):
    path, calls = _path_without(tmp_path, IMAGE_PROGRAMS)
    result = _run("build_base_image.sh", path, tmp_path)
    [install] = _installs(calls)
    assert {"buildah", "debootstrap"} <= set(install.split()), install
    assert result.returncode == 2 and "apt-get install -y buildah debootstrap" in result.stderr


@root_only
def test_a_shell_function_named_buildah_does_not_hide_the_missing_program(tmp_path):
    """The bug of issue 22: `command -v buildah` found the script's own wrapper function."""
    path, calls = _path_without(tmp_path, IMAGE_PROGRAMS)
    wrapper = tmp_path / "with_function.sh"
    wrapper.write_text('buildah() { echo fake; }\nexport -f buildah\n'
                       f'exec bash {REPO}/scripts/build_image.sh mptfx:setup-probe\n')
    result = subprocess.run(["bash", str(wrapper)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, env={"PATH": path, "HOME": str(tmp_path)})
    assert result.returncode == 2
    assert any("buildah" in line.split() for line in _installs(calls))


@root_only
def test_services_ask_apt_get_for_postgresql(tmp_path):
    path, calls = _path_without(tmp_path, POSTGRES_PROGRAMS)
    empty = tmp_path / "no-postgresql"
    empty.mkdir()
    result = _run("start_services.sh", path, tmp_path, extra_env={"PG_LIB": str(empty)})
    [install] = _installs(calls)
    assert "postgresql" in install.split(), install
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("services: apt-get could not install postgresql")


@pytest.fixture
def open_tmp():
    """A folder another user can enter (pytest's own tmp folders are the owner's only)."""
    folder = Path(tempfile.mkdtemp(prefix="mptfx-setup-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


@root_only
@pytest.mark.parametrize("hidden,package", [(PROMETHEUS_PROGRAMS, "prometheus"),
                                            (("chromium",), "chromium")])
def test_services_ask_apt_get_for_prometheus_and_chromium(open_tmp, hidden, package):
    """PostgreSQL is there (the real server, started idempotently: its `psql` runs as the
    postgres user, hence a folder others may enter); Prometheus and promtool, or Chromium
    (the run report test's browser), are not."""
    tmp_path = open_tmp
    path, calls = _path_without(tmp_path, hidden)
    result = _run("start_services.sh", path, tmp_path)
    [install] = _installs(calls)
    assert install.split()[-1] == package, install
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"services: apt-get could not install {package}"), line
    assert line.endswith(f"as root run: apt-get update && apt-get install -y {package}")


@root_only
def test_without_root_the_line_names_the_packages_and_the_command(open_tmp):
    tmp_path = open_tmp
    path, calls = _path_without(tmp_path, IMAGE_PROGRAMS + POSTGRES_PROGRAMS)
    for script, expected in (("build_image.sh", "buildah debootstrap"),
                             ("start_services.sh", "postgresql")):
        result = _run(script, path, tmp_path, user="nobody")
        [line] = result.stderr.strip().splitlines()
        assert result.returncode == 2, (script, result.stderr)
        assert f"as root run: apt-get update && apt-get install -y {expected}" in line, line
    assert not calls.exists()  # nothing is attempted without root


def test_the_scripts_look_programs_up_with_type_p():
    """`command -v NAME` also finds a function or alias; the scripts use `type -P`."""
    for script in [*(REPO / "scripts").rglob("*.sh"), REPO / "Makefile", REPO / ".ci/run"]:
        for number, line in enumerate(script.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            assert "command -v" not in code, f"{script.relative_to(REPO)}:{number}: {line.strip()}"


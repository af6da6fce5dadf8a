"""The suite leaves nothing in the checkout: a test that writes a file into it fails the
session (tests/conftest.py compares what git sees before and after), so `make test` fails.

Run on a clone of this checkout's last commit, so the file the probe leaves lands there."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

LEAVES_A_FILE = '''
from tests.conftest import REPO

def test_writes_into_the_checkout():
    (REPO / "left-behind.db").write_text("a test database")
'''
LEAVES_NOTHING = '''
def test_writes_nothing(tmp_path):
    (tmp_path / "fine.db").write_text("in the test's own folder")
'''


@pytest.fixture
def clone(tmp_path):
    target = tmp_path / "checkout"
    subprocess.run(["git", "clone", "--quiet", "--local", "--no-hardlinks", str(REPO),
                    str(target)], check=True, timeout=120)
    return target


def _pytest(clone, name: str, body: str) -> subprocess.CompletedProcess:
    (clone / "tests" / name).write_text(body)
    subprocess.run(["git", "-C", str(clone), "add", "tests"], check=True)  # not left behind
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"tests/{name}"], cwd=clone, capture_output=True, text=True,
                          timeout=300)


def test_a_file_left_in_the_checkout_fails_the_session_naming_it(clone):
    result = _pytest(clone, "test_probe_leaves.py", LEAVES_A_FILE)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 passed" in result.stdout  # the test itself passed; the session did not
    assert f"the suite left files in the checkout {clone}: left-behind.db" in result.stderr


def test_a_suite_that_writes_only_in_its_tmp_folders_passes(clone):
    result = _pytest(clone, "test_probe_clean.py", LEAVES_NOTHING)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "left files" not in result.stderr

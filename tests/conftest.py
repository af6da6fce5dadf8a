"""Shared test helpers: run the real `mptfx` console script as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def summary(self) -> dict:
        return json.loads(self.stdout)


def run_mptfx(*args: str, cwd: Path = REPO, timeout: int = 900) -> CliResult:
    """Run `mptfx ARGS` in a subprocess (the installed console script's module)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    completed = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )
    return CliResult(completed.returncode, completed.stdout, completed.stderr)


@pytest.fixture(scope="session")
def mptfx():
    return run_mptfx

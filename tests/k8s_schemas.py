"""The offline validators of every Kubernetes object the tests write: kubernetes-validate
(the published schemas of Kubernetes 1.30, CRDs included), kubectl kustomize, checkov and
hadolint, from the tools virtualenv that `make tools` installs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOLS = Path(os.environ.get("MPTFX_TOOLS_VENV", REPO / ".venv-tools")) / "bin"
K8S_VERSION = "1.30.0"


def tool(name: str) -> str:
    """The path of a validator in the tools virtualenv; fails the test naming `make tools`."""
    path = TOOLS / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make tools` (part of `make test`)")
    return str(path)


def run_tool(*command: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{TOOLS}:{os.environ.get('PATH', '')}")
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def validate(paths: list[Path]) -> subprocess.CompletedProcess:
    """kubernetes-validate --strict against Kubernetes 1.30."""
    return run_tool(tool("kubernetes-validate"), "--strict", "-k", K8S_VERSION, "--quiet",
                    *map(str, paths))

"""tests/unit runs no subprocess, server or pipeline (those tests live in tests/integration
and tests/e2e): a unit test that starts a Python process, the `mptfx` console script, a
server or one of the validators fails, naming where it belongs. (The probes libraries run
on their own, such as `uname -p` from `platform` or `git rev-parse`, are not the test's.)"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_NOT_IN_UNIT = {"python", "python3", "mptfx", "mlflow", "kubectl", "kubernetes-validate",
                "checkov", "hadolint", "buildah", "podman", "postgres", "pg_ctl", "psql",
                "tensorflow_model_server", "prometheus", "promtool"}
_Popen = subprocess.Popen


class _UnitPopen(_Popen):
    def __init__(self, args, *rest, **kwargs):
        program = args if isinstance(args, str) else args[0]
        name = os.path.basename(str(program).split()[0])
        if str(program) == sys.executable or name in _NOT_IN_UNIT or name.startswith("python"):
            raise AssertionError(f"tests/unit starts no process (tried {args!r}); a test that "
                                 "needs one belongs in tests/integration or tests/e2e")
        super().__init__(args, *rest, **kwargs)


@pytest.fixture(autouse=True)
def no_subprocess(monkeypatch):
    monkeypatch.setattr(subprocess, "Popen", _UnitPopen)

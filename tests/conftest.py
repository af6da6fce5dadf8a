"""Shared test helpers: run the real `mptfx` console script as a user would; a fresh
database on the PostgreSQL server that .ci/run starts."""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.run_summary import RunSummary

REPO = Path(__file__).resolve().parents[1]
# Every `mptfx` a test starts runs as a user's would: outside the checkout (what it writes to
# its working directory, such as a default ./workspace or an MLflow ./mlflow.db, never lands
# in the repository) and with none of the caller's MLflow settings.
RUN_DIR = Path(tempfile.mkdtemp(prefix="mptfx-tests-cwd-"))
atexit.register(shutil.rmtree, RUN_DIR, True)
for _name in [name for name in os.environ if name.startswith("MLFLOW_")]:
    del os.environ[_name]


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def summary(self) -> RunSummary:
        """`--json` output, read through the summary's owner (a schema break fails here)."""
        return RunSummary.parse(json.loads(self.stdout), "mptfx --json output")


def run_mptfx(*args: str, cwd: Path = RUN_DIR, timeout: int = 900) -> CliResult:
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


@pytest.fixture(autouse=True)
def _process_environment_restored():
    """A command run in-process (`cli.main`) may set process-wide state for the rest of its
    process (`quiet_tensorflow`: TF_CPP_MIN_LOG_LEVEL, warning filters); undone after each
    test, so a later test's `mptfx` subprocess starts with a user's environment."""
    import warnings

    environment, filters = dict(os.environ), list(warnings.filters)
    yield
    os.environ.clear()
    os.environ.update(environment)
    warnings.filters[:] = filters


@pytest.fixture
def mptfx_here(capsys, monkeypatch):
    """`mptfx ARGS` in this process (`pipelines.cli.main`, what the console script calls),
    for the commands that start no pipeline: same exit code and lines, no subprocess."""
    from pipelines.cli import main

    def run(*args: str, cwd: Path = RUN_DIR) -> CliResult:
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run


@pytest.fixture
def restore_dtype_policy():
    """Keras' global dtype policy is put back after the test (the Trainer sets it)."""
    import keras

    previous = keras.mixed_precision.global_policy()
    yield
    keras.mixed_precision.set_dtype_policy(previous)


@pytest.fixture(scope="module")
def postgres():
    """A fresh database on the PostgreSQL server the CI started; dropped afterwards."""
    params = {
        "host": os.environ.get("MPTFX_TEST_PG_HOST", "127.0.0.1"),
        "port": int(os.environ.get("MPTFX_TEST_PG_PORT", "5432")),
        "user": os.environ.get("MPTFX_TEST_PG_USER", "mptfx"),
        "password": os.environ.get("MPTFX_TEST_PG_PASSWORD", "mptfx"),
    }
    try:
        socket.create_connection((params["host"], params["port"]), timeout=5).close()
    except OSError as error:
        pytest.fail(f"PostgreSQL is not reachable at {params['host']}:{params['port']} "
                    f"({error}); .ci/run installs and starts it")
    import psycopg2

    params["database"] = f"mptfx_test_{secrets.token_hex(4)}"
    server = {k: v for k, v in params.items() if k != "database"}
    # Created up front, as the cluster's PostgreSQL does (POSTGRES_DB); MLMD adds its tables.
    _sql(psycopg2, server, f'CREATE DATABASE "{params["database"]}"')
    yield params
    _sql(psycopg2, server, f'DROP DATABASE IF EXISTS "{params["database"]}" WITH (FORCE)')


def _sql(psycopg2, server: dict, statement: str) -> None:
    connection = psycopg2.connect(dbname="postgres", **server)
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute(statement)
    connection.close()


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """The replays' baseline: their SMALL config run through the Python API
    (`pipelines.api.run_pipeline`: the local runner, sqlite ML Metadata) in this process,
    which has imported TensorFlow already. Returns (ML Metadata outputs per node, summary)."""
    from tfx.orchestration import metadata

    from pipelines.api import run_pipeline
    from pipelines.metadata_summary import collect_outputs
    from pipelines.workspace import Workspace
    from tests.k8s_double import SMALL

    workspace = Workspace(tmp_path_factory.mktemp("local"))
    summary = run_pipeline(REPO / "configs/local.yaml", workspace.root, overrides=SMALL)
    assert summary.status == "completed", summary.error
    connection = metadata.sqlite_metadata_connection_config(str(workspace.metadata_path))
    return collect_outputs(connection, summary.pipeline, summary.run_id), summary




# --- the suite leaves nothing in the checkout -----------------------------------------
# What git reports (untracked and ignored files) is read when the session starts and when it
# ends; anything new fails the session (`make test` exits 1, naming the files). Caches of
# Python and the tools are not the suite's doing. Only the controlling process checks (not
# each pytest-xdist worker).
_CACHES = ("__pycache__/", ".pytest_cache/", ".ruff_cache/", ".egg-info/", ".venv")


def checkout_files(repo: Path = REPO) -> set[str]:
    """Untracked and ignored paths git sees in `repo`, without the tools' caches."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--ignored", "--untracked-files=all"],
        capture_output=True, text=True, check=True).stdout.splitlines()
    paths = {line[3:] for line in listed if line[:2] in ("??", "!!")}
    return {path for path in paths if not any(cache in path for cache in _CACHES)}


def _is_controller(session: pytest.Session) -> bool:
    return not hasattr(session.config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    if _is_controller(session):
        session.config.stash[_LEFT_BEHIND] = checkout_files()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _is_controller(session) or _LEFT_BEHIND not in session.config.stash:
        return
    left = sorted(checkout_files() - session.config.stash[_LEFT_BEHIND])
    if left:
        shown = ", ".join(left[:10]) + (f" and {len(left) - 10} more" if len(left) > 10 else "")
        print(f"\nmptfx tests: the suite left files in the checkout {REPO}: {shown}",
              file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_LEFT_BEHIND = pytest.StashKey[set]()

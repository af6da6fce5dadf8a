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
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from components.run_summary import RunSummary
from tests.workspaces import (
    SMALL,
    pipeline_run_ids,
    shared_root,
    shared_workspace,
)

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


def set_args(*settings: str) -> list[str]:
    """`--set KEY=VALUE` for each setting, as `mptfx run` takes them."""
    return [arg for setting in settings for arg in ("--set", setting)]


# Every component of an image classification run, in data-flow order.
COMPONENTS = ["Ingest", "StatisticsGen", "SchemaGen", "ExampleValidator", "DataValidationGate",
              "Trainer", "LatestBlessedModel", "Evaluator", "InfraValidator", "Pusher", "TFLite"]


def assert_every_component_ran(summary: RunSummary) -> None:
    """The run completed, and every classification component ran or came from the cache."""
    assert summary.status == "completed"
    assert set(summary.components) == set(COMPONENTS)
    for name in COMPONENTS:
        assert summary.components[name].status in ("completed", "cached"), name


def assert_blessed_exported_and_converted(summary: RunSummary, policy: str) -> None:
    """Trained under `policy`, lint passed, blessed at 0.9 or more, pushed, and its TF Lite
    fp32 variant published and faithful."""
    assert summary.status == "completed"
    assert summary.trainer.precision == policy
    assert summary.trainer.lint == "passed"
    assert summary.eval.blessed is True and summary.eval.accuracy >= 0.9
    assert summary.pushed.pushed is True
    assert Path(summary.pushed.path, "saved_model.pb").exists()
    fp32 = summary.tflite["fp32"]
    assert fp32.published is True and fp32.agreement >= 0.995
    assert Path(fp32.path).stat().st_size > 0


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


# --- trained workspaces, built once per `make test` (tests/workspaces.py) ----------------
# Two real runs serve every test that needs a trained workspace:
#   first-span     the digits as image files in spans and `mptfx retrain` as cron runs it on
#                  an empty workspace: it trains span-1 with the suite's baseline settings
#                  (SMALL) and pushes version 1 (stable, MLflow champion) with its monitoring
#                  reference; its workspace is the local run the replays, distillation and
#                  the InfraValidator refusal start from;
#   span-2-canary  a copy of that folder where served traffic drifted, span-2 arrived and
#                  `mptfx monitor --retrain-on-drift` retrained it and pushed version 2 as
#                  canary (tests/drift_canary.py); its workspace is the canary the serving
#                  and rollout tests start from.
# A test that changes a workspace takes a `relocated_copy` of one of them.
#
# `first_span_workspace`: <folder>/all (every digit as a PNG), <folder>/drops/span-1 (the first
# SPAN_PER_CLASS images of each class) and <folder>/ws. Copy the whole folder to add a span
# (`relocated_copy`): the drops travel with the workspace.
SPAN_PER_CLASS = 40


def add_span(folder: Path, span: int, first: int, count: int = SPAN_PER_CLASS) -> Path:
    """<folder>/drops/span-<span>: images first..first+count-1 of each class of <folder>/all."""
    target = folder / "drops" / f"span-{span}"
    for class_dir in sorted(p for p in (folder / "all").iterdir() if p.is_dir()):
        (target / class_dir.name).mkdir(parents=True)
        for image in sorted(class_dir.iterdir())[first:first + count]:
            shutil.copy(image, target / class_dir.name / image.name)
    return target


def _first_span(folder: Path) -> None:
    """`mptfx retrain` as cron runs it, on an empty workspace: it trains the first span."""
    from components.ingest.builtin_digits import export_digits

    export_digits(folder / "all")
    add_span(folder, 1, 0)
    result = run_mptfx("retrain", "--workspace", str(folder / "ws"), "--data",
                       str(folder / "drops"), "--json", *set_args(*SMALL))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.summary.pushed.to_dict() == {
        "pushed": True, "path": f"{folder}/ws/serving/digits/1", "version": "1",
        "label": "stable"}


@pytest.fixture(scope="session")
def first_span_workspace(tmp_path_factory) -> Path:
    """The folder holding the digits, their first span and the workspace trained on it (read
    only; `relocated_copy` the folder to change it)."""
    return shared_workspace(tmp_path_factory, "first-span", _first_span)


@pytest.fixture(scope="session")
def local_run_workspace(first_span_workspace) -> Path:
    """The baseline workspace (read only): the first span's, where `mptfx retrain` trained
    span-1 with SMALL through the local runner (sqlite ML Metadata) and pushed version 1 as
    stable. Its data: `local_run_data`."""
    return first_span_workspace / "ws"


@pytest.fixture(scope="session")
def local_run_data(first_span_workspace) -> Path:
    """The drops folder the local run trained on (read only; span-1 alone)."""
    return first_span_workspace / "drops"


@pytest.fixture(scope="session")
def local_run(local_run_workspace):
    """The replays' baseline: (ML Metadata outputs per node, summary) of `local_run_workspace`'s
    one run."""
    from tfx.orchestration import metadata

    from pipelines.metadata_summary import collect_outputs
    from pipelines.workspace import Workspace

    workspace = Workspace(local_run_workspace)
    [summary_file] = workspace.runs_dir.glob("*/summary.json")
    summary = RunSummary.read(summary_file)
    connection = metadata.sqlite_metadata_connection_config(str(workspace.metadata_path))
    return collect_outputs(connection, summary.pipeline, summary.run_id), summary


@pytest.fixture(scope="session")
def drift_canary_folder(tmp_path_factory, first_span_workspace) -> Path:
    """The first span's folder after drift and span-2 (read only; `relocated_copy` the folder
    to change it): version 1 stable, version 2 canary, what each command said in span-2.json
    (tests/drift_canary.py)."""
    from tests.drift_canary import build_drift_canary

    return shared_workspace(tmp_path_factory, "span-2-canary",
                            lambda folder: build_drift_canary(folder, first_span_workspace))


@pytest.fixture(scope="session")
def canary_workspace(drift_canary_folder) -> Path:
    """v1 stable + v2 canary (read only; `relocated_copy` it to change it): version 1 the
    first span's, version 2 span-2 retrained on drift, warm-started from version 1, pushed
    with `pusher.rollout: canary` (MLflow challenger; version 1 stays champion)."""
    return drift_canary_folder / "ws"


# --- the longest files first ----------------------------------------------------------
# pytest-xdist hands a worker one file at a time (`--dist loadfile`) in collection order when
# `--no-loadscope-reorder` is given (the Makefile's PARALLEL); its default order, most tests
# first, left a 10-minute file to start near the end while the other workers sat idle. Longest
# first, the short unit files fill the end. The seconds each file took on its worker,
# including the shared states it happened to build, in a clean clone's `make test` on 3
# workers on the 2-core Xeon with AVX512_BF16, 2026-12-06 (a file not listed keeps its place
# after these; the order only moves time).
LONGEST_FIRST = (
    "integration/test_pretrained_backbone.py",  # 291 s
    "e2e/test_pipeline_e2e.py",  # 287 s
    "e2e/test_rollout_e2e.py",  # 259 s, building the first span and the drift canary
    "e2e/test_tracking_e2e.py",  # 180 s
    "integration/test_trainer_distribution.py",  # 130 s
    "integration/test_vit.py",  # 116 s
    "e2e/test_photos_e2e.py",  # 108 s
    "integration/test_input_bound.py",  # 99 s
    "e2e/test_bad_input.py",  # 77 s
    "e2e/test_bench_e2e.py",  # 75 s
    "e2e/test_user_volumes_e2e.py",  # 66 s
)

# Right after them, tests/image: its files wait for the image that scripts/run_tests.sh builds
# beside the tests (12 minutes on a fresh machine), so they start once the longest files are
# under way, not first, and the short files still fill the end.
AFTER_THE_IMAGE_BUILD = ("image/test_container_replay.py", "image/test_image.py")


def _file_rank(item: pytest.Item) -> int:
    path = Path(str(item.path))
    relative = path.relative_to(REPO / "tests").as_posix() if path.is_relative_to(
        REPO / "tests") else ""
    order = LONGEST_FIRST + AFTER_THE_IMAGE_BUILD
    return order.index(relative) if relative in order else len(order)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_file_rank)  # stable: each file's tests keep their order


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
    session.config.stash[_STARTED] = time.time()
    if _is_controller(session):
        session.config.stash[_LEFT_BEHIND] = checkout_files()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _count_pipeline_runs(session)
    if not _is_controller(session) or _LEFT_BEHIND not in session.config.stash:
        return
    left = sorted(checkout_files() - session.config.stash[_LEFT_BEHIND])
    if left:
        shown = ", ".join(left[:10]) + (f" and {len(left) - 10} more" if len(left) > 10 else "")
        print(f"\nmptfx tests: the suite left files in the checkout {REPO}: {shown}",
              file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_LEFT_BEHIND = pytest.StashKey[set]()


# --- the pipeline runs a tier made ---------------------------------------------------------
# Each test process finds the runs written under its temporary folders since it started
# (tests/workspaces.py: `pipeline_run_ids`); a pytest-xdist worker hands its run ids to the
# controller, which prints their number at the end of the tier: "pipeline runs: N".
_STARTED = pytest.StashKey[float]()
_RUNS = pytest.StashKey[dict]()
# The unit and integration tiers run no pipeline (docs/DEVELOPMENT.md), but some write made-up
# summaries of runs (tracking, Kubernetes submission doubles): their folders are not counted.
_NO_PIPELINE_TIERS = ("unit", "integration")
_NO_PIPELINE_FOLDERS: list[Path] = []
_current_tier: list[str] = [""]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    parts = item.path.relative_to(REPO).parts if item.path.is_relative_to(REPO) else ()
    _current_tier[0] = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
    try:
        return (yield)
    finally:
        _current_tier[0] = ""


def _mktemp_noting_the_tier(original):
    def mktemp(self, basename: str, numbered: bool = True) -> Path:
        path = original(self, basename, numbered)
        if _current_tier[0] in _NO_PIPELINE_TIERS:
            _NO_PIPELINE_FOLDERS.append(path)
        return path
    return mktemp


pytest.TempPathFactory.mktemp = _mktemp_noting_the_tier(pytest.TempPathFactory.mktemp)


def _count_pipeline_runs(session: pytest.Session) -> None:
    config = session.config
    factory = config._tmp_path_factory  # type: ignore[attr-defined]
    basetemp = factory.getbasetemp()
    folders = [RUN_DIR, shared_root(factory, create=False), basetemp]
    # A pytest-xdist worker's folders (<basetemp>/popen-gw<N>) are its own to count: it knows
    # which of them its unit and integration tests made (a scripted cluster's "runs", which
    # execute no component), the controller does not.
    workers = [] if hasattr(config, "workeroutput") else list(basetemp.glob("popen-gw*"))
    runs = pipeline_run_ids(folders, since=config.stash.get(_STARTED, 0.0),
                            without=[*_NO_PIPELINE_FOLDERS, *workers])
    if hasattr(config, "workeroutput"):
        config.workeroutput["mptfx_pipeline_runs"] = runs
    config.stash.setdefault(_RUNS, {}).update(runs)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist: a worker finished; its pipeline runs join the controller's."""
    runs = getattr(node, "workeroutput", {}).get("mptfx_pipeline_runs", {})
    node.config.stash.setdefault(_RUNS, {}).update(runs)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    runs = config.stash.get(_RUNS, {})
    terminalreporter.write_sep("-", f"pipeline runs: {len(runs)}")
    factory = config._tmp_path_factory  # type: ignore[attr-defined]
    roots = [shared_root(factory, create=False), factory.getbasetemp()]
    where: dict[str, int] = {}
    for summary in runs.values():
        owner = _owner(Path(summary), roots)
        where[owner] = where.get(owner, 0) + 1
    for owner, count in sorted(where.items(), key=lambda item: (-item[1], item[0])):
        terminalreporter.write_line(f"  {count}  {owner}")


def _owner(summary: Path, roots: list[Path]) -> str:
    """The temporary folder a run was written in (named after its test or fixture)."""
    for root in roots:
        if summary.is_relative_to(root):
            rest = [p for p in summary.relative_to(root).parts if not p.startswith("popen-gw")]
            return f"{root.name}/{rest[0]}" if root.name == "shared-workspaces" else rest[0]
    return str(summary.parent)

"""Trained workspaces the suite builds once and copies on use, and the count of pipeline runs.

A pipeline run is the suite's dearest step (one to three minutes on this 2-core machine), so a
state several test files need ("v1 stable + v2 canary", the replays' local run) is trained once
per `make test`:

    root = shared_workspace(tmp_path_factory, "canary", build)   # built by one process only
    mine = relocated_copy(root, tmp_path / "ws")                 # this test's own copy

`shared_workspace` builds under a folder every pytest-xdist worker of the session sees (or
`$MPTFX_TEST_WORKSPACES`, which scripts/run_tests.sh sets), under a file
lock: the first worker to ask builds, the others wait and reuse it. A build that fails is
remembered, so the others fail with its message instead of training again. Tests that change a
workspace (serve, promote, retrain) take a `relocated_copy`: a workspace holds its own absolute
path (ML Metadata's artifact URIs, MLflow's artifact locations and model sources, TF Serving's
models.config, summary.json), so the copy rewrites that path to its own in every text file and
every text column of its sqlite databases, as if it had been trained where it now lies.

`pipeline_run_ids` finds the runs a session made (every summary.json naming a run that is not
a skipped retrain, the runs a relocated copy brought along left out), and tests/conftest.py
prints their number at the end of each session.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sqlite3
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

SHARED_ENV = "MPTFX_TEST_WORKSPACES"
_BUILT, _FAILED = ".built", ".failed"
_COPIED = ".relocated-copy.json"
# Written by tests/k8s_double.py's `submit` for a run made through a cluster double (the
# replays), which leaves no summary.json of its own beside a log.
REPLAYED = "replayed-run.json"


# The precision the baseline and the replays pin (they must train alike; `auto` measures,
# and under load may choose differently from one run to the next):
# MPTFX_TEST_PRECISION=mixed_bfloat16 runs them on the bfloat16 path instead of float32.
TEST_PRECISION = os.environ.get("MPTFX_TEST_PRECISION") or "float32"
# The suite's baseline pipeline (tests/conftest.py: `first_span_workspace`, the local run),
# as cron's `mptfx retrain`, the replays, the canary, distillation and the monitor's later
# spans run it: small enough for a 2-core machine (40 digits a class a span, 8 epochs),
# trained enough (eval accuracy about 0.8-0.9) that two runs' accuracies are comparable.
# Warm-started from the champion on each new span; any accuracy over 0.5 is blessed.
SMALL = ["pipeline.name=mptfx-digits", "pusher.model_name=digits", "trainer.epochs=8",
         f"trainer.precision={TEST_PRECISION}", "trainer.warm_start=true",
         "evaluator.min_accuracy=0.5", "evaluator.max_regression=1", "tflite.variants=[fp32]",
         "tflite.parity_limit=20"]

def shared_root(tmp_path_factory: pytest.TempPathFactory, create: bool = True) -> Path:
    """The folder every process of this run of the suite shares: `$MPTFX_TEST_WORKSPACES`, else
    the controller's basetemp (a pytest-xdist worker's basetemp is `<controller's>/gw<N>`)."""
    if os.environ.get(SHARED_ENV):
        root = Path(os.environ[SHARED_ENV])
    else:
        basetemp = tmp_path_factory.getbasetemp()
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        root = basetemp.parent if worker and basetemp.name.endswith(worker) else basetemp
    root = root / "shared-workspaces"
    if create:
        root.mkdir(parents=True, exist_ok=True)
    return root


def shared_workspace(tmp_path_factory: pytest.TempPathFactory, name: str,
                     build: Callable[[Path], None]) -> Path:
    """`<shared root>/<name>`, made by `build(folder)` in exactly one process of the session;
    the others block on the lock until it is built. Read it in place only; copy to change."""
    root = shared_root(tmp_path_factory)
    folder = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if (root / f"{name}{_FAILED}").exists():
            pytest.fail(f"the shared workspace {name} failed to build in another test process:"
                        f"\n{(root / f'{name}{_FAILED}').read_text()[-3000:]}")
        if not (root / f"{name}{_BUILT}").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                build(folder)
            except BaseException:
                (root / f"{name}{_FAILED}").write_text(traceback.format_exc())
                raise
            (root / f"{name}{_BUILT}").touch()
    return folder


def relocated_copy(source: Path, target: Path) -> Path:
    """A copy of the workspace `source` at `target`, with every absolute mention of `source`
    (text files, text columns of the sqlite databases) rewritten to `target`."""
    old, new = str(source.resolve()), str(target.resolve())
    shutil.copytree(source, target, symlinks=True,
                    ignore=shutil.ignore_patterns("workspace.lock"))
    for path in target.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        if path.suffix == ".db":
            _relocate_sqlite(path, old, new)
            continue
        data = path.read_bytes()
        if old.encode() in data and b"\0" not in data:
            path.write_bytes(data.replace(old.encode(), new.encode()))
    # The runs copied here were made elsewhere: pipeline_run_ids does not count them again.
    (target / _COPIED).write_text(json.dumps(
        {"from": old, "runs": sorted(pipeline_run_ids([target]))}))
    return target


def _relocate_sqlite(path: Path, old: str, new: str) -> None:
    connection = sqlite3.connect(path)
    with connection:
        tables = [row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for column in [row[1] for row in connection.execute(f'PRAGMA table_info("{table}")')]:
                connection.execute(
                    f'UPDATE "{table}" SET "{column}" = replace("{column}", ?, ?) '
                    f'WHERE typeof("{column}") = \'text\' AND instr("{column}", ?) > 0',
                    (old, new, old))
    connection.close()


def pipeline_run_ids(folders: Iterable[Path], since: float = 0.0,
                     without: Iterable[Path] = ()) -> dict[str, str]:
    """Run id → the summary.json naming it, for every pipeline run written under `folders`
    since `since` (a time.time()): each summary.json with a run id and a status, wherever the
    runner wrote it (`runs/<run id>/`, a Kubernetes driver's log folder, MLflow's copy).
    Skipped retrains, which ran no pipeline, are left out, and so are the runs a
    `relocated_copy` brought along (a run made in the copy afterwards counts), summaries
    whose run log is neither where they say nor beside them (made-up ones) and anything
    under the folders `without`."""
    found: dict[str, str] = {}
    without = list(without)
    for folder in folders:
        if not folder.is_dir():
            continue
        copied = {marker.parent: set(json.loads(marker.read_text())["runs"])
                  for marker in folder.rglob(_COPIED)}
        records = [*folder.rglob("summary.json"), *folder.rglob(REPLAYED)]
        for summary in sorted(records):
            try:
                record = json.loads(summary.read_text()) \
                    if summary.stat().st_mtime >= since else None
            except (OSError, ValueError):
                continue
            if not (isinstance(record, dict) and record.get("run_id") and "status" in record
                    and record["status"] != "skipped" and (summary.name == REPLAYED
                                                           or _has_its_log(summary, record))):
                continue
            if any(summary.is_relative_to(folder) for folder in without):
                continue
            run_id = str(record["run_id"])
            if not any(run_id in runs and summary.is_relative_to(copy)
                       for copy, runs in copied.items()):
                found.setdefault(run_id, str(summary))
    return found


def _has_its_log(summary: Path, record: dict) -> bool:
    """The run's log is where summary.json says, or beside it: a run made in the image names
    its log by the container's path (/mnt/mptfx/runs/<id>/pipeline.log)."""
    log = record.get("log_path")
    return bool(log) and (Path(log).is_file() or (summary.parent / Path(log).name).is_file())

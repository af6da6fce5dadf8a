"""The suite's trained workspaces (tests/workspaces.py): built once for every pytest-xdist
worker, copied with their own path rewritten, and the pipeline runs of a tier counted and
printed at its end ("pipeline runs: N"), on a clone of this checkout's last commit run as
`make test` runs it (`-n 2 --dist loadfile`). A probe stands in for the pipeline: it writes
summary.json files as a run does, so no run is made here."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.workspaces import SHARED_ENV, pipeline_run_ids, relocated_copy

# Two files, so two workers: each asks for the shared state; a build counter shows one build.
PROBE = '''
import json
from pathlib import Path

from tests.workspaces import relocated_copy, shared_workspace


def _run(workspace, run_id, status):
    """What a pipeline run leaves: runs/<run id>/ with its log and summary.json."""
    run = workspace / "runs" / run_id
    run.mkdir(parents=True)
    (run / "pipeline.log").write_text("a run's log")
    (run / "summary.json").write_text(json.dumps(
        {{"run_id": run_id, "status": status, "log_path": str(run / "pipeline.log")}}))


def _build(folder):
    _run(folder, "r-shared", "completed")
    with open(folder.parent / "builds.txt", "a") as builds:
        builds.write("built\\n")


def test_{name}(tmp_path_factory, tmp_path):
    shared = shared_workspace(tmp_path_factory, "probe", _build)
    mine = relocated_copy(shared, tmp_path / "ws")  # the shared run again: counts once
    assert (mine / "runs" / "r-shared" / "summary.json").exists()
    _run(tmp_path / "own", "r-{name}", "failed")
    _run(tmp_path / "skip", "r-skip-{name}", "skipped")  # a retrain with nothing to do
    # a summary whose run log is not there: made up by a test, not a run
    made_up = tmp_path / "made-up" / "runs" / "r-made-up"
    made_up.mkdir(parents=True)
    (made_up / "summary.json").write_text(json.dumps({{"run_id": "r-x", "status": "completed",
                                                      "log_path": str(made_up / "absent")}}))
    assert (shared.parent / "builds.txt").read_text() == "built\\n"
'''


@pytest.fixture
def outside():
    """A folder outside this session's temporary folders: the probes' made-up runs must not
    count as this session's."""
    folder = Path(tempfile.mkdtemp(prefix="mptfx-probe-runs-"))
    yield folder
    shutil.rmtree(folder)


def test_a_shared_workspace_is_built_once_and_every_run_counted_once(outside):
    clone = outside / "checkout"
    subprocess.run(["git", "clone", "--quiet", "--local", "--no-hardlinks", str(REPO),
                    str(clone)], check=True, timeout=120)
    for name in ("one", "two"):
        (clone / "tests" / f"test_probe_{name}.py").write_text(PROBE.format(name=name))
    subprocess.run(["git", "-C", str(clone), "add", "tests"], check=True)  # not left behind
    # A session of its own: not this one's shared folder, not this worker's identity.
    env = {name: value for name, value in os.environ.items()
           if name != SHARED_ENV and not name.startswith("PYTEST_XDIST")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
         "--dist", "loadfile", "--basetemp", str(outside / "basetemp"),
         "tests/test_probe_one.py", "tests/test_probe_two.py"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
    assert "pipeline runs: 3" in result.stdout, result.stdout
    assert "  1  shared-workspaces/probe" in result.stdout, result.stdout


def test_a_relocated_copy_names_its_own_path_in_files_and_sqlite(tmp_path):
    source = tmp_path / "trained"
    (source / "serving").mkdir(parents=True)
    (source / "serving" / "models.config").write_text(f'base_path: "{source}/serving/digits"')
    (source / "model.bin").write_bytes(b"\0" + str(source).encode())  # binary: left alone
    with sqlite3.connect(source / "metadata.db") as db:
        db.execute("CREATE TABLE Artifact (uri TEXT, payload BLOB)")
        db.execute("INSERT INTO Artifact VALUES (?, ?)",
                   (f"{source}/tfx/Trainer/model/7", str(source).encode()))
    copy = relocated_copy(source, tmp_path / "copy")
    assert (copy / "serving" / "models.config").read_text() == \
        f'base_path: "{copy}/serving/digits"'
    assert (copy / "model.bin").read_bytes() == b"\0" + str(source).encode()
    with sqlite3.connect(copy / "metadata.db") as db:
        [(uri, payload)] = db.execute("SELECT uri, payload FROM Artifact").fetchall()
    assert uri == f"{copy}/tfx/Trainer/model/7"
    assert payload == str(source).encode()  # a blob is bytes, not a path to rewrite
    assert (source / "serving" / "models.config").read_text() == \
        f'base_path: "{source}/serving/digits"'


def test_a_copy_counts_only_the_runs_made_in_it(outside):
    source = outside / "trained"
    for run_id, folder in (("r-trained", source), ("r-later", outside / "copy")):
        if folder != source:
            relocated_copy(source, folder)
        _run(folder, run_id, "completed")
    assert pipeline_run_ids([outside]) == {
        "r-trained": str(source / "runs" / "r-trained" / "summary.json"),
        "r-later": str(outside / "copy" / "runs" / "r-later" / "summary.json")}


@pytest.mark.parametrize("status", ["completed", "failed"])
def test_a_run_is_counted_whatever_its_outcome(outside, status):
    _run(outside / "ws", "r1", status)
    assert pipeline_run_ids([outside]) == {"r1": str(outside / "ws/runs/r1/summary.json")}


def test_a_run_made_in_the_image_is_counted_by_the_log_beside_its_summary(outside):
    """A run inside the container names its log by the container's path."""
    _run(outside / "ws", "r-image", "completed", logged_as="/mnt/mptfx/runs/r-image")
    assert pipeline_run_ids([outside]) == {
        "r-image": str(outside / "ws/runs/r-image/summary.json")}
    (outside / "ws/runs/r-image/pipeline.log").unlink()
    assert pipeline_run_ids([outside]) == {}


def _run(workspace: Path, run_id: str, status: str, logged_as: str = "") -> None:
    """What a pipeline run leaves: runs/<run id>/ with its log and summary.json."""
    run = workspace / "runs" / run_id
    run.mkdir(parents=True)
    (run / "pipeline.log").write_text("a run's log")
    (run / "summary.json").write_text(json.dumps(
        {"run_id": run_id, "status": status,
         "log_path": f"{logged_as or run}/pipeline.log"}))

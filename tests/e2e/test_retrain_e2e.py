"""Scheduled retraining on spans, as cron would run it: one workspace, drops arriving in turn.

span-1 → trains and pushes version 1 (two schedulers fire at once: one runs, one says
"already running"); again → "no new data", nothing runs (also after a kill -9 left the
lock); span-2 → warm-started from the champion, pushed only if blessed; span-3 with a class
the schema has never seen → ExampleValidator stops it and nothing served changes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from components.ingest.builtin_digits import export_digits
from components.run_summary import RunSummary
from tests.conftest import RUN_DIR

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]

SETTINGS = ["--set", "trainer.epochs=8", "--set", "trainer.warm_start=true",
            "--set", "evaluator.min_accuracy=0.8", "--set", "tflite.variants=[fp32]"]


def _add_span(data: Path, span: int, first: int, count: int, scratch: Path) -> None:
    """span-<span>: images first..first+count-1 of each digit class."""
    every = export_digits(scratch / "all")
    target = data / f"span-{span}"
    for class_dir in sorted(p for p in every.iterdir() if p.is_dir()):
        (target / class_dir.name).mkdir(parents=True)
        for image in sorted(class_dir.iterdir())[first:first + count]:
            shutil.copy(image, target / class_dir.name / image.name)


def _retrain_process(workspace: Path, data: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "retrain", "--workspace", str(workspace),
         "--data", str(data), "--json", *SETTINGS],
        cwd=RUN_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _executions(workspace: Path) -> int:
    with sqlite3.connect(workspace / "metadata.db") as db:
        return db.execute("SELECT COUNT(*) FROM Execution").fetchone()[0]


def _served(workspace: Path) -> list[str]:
    return sorted(p.name for p in (workspace / "serving" / "drops").iterdir())


@pytest.fixture(scope="session")
def drops(tmp_path_factory):
    root = tmp_path_factory.mktemp("retrain")
    data, workspace = root / "drops", root / "workspace"
    _add_span(data, 1, 0, 60, root)
    return root, data, workspace


@pytest.fixture(scope="session")
def first_span(drops):
    """Two schedulers fire at the same moment on span-1."""
    _, data, workspace = drops
    first, second = _retrain_process(workspace, data), _retrain_process(workspace, data)
    results = [(p.wait(timeout=900), *p.communicate()) for p in (first, second)]
    return results


def test_two_schedulers_one_trains_the_other_says_already_running(first_span):
    codes = [code for code, _, _ in first_span]
    assert codes == [0, 0], first_span
    said = [out + err for _, out, err in first_span]
    waiting = [text for text in said if "already running" in text]
    assert len(waiting) == 1, said
    assert "pid" in waiting[0] and "since" in waiting[0]


def test_first_span_trains_and_pushes_version_1(drops, first_span):
    _, _, workspace = drops
    (summary,) = [RunSummary.parse(json.loads(out)) for _, out, _ in first_span if out.strip()]
    assert summary.status == "completed" and summary.spans == [1]
    assert summary.data.span == 1
    assert summary.pushed.version == "1"
    assert _served(workspace) == ["1"]
    assert (workspace / "schema" / "drops.pbtxt")  # named after the data folder.exists()


@pytest.fixture(scope="session")
def no_new_data(drops, first_span):
    """A run killed with -9 while holding the lock, then the next scheduled run."""
    _, data, workspace = drops
    executions = _executions(workspace)
    victim = _retrain_process(workspace, data)
    lock = workspace / "retrain.lock"
    deadline = time.monotonic() + 60
    while not lock.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    after = _retrain_process(workspace, data)
    code = after.wait(timeout=600)
    out, err = after.communicate()
    return code, out, err, executions


def test_nothing_new_exits_0_and_runs_no_component(drops, no_new_data):
    _, _, workspace = drops
    code, out, err, executions_before = no_new_data
    assert code == 0, err[-2000:]
    assert "took over the lock" in err
    assert "no new data since span 1" in err
    summary = RunSummary.parse(json.loads(out))
    assert summary.status == "skipped" and summary.reason == "no new data since span 1"
    assert summary.components == {}
    assert _executions(workspace) == executions_before
    assert _served(workspace) == ["1"]


@pytest.fixture(scope="session")
def second_span(drops, no_new_data):
    root, data, workspace = drops
    _add_span(data, 2, 60, 60, root)
    process = _retrain_process(workspace, data)
    code = process.wait(timeout=900)
    out, err = process.communicate()
    return code, out, err


def test_second_span_warm_starts_from_the_champion(drops, first_span, second_span):
    code, out, err = second_span
    assert code == 0, err[-2000:]
    summary = RunSummary.parse(json.loads(out))
    assert summary.spans == [2]
    champion = [RunSummary.parse(json.loads(o)) for _, o, _ in first_span if o.strip()][0]
    assert summary.trainer.warm_started_from.startswith(champion.trainer.model_uri)
    assert summary.trainer.initial_weights_checksum == \
        champion.trainer.final_weights_checksum
    # Published only when blessed against the champion.
    _, _, workspace = drops
    assert summary.eval.baseline_accuracy is not None
    expected = ["1", "2"] if summary.eval.blessed else ["1"]
    assert _served(workspace) == expected


def test_span_with_an_unseen_class_stops_at_validation_and_changes_nothing(drops, second_span):
    root, data, workspace = drops
    _add_span(data, 3, 120, 30, root)
    stranger = data / "span-3" / "x"
    stranger.mkdir()
    for image in sorted((data / "span-3" / "4").iterdir())[:10]:
        shutil.copy(image, stranger / image.name)
    served_before = _served(workspace)
    process = _retrain_process(workspace, data)
    code = process.wait(timeout=900)
    out, err = process.communicate()
    assert code == 1, err[-2000:]
    summary = RunSummary.parse(json.loads(out))
    assert summary.failed_component == "DataValidationGate"
    assert "label_name" in summary.error
    assert "Trainer" not in summary.components
    assert _served(workspace) == served_before

"""Scheduled retraining on spans, as cron would run it: one workspace, drops arriving in turn.

It starts from a copy of the suite's first-span workspace (tests/conftest.py; the monitor's
tests start from it too), where `mptfx retrain` on an empty workspace trained span-1 and
pushed version 1. span-2 arrives and two
schedulers fire at once: one trains it, warm-started from the champion, and pushes it only if
blessed; the other says "already running". Again → "no new data", nothing runs (also after a
kill -9 left the lock); span-3 with a class the schema has never seen → ExampleValidator stops
it and nothing served changes.
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

from components.run_summary import RunSummary
from tests.conftest import RUN_DIR, SPAN_PER_CLASS, SPAN_SETTINGS, add_span, set_args
from tests.workspaces import relocated_copy

pytestmark = pytest.mark.e2e

SETTINGS = set_args(*SPAN_SETTINGS)


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
    return sorted(p.name for p in (workspace / "serving" / "digits").iterdir()
                  if p.name.isdigit())


@pytest.fixture(scope="session")
def drops(first_span_workspace, tmp_path_factory):
    """(folder, drops, workspace, the first span's summary) of a copy of the first-span
    folder."""
    root = relocated_copy(first_span_workspace, tmp_path_factory.mktemp("retrain") / "spans")
    [first] = [RunSummary.read(path) for path in (root / "ws").glob("runs/*/summary.json")]
    return root, root / "drops", root / "ws", first


def test_the_first_retrain_trained_span_1_and_pushed_version_1(drops):
    _, _, workspace, first = drops
    assert first.status == "completed" and first.spans == [1]
    assert first.data.span == 1
    assert first.pushed.version == "1"
    assert Path(first.pushed.path) == workspace / "serving" / "digits" / "1"
    assert Path(first.pushed.path, "saved_model.pb").exists()


@pytest.fixture(scope="session")
def second_span(drops):
    """span-2 arrives, and two schedulers fire at the same moment."""
    root, data, workspace, _ = drops
    add_span(root, 2, SPAN_PER_CLASS)
    first, second = _retrain_process(workspace, data), _retrain_process(workspace, data)
    return [(p.wait(timeout=900), *p.communicate()) for p in (first, second)]


def test_two_schedulers_one_trains_the_other_says_already_running(second_span):
    codes = [code for code, _, _ in second_span]
    assert codes == [0, 0], second_span
    said = [out + err for _, out, err in second_span]
    waiting = [text for text in said if "already running" in text]
    assert len(waiting) == 1, said
    assert "pid" in waiting[0] and "since" in waiting[0]


def test_second_span_warm_starts_from_the_champion(drops, second_span):
    _, _, workspace, champion = drops
    (summary,) = [RunSummary.parse(json.loads(out)) for _, out, _ in second_span if out.strip()]
    assert summary.status == "completed" and summary.spans == [2]
    assert summary.trainer.warm_started_from.startswith(champion.trainer.model_uri)
    assert summary.trainer.initial_weights_checksum == \
        champion.trainer.final_weights_checksum
    # Published only when blessed against the champion.
    assert summary.eval.baseline_accuracy is not None
    expected = ["1", "2"] if summary.eval.blessed else ["1"]
    assert _served(workspace) == expected


@pytest.fixture(scope="session")
def no_new_data(drops, second_span):
    """A run killed with -9 while holding the lock, then the next scheduled run."""
    _, data, workspace, _ = drops
    executions = _executions(workspace)
    served = _served(workspace)
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
    return code, out, err, executions, served


def test_nothing_new_exits_0_and_runs_no_component(drops, no_new_data):
    _, _, workspace, _ = drops
    code, out, err, executions_before, served_before = no_new_data
    assert code == 0, err[-2000:]
    assert "took over the lock" in err
    assert "no new data since span 2" in err
    summary = RunSummary.parse(json.loads(out))
    assert summary.status == "skipped" and summary.reason == "no new data since span 2"
    assert summary.components == {}
    assert _executions(workspace) == executions_before
    assert _served(workspace) == served_before


def test_span_with_an_unseen_class_stops_at_validation_and_changes_nothing(drops, no_new_data):
    root, data, workspace, _ = drops
    add_span(root, 3, 2 * SPAN_PER_CLASS, 30)
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

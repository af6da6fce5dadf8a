"""End to end: from served traffic back to training, and scheduled retraining on spans, in
one workspace: a copy of the suite's first-span folder (tests/conftest.py), where `mptfx
retrain` on an empty workspace trained span-1 and pushed version 1 with its monitoring
reference.

TF Serving's binary cannot be installed here, so the TF Serving REST double
(tests/tf_serving_double.py) serves that real SavedModel at TF Serving's REST boundary; the
real request logger (the serving pod's sidecar) sits in front of it and writes the
PredictionLogs, as in the cluster. Each scenario replays a few dozen images into a request
log of its own and `mptfx monitor` (the CLI's `main`, in this process: a new process spends
seconds importing TensorFlow) judges it:

- the eval split's images: no drift, exit 0;
- the same images darkened and resized: drift naming brightness and size, exit 4;
- images of one class only: drift in the predicted-class distribution, exit 4;
- `--retrain-on-drift` without a new span reports and does not retrain.

Then the drops go on, as cron and the monitor meet them. span-2 arrives while traffic has
drifted: `mptfx monitor --retrain-on-drift` trains it, warm-started from the champion, pushes
it only if blessed, and summary.json and the MLflow run say `trigger: drift`; cron's `mptfx
retrain`, firing while it holds the lock, says "already running". Again → "no new data",
nothing runs (also after a kill -9 left the lock); span-3 with a class the schema has never
seen → ExampleValidator stops it and nothing served changes. (One retraining of span-2 serves
both the monitor's and the scheduler's checks: the suite trains each state once.)
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from components.errors import EXIT_DRIFT, EXIT_OK
from components.run_summary import RunSummary
from tests.conftest import RUN_DIR, SPAN_PER_CLASS, CliResult, add_span, set_args
from tests.tf_serving_double import serve_models
from tests.workspaces import SMALL, relocated_copy

pytestmark = pytest.mark.e2e

def _read_split(examples_uri: str, split: str) -> list[bytes]:
    import tensorflow as tf

    from components.examples_format import COMPRESSION, split_pattern

    files = tf.io.gfile.glob(split_pattern(examples_uri, split))
    return list(tf.data.TFRecordDataset(files, compression_type=COMPRESSION)
                .as_numpy_iterator())


@pytest.fixture(scope="module")
def deployed(first_span_workspace, tmp_path_factory):
    """A copy of the suite's first-span folder (tests/conftest.py): version 1, trained on
    span-1 and pushed (stable), its drops and every digit beside it."""
    root = relocated_copy(first_span_workspace, tmp_path_factory.mktemp("monitor") / "spans")
    [summary] = [RunSummary.read(path) for path in (root / "ws").glob("runs/*/summary.json")]
    return {"root": root, "workspace": root / "ws", "data": root / "drops",
            "every": root / "all", "summary": summary,
            "eval": _read_split(summary.data.examples_uri, "eval")}


@pytest.fixture(scope="module")
def tf_serving(deployed):
    with serve_models(deployed["workspace"] / "serving", "digits") as server:
        yield server.url


def _replay(tf_serving: str, deployed: dict, name: str, examples: list[bytes]) -> Path:
    """Send `examples` (serialized tf.Examples) through the request logger in front of the
    double, every call logged; returns the request log folder."""
    import requests

    from components.monitor.proxy import RequestLogger

    log_dir = deployed["root"] / "logs" / name
    logger = RequestLogger(tf_serving, deployed["workspace"] / "serving", log_dir, 1.0)
    with logger.running() as url:
        for start in range(0, len(examples), 5):
            body = {"signature_name": "serving_default", "inputs": {"examples": [
                {"b64": base64.b64encode(e).decode()} for e in examples[start:start + 5]]}}
            reply = requests.post(f"{url}/v1/models/digits/labels/stable:predict", json=body,
                                  timeout=120)
            assert reply.status_code == 200, reply.text
    assert logger.logged == -(-len(examples) // 5)
    return log_dir


def _example(png: bytes) -> bytes:
    """What a client sends to serving_default: a tf.Example holding the encoded image."""
    import tensorflow as tf

    return tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png]))})
    ).SerializeToString()


def _darkened_and_resized(serialized: bytes) -> bytes:
    import tensorflow as tf

    png = tf.train.Example.FromString(serialized).features.feature["image"].bytes_list.value[0]
    pixels = np.asarray(Image.open(io.BytesIO(png)))
    changed = Image.fromarray((pixels * 0.4).astype(np.uint8)).resize((16, 16))
    out = io.BytesIO()
    changed.save(out, format="PNG")
    return _example(out.getvalue())


def _monitor_argv(deployed: dict, log_dir: Path, *args: str) -> list[str]:
    """`mptfx monitor`'s arguments judging the request log `log_dir` in the workspace, with
    the spans' settings (a retraining it starts trains as cron's would)."""
    return ["monitor", "--workspace", str(deployed["workspace"]),
            *set_args(f"serving.request_log.dir={log_dir}", *SMALL), *args]


def _served(workspace: Path) -> list[str]:
    return sorted(p.name for p in (workspace / "serving" / "digits").iterdir()
                  if p.name.isdigit())


def monitor(capfd, deployed: dict, log_dir: Path, *args: str) -> CliResult:
    """`mptfx monitor` through the CLI's main, its lines captured at the file descriptors
    (a retraining it starts prints through them)."""
    from pipelines.cli import main

    capfd.readouterr()
    code = main(_monitor_argv(deployed, log_dir, *args))
    out, err = capfd.readouterr()
    return CliResult(code, out, err)


def _report_folder(result: CliResult) -> Path:
    [line] = [ln for ln in result.stdout.splitlines() if ln.startswith("mptfx monitor: report ")]
    return Path(line.split()[-1]).parent


def _report_json(result: CliResult) -> dict:
    return json.loads((_report_folder(result) / "report.json").read_text())


def _metric(deployed: dict, name: str) -> list[float]:
    from mlflow import MlflowClient

    uri = f"sqlite:///{deployed['workspace']}/mlflow.db"
    history = MlflowClient(tracking_uri=uri).get_metric_history(
        deployed["summary"].mlflow.run_id, name)
    return [m.value for m in history]


@pytest.fixture(scope="module")
def eval_log(tf_serving, deployed):
    return _replay(tf_serving, deployed, "eval", deployed["eval"])


@pytest.fixture(scope="module")
def drifted_log(tf_serving, deployed):
    return _replay(tf_serving, deployed, "dark",
                   [_darkened_and_resized(e) for e in deployed["eval"]])


def test_eval_split_traffic_has_not_drifted(capfd, deployed, eval_log):
    images = len(deployed["eval"])
    result = monitor(capfd, deployed, eval_log, "--set", "monitor.min_images=40")
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert f"mptfx monitor: version 1: {images} images, no drift" in result.stdout
    report = _report_json(result)
    assert report["drifted"] is False and report["versions"][0]["moved"] == []
    drift = report["versions"][0]["measurements"]["drift"]
    assert drift["brightness"]["value"] == 0.0  # the very images of the reference
    assert _metric(deployed, "monitor/drifted")[-1] == 0.0
    assert _metric(deployed, "monitor/images")[-1] == images


def test_too_little_traffic_is_not_enough_traffic_not_drift(capfd, deployed, eval_log):
    images = len(deployed["eval"])
    result = monitor(capfd, deployed, eval_log)  # monitor.min_images 100 by default
    assert result.returncode == EXIT_OK
    assert (f"mptfx monitor: version 1: {images} images, not enough traffic ({images} logged "
            f"images < monitor.min_images 100)") in result.stdout


def test_darkened_and_resized_images_drift_in_brightness_and_size(capfd, deployed,
                                                                  drifted_log):
    result = monitor(capfd, deployed, drifted_log, "--set", "monitor.min_images=40")
    assert result.returncode == EXIT_DRIFT, result.stdout + result.stderr
    [line] = [ln for ln in result.stdout.splitlines() if ln.startswith("mptfx monitor: version")]
    drift = line.split("drift in ")[1].split("; skew in ")[0]
    for feature in ("brightness (JSD", "height (JSD", "width (JSD"):
        assert feature in drift, line
    report = _report_json(result)
    assert {"brightness", "height", "width"} <= set(report["versions"][0]["moved"])
    folder = _report_folder(result)
    assert folder.parent == deployed["workspace"] / "monitor"
    assert "| brightness |" in (folder / "report.md").read_text()
    assert (folder / "distributions.png").stat().st_size > 10_000
    assert _metric(deployed, "monitor/drifted")[-1] == 1.0
    assert _metric(deployed, "monitor/drift/brightness")[-1] > 0.9


def test_images_of_one_class_drift_in_the_predicted_class(capfd, tf_serving, deployed):
    unseen_threes = sorted((deployed["every"] / "3").iterdir())[SPAN_PER_CLASS:2 * SPAN_PER_CLASS]
    log_dir = _replay(tf_serving, deployed, "threes",
                      [_example(p.read_bytes()) for p in unseen_threes])
    result = monitor(capfd, deployed, log_dir, "--set", "monitor.min_images=40")
    assert result.returncode == EXIT_DRIFT, result.stdout + result.stderr
    [line] = [ln for ln in result.stdout.splitlines() if ln.startswith("mptfx monitor: version")]
    drift = line.split("drift in ")[1].split("; skew in ")[0]
    assert "predicted_class (L-inf" in drift, line  # confidence may drift too, listed first
    measured = _report_json(result)["versions"][0]["measurements"]["drift"]["predicted_class"]
    # How far class 3's share moves depends on how well the 8-epoch, 400-image model knows
    # threes: 0.40 to over 0.5 measured across machines and precisions; above
    # monitor.drift.l_infinity (0.2) either way.
    assert measured["moved"] and measured["value"] > 0.3, measured


def test_a_truncated_log_file_is_skipped_with_one_line_naming_it(capfd, deployed, eval_log):
    copied = deployed["root"] / "logs" / "eval-and-torn"
    shutil.copytree(eval_log, copied)
    [day] = list((copied / "digits").iterdir())
    [whole] = list(day.iterdir())
    torn = day / "requests-killed.tfrecord"
    torn.write_bytes(whole.read_bytes()[:-9])
    result = monitor(capfd, deployed, copied, "--set", "monitor.min_images=40")
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    [warning] = [ln for ln in result.stderr.splitlines() if str(torn) in ln]
    assert warning.startswith(f"mptfx monitor: warning: skipped {torn}: truncated or corrupt")
    # The whole records of both files count: every image but those of the torn last call.
    images = len(deployed["eval"])
    last_call = images % 5 or 5
    assert f"version 1: {2 * images - last_call} images, no drift" in result.stdout


def _run_files(deployed: dict) -> set[Path]:
    return set(deployed["workspace"].glob("runs/*/summary.json"))


def _runs_since(deployed: dict, before: set[Path]) -> list[RunSummary]:
    """The runs written after `before` was taken. Not by sorting run ids: two started in
    the same second sort by their random suffix."""
    return [RunSummary.read(p) for p in sorted(_run_files(deployed) - before)]


def test_drift_without_a_new_span_is_reported_and_not_retrained(capfd, deployed, drifted_log):
    before = _run_files(deployed)
    result = monitor(capfd, deployed, drifted_log, "--set", "monitor.min_images=40",
                     "--retrain-on-drift", "--data", str(deployed["data"]))
    assert result.returncode == EXIT_DRIFT, result.stdout + result.stderr
    assert ("mptfx monitor: drift reported, not retrained: no new data since span 1"
            in result.stdout)
    [skipped] = _runs_since(deployed, before)
    assert skipped.status == "skipped" and skipped.components == {}
    assert skipped.trigger.kind == "drift" and "brightness" in skipped.trigger.features
    assert _served(deployed["workspace"]) == ["1"]


def _mptfx_process(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli", *args], cwd=RUN_DIR,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _retrain_process(deployed: dict) -> subprocess.Popen:
    """`mptfx retrain` as cron starts it."""
    return _mptfx_process("retrain", "--workspace", str(deployed["workspace"]), "--data",
                          str(deployed["data"]), "--json", *set_args(*SMALL))


def _finished(process: subprocess.Popen, timeout: float = 900) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def _wait_for_the_lock(deployed: dict, holder: subprocess.Popen) -> None:
    """Until `holder` holds the workspace's retrain lock (its holder's line written)."""
    lock = deployed["workspace"] / "retrain.lock"
    deadline = time.monotonic() + 600
    while not (lock.exists() and lock.read_text().strip()):
        assert holder.poll() is None, _finished(holder)
        assert time.monotonic() < deadline, "the retraining never took the lock"
        time.sleep(0.05)


def _executions(workspace: Path) -> int:
    with sqlite3.connect(workspace / "metadata.db") as db:
        return db.execute("SELECT COUNT(*) FROM Execution").fetchone()[0]


@pytest.fixture(scope="module")
def span_2(deployed, drifted_log):
    """span-2 arrives while traffic has drifted: `mptfx monitor --retrain-on-drift` starts
    the retraining, and cron's `mptfx retrain` fires while that holds the lock. The runs
    written meanwhile, and each command's (exit code, stdout, stderr)."""
    add_span(deployed["root"], 2, SPAN_PER_CLASS)
    before = _run_files(deployed)
    drift = _mptfx_process(*_monitor_argv(deployed, drifted_log, "--set", "monitor.min_images=40",
                                          "--retrain-on-drift", "--data", str(deployed["data"])))
    _wait_for_the_lock(deployed, drift)
    cron = _retrain_process(deployed)
    scheduled = _finished(cron)
    drifted = _finished(drift)
    return {"runs": _runs_since(deployed, before), "drift": drifted, "scheduled": scheduled}


def test_drift_with_a_new_span_retrains_and_says_trigger_drift(deployed, span_2):
    from mlflow import MlflowClient

    code, out, err = span_2["drift"]
    assert code == EXIT_DRIFT, out + err
    [retrained] = span_2["runs"]
    assert retrained.status == "completed", retrained.error
    assert retrained.spans == [2] and retrained.pushed.version == "2"
    trigger = retrained.trigger
    assert trigger.kind == "drift" and trigger.versions == [1]
    assert {"brightness", "height", "width"} <= set(trigger.features)
    assert Path(trigger.report).name == "report.md" and Path(trigger.report).exists()
    uri = f"sqlite:///{deployed['workspace']}/mlflow.db"
    tags = MlflowClient(tracking_uri=uri).get_run(retrained.mlflow.run_id).data.tags
    assert tags["mptfx.trigger"] == "drift"
    assert set(tags["mptfx.trigger.features"].split(",")) == set(trigger.features)
    # The new version carries its own reference, for tomorrow's judgement.
    assert (deployed["workspace"] / "serving" / "digits" / "2" / "assets.extra" /
            "mptfx_monitor" / "reference.json").exists()


def test_the_first_retrain_trained_span_1_and_pushed_version_1(deployed):
    first, workspace = deployed["summary"], deployed["workspace"]
    assert first.status == "completed" and first.spans == [1]
    assert first.data.span == 1
    assert first.pushed.version == "1"
    assert Path(first.pushed.path) == workspace / "serving" / "digits" / "1"
    assert Path(first.pushed.path, "saved_model.pb").exists()


def test_a_scheduled_retrain_while_another_trains_says_already_running(span_2):
    """Two schedulers at once (here the monitor's drift and cron): one trains, the other
    exits 0 naming the holder and runs nothing."""
    code, out, err = span_2["scheduled"]
    assert code == 0, err[-2000:]
    assert "mptfx retrain: already running (" in err and "nothing to do" in err
    assert "pid" in err and "since" in err
    assert out.strip() == "" and len(span_2["runs"]) == 1


def test_second_span_warm_starts_from_the_champion(deployed, span_2):
    workspace, champion = deployed["workspace"], deployed["summary"]
    [summary] = span_2["runs"]
    assert summary.status == "completed" and summary.spans == [2]
    assert summary.trainer.warm_started_from.startswith(champion.trainer.model_uri)
    assert summary.trainer.initial_weights_checksum == \
        champion.trainer.final_weights_checksum
    # Published only when blessed against the champion.
    assert summary.eval.baseline_accuracy is not None
    expected = ["1", "2"] if summary.eval.blessed else ["1"]
    assert _served(workspace) == expected


@pytest.fixture(scope="module")
def no_new_data(deployed, span_2):
    """A run killed with -9 while holding the lock, then the next scheduled run."""
    workspace = deployed["workspace"]
    executions = _executions(workspace)
    served = _served(workspace)
    victim = _retrain_process(deployed)
    _wait_for_the_lock(deployed, victim)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    code, out, err = _finished(_retrain_process(deployed), timeout=600)
    return code, out, err, executions, served


def test_nothing_new_exits_0_and_runs_no_component(deployed, no_new_data):
    workspace = deployed["workspace"]
    code, out, err, executions_before, served_before = no_new_data
    assert code == 0, err[-2000:]
    assert "took over the lock" in err
    assert "no new data since span 2" in err
    summary = RunSummary.parse(json.loads(out))
    assert summary.status == "skipped" and summary.reason == "no new data since span 2"
    assert summary.components == {}
    assert _executions(workspace) == executions_before
    assert _served(workspace) == served_before


def test_span_with_an_unseen_class_stops_at_validation_and_changes_nothing(deployed,
                                                                           no_new_data):
    root, data, workspace = deployed["root"], deployed["data"], deployed["workspace"]
    add_span(root, 3, 2 * SPAN_PER_CLASS, 30)
    stranger = data / "span-3" / "x"
    stranger.mkdir()
    for image in sorted((data / "span-3" / "4").iterdir())[:10]:
        shutil.copy(image, stranger / image.name)
    served_before = _served(workspace)
    code, out, err = _finished(_retrain_process(deployed))
    assert code == 1, err[-2000:]
    summary = RunSummary.parse(json.loads(out))
    assert summary.failed_component == "DataValidationGate"
    assert "label_name" in summary.error
    assert "Trainer" not in summary.components
    assert _served(workspace) == served_before

"""Crashes and races leave no damage; no password leaks (docs/RELIABILITY.md).

One workspace, one data folder and one real `mlflow server` on 127.0.0.1 (sqlite backend)
whose URI carries `alice:<password>` are shared by every run here, so the whole file costs
about a dozen small pipeline runs. Each kill is `MPTFX_FAULT=<point>` (components/faults.py):
the run `os._exit`s at that point as abruptly as `kill -9`, with no cleanup.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from components.ingest.builtin_digits import export_digits
from tests.conftest import RUN_DIR
from tests.ports import free_port

# Twelve pipeline runs (six killed, six recoveries): `make test-faults`, not `make test`,
# which must stay within CI's time budget on a 2-core machine.
pytestmark = [pytest.mark.e2e, pytest.mark.faults]

REPO = Path(__file__).resolve().parents[2]
PASSWORD = f"pw-{secrets.token_hex(8)}"
KILLED = 137
# Tiny and always blessed: the tests are about what survives a crash, not accuracy.
FAST = ["--set", "trainer.epochs=3", "--set", "trainer.batch_size=16",
        "--set", "evaluator.min_accuracy=0", "--set", "evaluator.max_regression=1",
        "--set", "tflite.variants=[fp32, fp16]", "--set", "tflite.representative_samples=8",
        "--set", "tracking.required=true"]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real MLflow server; its whole storage is scanned for the password afterwards."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    with open(root / "server.log", "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port",
             str(port), "--workers", "1", "--backend-store-uri", f"sqlite:///{root / 'db'}",
             "--artifacts-destination", str(root / "artifacts")],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 240
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                break
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, \
                (root / "server.log").read_text()[-2000:]
            time.sleep(0.5)
    yield root, f"http://alice:{PASSWORD}@127.0.0.1:{port}"
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=60)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return export_digits(tmp_path_factory.mktemp("data") / "digits", per_class=8)


def _tree_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _command(workspace: Path, data: Path, uri: str, seed: int) -> list[str]:
    return [sys.executable, "-m", "pipelines.cli", "run", "--workspace", str(workspace),
            "--data", str(data), *FAST, "--set", f"trainer.seed={seed}",
            "--set", f"tracking.uri={uri}"]


def _run(command: list[str], fault: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("MPTFX_FAULT", None)
    if fault:
        env["MPTFX_FAULT"] = fault
    return subprocess.run(command, cwd=RUN_DIR, env=env, capture_output=True, text=True,
                          timeout=1200)


def _whole_serving_versions(serving: Path) -> list[int]:
    """Every integer folder TF Serving would load is a complete, loadable SavedModel."""
    import tensorflow as tf

    versions = sorted(int(p.name) for p in serving.iterdir() if p.name.isdigit())
    for version in versions:
        folder = serving / str(version)
        assert (folder / "saved_model.pb").is_file(), folder
        assert (folder / "variables" / "variables.index").is_file(), folder
        assert tf.saved_model.load(str(folder)).signatures["serving_default"] is not None
    # Anything else is hidden (staging, reservations), which TF Serving ignores.
    assert all(p.name.isdigit() or p.name.startswith(".") for p in serving.iterdir())
    return versions


def _whole_tflite_versions(tflite: Path) -> None:
    for folder in (p for p in tflite.iterdir() if p.name.isdigit()):
        names = sorted(p.name for p in folder.iterdir())
        assert names == ["fp16.tflite", "fp32.tflite", "labels.txt"], (folder, names)
    assert all(p.name.isdigit() or p.name.startswith(".") for p in tflite.iterdir())


@pytest.fixture(scope="module")
def crash_runs(tmp_path_factory, data, mlflow_server):
    """Kill a run at each fault point, then run again; collect what each step left."""
    workspace = tmp_path_factory.mktemp("workspace")
    _, uri = mlflow_server
    data_hash = _tree_hash(data)
    steps = []
    # A new seed per pair makes the Trainer (and what follows) run again rather than come
    # from TFX's cache, so every fault point is reached.
    for seed, fault in enumerate(["ingest", "epoch", "checkpoint", "push-copy",
                                  "before-tflite", "tflite"]):
        command = _command(workspace, data, uri, seed)
        killed = _run(command, fault)
        recovered = _run(command)
        steps.append((fault, killed, recovered, _tree_hash(data)))
    return workspace, data_hash, steps


def test_after_each_kill_the_next_run_completes_and_only_whole_versions_are_served(crash_runs):
    workspace, data_hash, steps = crash_runs
    serving = workspace / "serving" / "digits"
    for fault, killed, recovered, data_hash_after in steps:
        assert killed.returncode == KILLED, (fault, killed.stderr[-2000:])
        assert "Traceback" not in killed.stdout + killed.stderr
        assert recovered.returncode == 0, (fault, recovered.stderr[-3000:])
        assert "Traceback" not in recovered.stdout + recovered.stderr
        assert data_hash_after == data_hash, f"the data folder changed after {fault}"
    versions = _whole_serving_versions(serving)
    # One version per seed, the newest pusher.keep_versions (5) kept; the number a killed
    # push had reserved is skipped, so they need not be consecutive.
    assert len(versions) == 5 and versions == sorted(set(versions))
    tflite = workspace / "tflite" / "digits"
    _whole_tflite_versions(tflite)
    # Every served version got its TF Lite variants, also those whose export was killed.
    assert sorted(int(p.name) for p in tflite.iterdir() if p.name.isdigit()) == versions


def test_second_concurrent_run_exits_0_naming_the_holder(crash_runs, data, mlflow_server):
    workspace = crash_runs[0]
    _, uri = mlflow_server
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("MPTFX_FAULT", None)
    first = subprocess.Popen(_command(workspace, data, uri, 99), cwd=RUN_DIR, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = workspace / "workspace.lock"
    deadline = time.monotonic() + 120
    while not (lock.exists() and f'"pid": {first.pid}' in lock.read_text()):
        assert first.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    second = _run(_command(workspace, data, uri, 98))
    out, err = first.communicate(timeout=1200)
    assert first.returncode == 0, err[-3000:]
    assert second.returncode == 0
    assert f"workspace {workspace} is in use by another run" in second.stdout
    assert f"pid {first.pid} on {socket.gethostname()}" in second.stdout
    assert "Traceback" not in second.stdout + second.stderr + out + err


def test_the_tracking_password_is_nowhere(crash_runs, mlflow_server):
    workspace, _, steps = crash_runs
    server_root, uri = mlflow_server
    outputs = [text for _, killed, recovered, _ in steps
               for text in (killed.stdout, killed.stderr, recovered.stdout, recovered.stderr)]
    assert all(PASSWORD not in text for text in outputs)
    # The runs were recorded on the server, under the redacted URI.
    summaries = [json.loads(p.read_text()) for p in (workspace / "runs").glob("*/summary.json")]
    recorded = [s["mlflow"] for s in summaries if s.get("mlflow", {}).get("run_id")]
    assert len(recorded) >= 6
    assert all(m["tracking_uri"] == uri.replace(f":{PASSWORD}", "") for m in recorded)
    # Every byte the workspace, its logs and the MLflow server stored: params, tags,
    # metrics, model registry, artifacts (summary.json, model card), sqlite pages.
    leaks = [str(path) for root in (workspace, server_root) for path in root.rglob("*")
             if path.is_file() and PASSWORD.encode() in path.read_bytes()]
    assert leaks == []
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert runs and all(PASSWORD not in json.dumps(run.to_dictionary()) for run in runs)
    assert any(run.data.params.get("config.tracking.uri", "").startswith("http://alice@")
               for run in runs)

"""Served traffic drifts, a new span arrives, the retraining goes out as a canary: the suite's
second shared state (tests/conftest.py: `drift_canary_folder`, whose workspace is the
`canary_workspace`), and the steps tests/e2e/test_monitor_e2e.py takes the same way.

A spans folder is what tests/conftest.py's `first_span_workspace` holds: <root>/all (every
digit as a PNG), <root>/drops/span-<N> and <root>/ws, the workspace cron's `mptfx retrain`
trains; request logs go to <root>/logs/<name>.

`build_drift_canary(root, first_span)`, in a copy of the first span's folder (version 1
stable, champion):
1. the eval split's images, darkened and resized, are sent to version 1 through the real
   request logger in front of the TF Serving REST double (tests/tf_serving_double.py: TF
   Serving's binary cannot be installed here), which answers from the real SavedModel;
2. span-2 arrives, and `mptfx monitor --retrain-on-drift` judges the log, finds drift and
   retrains on span-2, warm-started from the champion, with `pusher.rollout: canary`: version
   2 goes out as canary (MLflow challenger), version 1 stays stable (champion);
3. cron's `mptfx retrain` fires while the monitor's retraining holds the lock.
What each command said and the runs it made are kept in <root>/span-2.json (`drift_record`).
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

from components.run_summary import RunSummary
from tests.conftest import RUN_DIR, SPAN_PER_CLASS, add_span, set_args
from tests.tf_serving_double import serve_models
from tests.workspaces import SMALL, relocated_copy

# The canary: SMALL's retraining of a new span, labelled canary by the Pusher.
CANARY = [*SMALL, "pusher.rollout=canary"]
_RECORD = "span-2.json"


def read_split(examples_uri: str, split: str) -> list[bytes]:
    """The serialized tf.Examples of one split the Ingest wrote."""
    import tensorflow as tf

    from components.examples_format import COMPRESSION, split_pattern

    files = tf.io.gfile.glob(split_pattern(examples_uri, split))
    return list(tf.data.TFRecordDataset(files, compression_type=COMPRESSION)
                .as_numpy_iterator())


def first_summary(workspace: Path) -> RunSummary:
    """The workspace's first run (version 1): its runs sort by the time in their ids."""
    return RunSummary.read(sorted(workspace.glob("runs/*/summary.json"))[0])


def replay_requests(tf_serving: str, workspace: Path, log_dir: Path,
                    examples: list[bytes]) -> Path:
    """Send `examples` (serialized tf.Examples) to model `digits`'s stable label through the
    request logger in front of `tf_serving`, every call logged into `log_dir`."""
    import requests

    from components.monitor.proxy import RequestLogger

    logger = RequestLogger(tf_serving, workspace / "serving", log_dir, 1.0)
    with logger.running() as url:
        for start in range(0, len(examples), 5):
            body = {"signature_name": "serving_default", "inputs": {"examples": [
                {"b64": base64.b64encode(e).decode()} for e in examples[start:start + 5]]}}
            reply = requests.post(f"{url}/v1/models/digits/labels/stable:predict", json=body,
                                  timeout=120)
            assert reply.status_code == 200, reply.text
    assert logger.logged == -(-len(examples) // 5)
    return log_dir


def example(png: bytes) -> bytes:
    """What a client sends to serving_default: a tf.Example holding the encoded image."""
    import tensorflow as tf

    return tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png]))})
    ).SerializeToString()


def darkened_and_resized(serialized: bytes) -> bytes:
    """The example's image at 40 % brightness and 16x16 (the digits are 8x8)."""
    import tensorflow as tf

    png = tf.train.Example.FromString(serialized).features.feature["image"].bytes_list.value[0]
    pixels = np.asarray(Image.open(io.BytesIO(png)))
    changed = Image.fromarray((pixels * 0.4).astype(np.uint8)).resize((16, 16))
    out = io.BytesIO()
    changed.save(out, format="PNG")
    return example(out.getvalue())


def monitor_argv(workspace: Path, log_dir: Path, *args: str,
                 settings: list[str] = SMALL) -> list[str]:
    """`mptfx monitor`'s arguments judging the request log `log_dir` in the workspace, with
    the spans' settings (a retraining it starts trains as cron's would)."""
    return ["monitor", "--workspace", str(workspace),
            *set_args(f"serving.request_log.dir={log_dir}", *settings), *args]


def mptfx_process(*args: str) -> subprocess.Popen:
    """`mptfx ARGS` started as a user's shell or cron starts it, output piped."""
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli", *args], cwd=RUN_DIR,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def retrain_process(root: Path, settings: list[str] = SMALL) -> subprocess.Popen:
    """`mptfx retrain` of the spans folder as cron starts it."""
    return mptfx_process("retrain", "--workspace", str(root / "ws"), "--data",
                         str(root / "drops"), "--json", *set_args(*settings))


def finished(process: subprocess.Popen, timeout: float = 900) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def wait_for_the_lock(workspace: Path, holder: subprocess.Popen) -> None:
    """Until `holder` holds the workspace's retrain lock (its holder's line written)."""
    lock = workspace / "retrain.lock"
    deadline = time.monotonic() + 600
    while not (lock.exists() and lock.read_text().strip()):
        assert holder.poll() is None, finished(holder)
        assert time.monotonic() < deadline, "the retraining never took the lock"
        time.sleep(0.05)


def run_files(workspace: Path) -> set[Path]:
    return set(workspace.glob("runs/*/summary.json"))


def runs_since(workspace: Path, before: set[Path]) -> list[RunSummary]:
    """The runs written after `before` was taken. Not by sorting run ids: two started in
    the same second sort by their random suffix."""
    return [RunSummary.read(p) for p in sorted(run_files(workspace) - before)]


def build_drift_canary(root: Path, first_span: Path) -> None:
    """The shared state of this module's docstring, built in the empty folder `root`."""
    root.rmdir()
    relocated_copy(first_span, root)
    workspace = root / "ws"
    darkened = [darkened_and_resized(e)
                for e in read_split(first_summary(workspace).data.examples_uri, "eval")]
    with serve_models(workspace / "serving", "digits") as server:
        log_dir = replay_requests(server.url, workspace, root / "logs" / "dark", darkened)
    add_span(root, 2, SPAN_PER_CLASS)
    before = run_files(workspace)
    drift = mptfx_process(*monitor_argv(workspace, log_dir, "--set", "monitor.min_images=40",
                                        "--retrain-on-drift", "--data", str(root / "drops"),
                                        settings=CANARY))
    wait_for_the_lock(workspace, drift)
    scheduled = finished(retrain_process(root, CANARY))
    drifted = finished(drift)
    runs = sorted(run_files(workspace) - before)
    (root / _RECORD).write_text(json.dumps({
        "drift": drifted, "scheduled": scheduled,
        "runs": [str(path.relative_to(root)) for path in runs]}))
    [retrained] = [RunSummary.read(path) for path in runs]
    assert retrained.pushed.label == "canary" and retrained.pushed.version == "2", \
        (retrained.error, drifted[2][-3000:])


def drift_record(root: Path) -> dict:
    """What `build_drift_canary` kept: each command's (exit code, stdout, stderr) and the runs
    it made (RunSummary)."""
    record = json.loads((root / _RECORD).read_text())
    return {"drift": tuple(record["drift"]), "scheduled": tuple(record["scheduled"]),
            "runs": [RunSummary.read(root / path) for path in record["runs"]]}

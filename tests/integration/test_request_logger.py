"""The request logger (the serving pod's sidecar) in front of TF Serving's REST API.

TF Serving's binary cannot be installed here, so the TF Serving REST double
(tests/tf_serving_double.py) stands in for it at its REST boundary: it answers from a real
SavedModel through the real models.config. The logger under test is the real one, in this
process and, for the command, as the `mptfx request-logger` process. The SavedModel is a
two-class stand-in written by the test (dark / bright by mean pixel): the logger only needs
its signatures; the trained model's turn is tests/e2e/test_monitor_e2e.py.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import requests
from PIL import Image

from components.monitor.proxy import RequestLogger
from components.monitor.request_log import read_window
from components.monitor.traffic import rows_of_log
from components.serving.models_config import ServingLabels, models_config_path, write_labels
from tests.conftest import REPO
from tests.ports import free_port
from tests.tf_serving_double import serve_models


def _png(value: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.full((6, 6), value, np.uint8)).save(out, format="PNG")
    return out.getvalue()


def _example(png: bytes) -> dict:
    import tensorflow as tf

    serialized = tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png]))})
    ).SerializeToString()
    return {"b64": base64.b64encode(serialized).decode()}


@pytest.fixture(scope="module")
def serving_dir(tmp_path_factory) -> Path:
    """`<serving>/digits/1`, a classifier with the Trainer's serving_default signature, and
    models.config labelling it stable."""
    import tensorflow as tf

    class DarkOrBright(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def serve(self, examples):
            images = tf.io.parse_example(
                examples, {"image": tf.io.FixedLenFeature([], tf.string)})["image"]
            mean = tf.map_fn(lambda png: tf.reduce_mean(tf.cast(tf.io.decode_png(png, 1),
                                                               tf.float32)) / 255.0,
                             images, fn_output_signature=tf.float32)
            probabilities = tf.stack([1.0 - mean, mean], axis=1)
            class_id = tf.argmax(probabilities, axis=1)
            return {"probabilities": probabilities, "class_id": class_id,
                    "class_name": tf.gather(tf.constant(["dark", "bright"]), class_id)}

    root = tmp_path_factory.mktemp("serving")
    model = DarkOrBright()
    tf.saved_model.save(model, str(root / "digits" / "1"),
                        signatures={"serving_default": model.serve})
    write_labels(models_config_path(root), "digits", str(root / "digits"),
                 ServingLabels(stable=1))
    return root


@pytest.fixture(scope="module")
def tf_serving(serving_dir):
    with serve_models(serving_dir, "digits") as server:
        yield server.url


def _predict(url: str, path: str, pngs: list[bytes]) -> requests.Response:
    body = {"signature_name": "serving_default",
            "inputs": {"examples": [_example(p) for p in pngs]}}
    return requests.post(f"{url}{path}", json=body, timeout=120)


def _logged(log_dir: Path) -> list:
    now = dt.datetime.now(dt.timezone.utc)
    return read_window(log_dir, "digits", now - dt.timedelta(hours=1),
                       now + dt.timedelta(minutes=1)).records


def test_every_sampled_predict_call_is_logged_with_the_version_that_answered(
        tmp_path, serving_dir, tf_serving):
    logger = RequestLogger(tf_serving, serving_dir, tmp_path / "log", sampling_rate=1.0)
    with logger.running() as url:
        direct = _predict(tf_serving, "/v1/models/digits:predict", [_png(10), _png(250)])
        paths = ["/v1/models/digits:predict", "/v1/models/digits/labels/stable:predict",
                 "/v1/models/digits/versions/1:predict"]
        replies = [_predict(url, path, [_png(10), _png(250)]) for path in paths]
        status = requests.get(f"{url}/v1/models/digits", timeout=60)
    assert [r.status_code for r in replies] == [200, 200, 200]
    assert all(r.json() == direct.json() for r in replies)  # answered unchanged
    assert status.status_code == 200 and status.json()["model_version_status"][0][
        "state"] == "AVAILABLE"
    logs = _logged(tmp_path / "log")
    assert len(logs) == 3 and logger.logged == 3  # the GET is forwarded, not logged
    assert {log.log_metadata.model_spec.version.value for log in logs} == {1}
    rows = rows_of_log(logs[0], ["dark", "bright"])
    assert [r["predicted_class"] for r in rows] == ["dark", "bright"]
    assert rows[0]["height"] == 6 and rows[0]["encoding"] == "PNG"
    assert rows[1]["confidence"] == pytest.approx(250 / 255, abs=1e-4)
    [path] = logger.writer.paths
    today = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    assert path.parent == tmp_path / "log" / "digits" / today


def test_the_sampling_rate_decides_which_calls_are_logged(tmp_path, serving_dir, tf_serving):
    draws = iter([0.01, 0.5, 0.049, 0.9, 0.05])
    logger = RequestLogger(tf_serving, serving_dir, tmp_path / "log", sampling_rate=0.05,
                           draw=lambda: next(draws))
    with logger.running() as url:
        for _ in range(5):
            assert _predict(url, "/v1/models/digits:predict", [_png(40)]).status_code == 200
    assert logger.logged == 2 and len(_logged(tmp_path / "log")) == 2
    for log in _logged(tmp_path / "log"):
        assert log.log_metadata.sampling_config.sampling_rate == 0.05


def test_a_log_that_cannot_be_written_never_fails_a_request(tmp_path, serving_dir, tf_serving,
                                                             capfd):
    blocked = tmp_path / "log"
    blocked.write_text("a file where the log folder should be")
    logger = RequestLogger(tf_serving, serving_dir, blocked, sampling_rate=1.0)
    with logger.running() as url:
        replies = [_predict(url, "/v1/models/digits:predict", [_png(99)]) for _ in range(3)]
    assert [r.status_code for r in replies] == [200, 200, 200]
    warnings = [line for line in capfd.readouterr().err.splitlines()
                if line.startswith("mptfx request-logger: warning:")]
    assert len(warnings) == 1  # at most one a minute
    assert "a digits request was answered but not logged" in warnings[0]


def test_tf_serving_down_is_a_502_that_names_it(tmp_path, serving_dir):
    upstream = f"http://127.0.0.1:{free_port()}"
    logger = RequestLogger(upstream, serving_dir, tmp_path / "log", sampling_rate=1.0,
                           timeout=5)
    with logger.running() as url:
        reply = _predict(url, "/v1/models/digits:predict", [_png(1)])
    assert reply.status_code == 502
    assert reply.json()["error"].startswith(f"TF Serving at {upstream} did not answer")
    assert logger.logged == 0 and not (tmp_path / "log").exists()


def test_the_command_serves_until_sigterm_and_says_what_it_logged(tmp_path, tf_serving,
                                                                  serving_dir):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "serving").symlink_to(serving_dir, target_is_directory=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "request-logger", "--workspace", str(workspace),
         "--upstream", tf_serving, "--host", "127.0.0.1", "--port", "0",
         "--set", "serving.request_log.sampling_rate=1"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        first = process.stdout.readline()
        assert first.startswith("mptfx request-logger: http://127.0.0.1:"), \
            first + process.stderr.read()
        url = first.split()[2]
        assert f"logging 100% of predict calls to {workspace}/request_log/" in first
        assert _predict(url, "/v1/models/digits:predict", [_png(7)]).status_code == 200
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert out.strip().splitlines()[-1] == "mptfx request-logger: stopped; 1 predict calls logged"
    assert len(_logged(workspace / "request_log")) == 1

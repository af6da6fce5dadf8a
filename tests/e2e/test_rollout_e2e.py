"""End to end: `mptfx serve rollout` judges a real canary push with a real Prometheus.

Two real pipeline runs in one workspace (the suite's `canary_workspace`, tests/conftest.py,
copied) make version 1 (`pusher.rollout: direct`, stable, MLflow champion) and version 2 (the
next span retrained on drift, warm-started from version 1, `pusher.rollout: canary`, canary,
challenger; tests/drift_canary.py), so that a healthy canary predicts like the stable.
Then, as on the cluster (k8s/base/serving.yaml), each track has its own TF Serving with the
metrics sidecar in front of it:

    gateway thread --(HTTPRoute weights, path rewritten to the label)--> sidecar --> double
                                                  stable track:  sidecar :A --> double (stable)
                                                  canary track:  sidecar :B --> double (canary)
    Prometheus (real, 1 s scrapes) <-- both doubles' /monitoring/prometheus/metrics and both
                                       sidecars' /metrics, each target labelled track=...

The doubles (tests/tf_serving_double.py) stand in for TF Serving's binary, which cannot be
installed here; they answer from the real SavedModels and serve TF Serving's own metric
names and labels. The sidecars are the product's `mptfx serve sidecar` processes. The
gateway thread plays the Gateway API implementation: for each request it reads the rendered
HTTPRoute (`<workspace>/k8s/serving-route.yaml`), picks a backend by its weight and sends
the request to that track's sidecar at the backend's rewritten path. Each scenario starts
from a canary push state: stable 1, canary 2, aliases champion 1 / challenger 2.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import yaml

from tests.conftest import RUN_DIR, CliResult
from tests.ports import free_port
from tests.prometheus_server import ScrapeTarget, prometheus_server
from tests.tf_serving_double import METRICS_PATH, serve_models
from tests.tf_serving_double import served as served_models
from tests.workspaces import relocated_copy

pytestmark = pytest.mark.e2e

# Seconds, not minutes: 1 s scrapes, 10 s windows. Up to 24 requests/s of 4 images each give
# the first step (25 %) up to 60 canary requests and 240 predictions a window, where
# sampling alone puts the Jensen-Shannon distance of two healthy models near 0.1
# (docs/guide/canary.md); a collapsed canary is near 0.9, so the threshold here is 0.4.
# min_requests 20: a window judged at all holds at least one of every 20th request failing.
REQUESTS_PER_SECOND = 24
ANALYSIS = {"steps": "[25, 50, 100]", "interval": "10", "min_requests": "20",
            "failure_limit": "2", "inconclusive_limit": "3", "max_class_distance": "0.4",
            # this shared 2-core machine is slow under load; the latency gate is the
            # unit tests' (and a slow canary's below)
            "max_p99_latency_ms": "5000"}


@pytest.fixture(scope="module")
def workspace(canary_workspace, tmp_path_factory) -> Path:
    """This module's copy of the suite's v1 stable + v2 canary workspace (tests/conftest.py:
    the first span and the next one retrained on drift), which rollouts change."""
    return relocated_copy(canary_workspace, tmp_path_factory.mktemp("rollout") / "ws")


def serve(workspace: Path, *args: str) -> CliResult:
    """`mptfx serve ARGS` in this process, through the CLI's own `main`."""
    from pipelines.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["serve", *args, "--workspace", str(workspace)])
        except SystemExit as exit_:
            code = exit_.code
    return CliResult(code, out.getvalue(), err.getvalue())


def _start_sidecar(upstream: str) -> tuple[subprocess.Popen, int, int]:
    port, metrics_port = free_port(), free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "serve", "sidecar", "--upstream", upstream,
         "--host", "127.0.0.1", "--port", str(port), "--metrics-port", str(metrics_port)],
        cwd=RUN_DIR, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = process.stdout.readline()
    assert "mptfx serve sidecar: 127.0.0.1:" in line, line + process.stdout.read()
    return process, port, metrics_port


@pytest.fixture(scope="module")
def tracks(workspace, tmp_path_factory):
    """Per track a TF Serving double behind a real sidecar process; Prometheus scrapes all
    four. Yields (doubles by track, sidecar URLs by track, Prometheus)."""
    serving = workspace / "serving"
    with serve_models(serving, "digits") as stable, serve_models(serving, "digits") as canary:
        doubles = {"stable": stable, "canary": canary}
        sidecars, targets = {}, []
        with contextlib.ExitStack() as stack:
            for track, double in doubles.items():
                process, port, metrics_port = _start_sidecar(double.url)
                stack.callback(process.wait, 30)
                stack.callback(process.terminate)
                sidecars[track] = f"http://127.0.0.1:{port}"
                targets += [ScrapeTarget("mptfx-serving", double.url.removeprefix("http://"),
                                         METRICS_PATH, {"track": track}),
                            ScrapeTarget("mptfx-serving-sidecar", f"127.0.0.1:{metrics_port}",
                                         "/metrics", {"track": track})]
            # Each double loads both versions once, before anything is measured.
            for url in sidecars.values():
                for label in ("stable", "canary"):
                    reply = requests.post(f"{url}/v1/models/digits/labels/{label}:predict",
                                          json=_body(_images()[:1]), timeout=600)
                    assert reply.status_code == 200, reply.text
            prometheus = stack.enter_context(
                prometheus_server(tmp_path_factory.mktemp("prometheus"), targets))
            prometheus.wait_until_scraped(len(targets))
            yield doubles, sidecars, prometheus


def _images() -> np.ndarray:
    from sklearn.datasets import load_digits

    return (load_digits().images * 16).clip(0, 255).astype(np.uint8)[..., None]


def _body(images: np.ndarray) -> dict:
    return {"signature_name": "predict_images", "inputs": {"images": images.tolist()}}


class Gateway:
    """Predict requests through the split the rendered HTTPRoute describes."""

    def __init__(self, route: Path, sidecars: dict[str, str], per_second: float) -> None:
        self.route, self.sidecars, self.per_second = route, sidecars, per_second
        self.sent = {"stable": 0, "canary": 0}
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._send, args=(seed,), daemon=True)
                        for seed in range(8)]

    def backends(self) -> list[tuple[str, int, str]]:
        """(track, weight, rewritten path) of the predict rule's backends."""
        [route] = yaml.safe_load_all(self.route.read_text())
        return [(ref["name"].rsplit("-", 1)[1], ref["weight"],
                 ref["filters"][0]["urlRewrite"]["path"]["replaceFullPath"])
                for ref in route["spec"]["rules"][0]["backendRefs"]]

    def _current(self, last: list) -> list:
        try:  # the rollout rewrites the file: a read in the middle keeps the last split
            return self.backends()
        except (OSError, yaml.YAMLError, ValueError, KeyError, TypeError):
            return last

    def _send(self, seed: int) -> None:
        rng, images = random.Random(seed), _images()
        pause = len(self.threads) / self.per_second
        backends = self.backends()
        while not self.stop.is_set():
            started = time.monotonic()
            backends = self._current(backends)
            track, _, path = rng.choices(backends, weights=[b[1] for b in backends])[0]
            start = rng.randrange(len(images) - 4)
            with contextlib.suppress(requests.RequestException):
                requests.post(self.sidecars[track] + path, json=_body(images[start:start + 4]),
                              timeout=30)
                self.sent[track] += 1
            self.stop.wait(max(0.0, pause - (time.monotonic() - started)))

    def __enter__(self) -> Gateway:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()


def canary_push_state(workspace: Path, doubles) -> dict[str, int]:
    """Back to what the canary push left: stable 1, canary 2, no route weight, no faults;
    returns the labels (a `previous` may be there from the scenario before)."""
    for double in doubles.values():
        for faults in (double.handler.fail_every, double.handler.collapse_to_class,
                       double.handler.extra_latency_ms):
            faults.clear()
    for verb in (("pin", "1"), ("canary", "2", "--weight", "0")):
        result = serve(workspace, *verb)
        assert result.returncode == 0, result.stderr
    state = labels(workspace)
    assert (state["stable"], state["canary"]) == (1, 2)
    assert aliases(workspace) == {"champion": 1, "challenger": 2}
    return state


def without_canary(state: dict[str, int]) -> dict[str, int]:
    return {label: version for label, version in state.items() if label != "canary"}


def labels(workspace: Path) -> dict[str, int]:
    return served_models(workspace / "serving", "digits")["labels"]


def aliases(workspace: Path) -> dict[str, int]:
    """MLflow alias -> the TF Serving version its registered version was pushed as."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{workspace}/mlflow.db"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    model = client.get_registered_model("digits")
    return {alias: int(client.get_model_version("digits", version).tags["serving_version"])
            for alias, version in (model.aliases or {}).items()}


def route_weights(workspace: Path) -> list[int]:
    [route] = yaml.safe_load_all((workspace / "k8s" / "serving-route.yaml").read_text())
    return [ref["weight"] for ref in route["spec"]["rules"][0]["backendRefs"]]


def latest_rollout_run(workspace: Path):
    """The newest MLflow run `mptfx serve rollout` recorded, with its metric history."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{workspace}/mlflow.db"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment = client.get_experiment_by_name("mptfx-digits")
    [run] = client.search_runs([experiment.experiment_id], "tags.`mptfx.kind` = 'rollout'",
                               order_by=["attributes.start_time DESC"], max_results=1)
    history = {name: [m.value for m in client.get_metric_history(run.info.run_id, name)]
               for name in ("canary_weight", "success_rate", "class_distance")}
    return run, history


def rollout(workspace: Path, prometheus_url: str, **overrides: str) -> CliResult:
    settings = {**ANALYSIS, "prometheus_url": prometheus_url, **overrides}
    sets = [arg for key, value in settings.items()
            for arg in ("--set", f"serving.analysis.{key}={value}")]
    return serve(workspace, "rollout", *sets)


def check_lines(result: CliResult) -> list[str]:
    return [line.strip() for line in result.stdout.splitlines()
            if line.strip().startswith("check ")]


def test_a_healthy_canary_is_promoted_after_every_step(workspace, tracks):
    doubles, sidecars, prometheus = tracks
    canary_push_state(workspace, doubles)
    with Gateway(workspace / "k8s" / "serving-route.yaml", sidecars, REQUESTS_PER_SECOND):
        result = rollout(workspace, prometheus.url)
    assert result.returncode == 0, result.stdout + result.stderr
    checks = check_lines(result)
    assert [line.split(":")[0] for line in checks if ": passed" in line] == [
        "check 1 at 25 %", "check 2 at 50 %", "check 3 at 100 %"], result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith(
        "mptfx serve rollout: promoted digits canary 2 to stable after 3 checks")
    assert labels(workspace) == {"stable": 2, "previous": 1}
    assert aliases(workspace) == {"champion": 2}  # the challenger became the champion
    assert route_weights(workspace) == [100, 0]
    run, history = latest_rollout_run(workspace)
    assert run.data.tags["mptfx.rollout"] == "promoted" and run.info.status == "FINISHED"
    assert history["canary_weight"] == [25, 50, 100]
    assert all(rate == 1.0 for rate in history["success_rate"])
    assert all(distance < 0.4 for distance in history["class_distance"])


def test_a_canary_failing_5_percent_of_requests_is_aborted_at_the_first_step(
        workspace, tracks):
    doubles, sidecars, prometheus = tracks
    before = canary_push_state(workspace, doubles)
    doubles["canary"].handler.fail_every[2] = 20  # 5 % of version 2's requests fail
    with Gateway(workspace / "k8s" / "serving-route.yaml", sidecars, REQUESTS_PER_SECOND):
        result = rollout(workspace, prometheus.url)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("mptfx: error: serve rollout: aborted digits canary 2 at 25 %: "
                           "success rate 9"), result.stdout + line
    assert "2 failed checks, serving.analysis.failure_limit 2" in line
    assert [c.split(":")[0] for c in check_lines(result)] == ["check 1 at 25 %",
                                                              "check 2 at 25 %"]
    assert labels(workspace) == without_canary(before)  # the stable is untouched
    assert aliases(workspace) == {"champion": 1}  # the challenger alias went with the label
    assert route_weights(workspace) == [100, 0]
    run, history = latest_rollout_run(workspace)
    assert run.data.tags["mptfx.rollout"] == "aborted" and run.info.status == "FAILED"
    assert all(rate < 0.99 for rate in history["success_rate"])


def test_a_canary_whose_predictions_collapse_to_one_class_is_aborted_naming_the_distance(
        workspace, tracks):
    doubles, sidecars, prometheus = tracks
    before = canary_push_state(workspace, doubles)
    doubles["canary"].handler.collapse_to_class[2] = 3  # fast, no errors, always "3"
    with Gateway(workspace / "k8s" / "serving-route.yaml", sidecars, REQUESTS_PER_SECOND):
        result = rollout(workspace, prometheus.url)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stdout + result.stderr  # one line, whatever the load
    line = lines[0]
    distance = float(re.search(r"predicted-class distance ([0-9.]+) > 0.4", line)[1])
    assert distance > 0.7, line
    assert "class 3 is 100% of the canary's answers" in line
    assert "success rate" not in line  # every request succeeded
    assert labels(workspace) == without_canary(before)
    assert aliases(workspace) == {"champion": 1}


def test_a_slow_canary_is_aborted_on_tf_servings_p99_latency(workspace, tracks):
    doubles, sidecars, prometheus = tracks
    before = canary_push_state(workspace, doubles)
    doubles["canary"].handler.extra_latency_ms[2] = 1500
    with Gateway(workspace / "k8s" / "serving-route.yaml", sidecars, REQUESTS_PER_SECOND):
        result = rollout(workspace, prometheus.url, max_p99_latency_ms="1000")
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stdout + result.stderr  # one line, whatever the load
    line = lines[0]
    latency = float(re.search(r"p99 latency ([0-9]+) ms > 1000 ms", line)[1])
    assert latency >= 1500, line  # TF Serving's histogram, read back through Prometheus
    assert labels(workspace) == without_canary(before)


def test_without_traffic_the_rollout_is_inconclusive_and_promotes_nothing(workspace, tracks):
    doubles, _, prometheus = tracks
    before = canary_push_state(workspace, doubles)
    # no gateway: nobody sends a request
    result = rollout(workspace, prometheus.url, inconclusive_limit="2")
    assert result.returncode == 3, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stdout + result.stderr  # one line, whatever the load
    line = lines[0]
    assert line.startswith("mptfx: error: serve rollout: gave up on digits canary 2 at 25 %, "
                           "not promoted: 0 canary requests in 10s < serving.analysis."
                           "min_requests 20"), line
    assert "2 inconclusive checks in a row" in line
    assert labels(workspace) == before  # the canary keeps its label for a later rollout
    assert aliases(workspace) == {"champion": 1, "challenger": 2}
    assert route_weights(workspace) == [100, 0]  # no unjudged traffic to the canary
    run, _ = latest_rollout_run(workspace)
    assert run.data.tags["mptfx.rollout"] == "inconclusive"


def test_an_unreachable_prometheus_is_one_line_naming_the_host_and_changes_nothing(
        workspace, tracks):
    doubles, _, _ = tracks
    canary_push_state(workspace, doubles)
    before = ((workspace / "serving" / "models.config").read_bytes(),
              (workspace / "k8s" / "serving-route.yaml").read_bytes(), aliases(workspace),
              latest_rollout_run(workspace)[0].info.run_id)
    port = free_port()
    result = rollout(workspace, f"http://127.0.0.1:{port}")
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    assert result.stderr.strip() == (
        f"mptfx: error: Prometheus 127.0.0.1:{port} is unreachable (connection refused); "
        f"check serving.analysis.prometheus_url")
    assert before == ((workspace / "serving" / "models.config").read_bytes(),
                      (workspace / "k8s" / "serving-route.yaml").read_bytes(),
                      aliases(workspace), latest_rollout_run(workspace)[0].info.run_id)


def test_with_no_canary_the_cronjobs_rollout_has_nothing_to_do(workspace, tracks):
    doubles, _, prometheus = tracks
    canary_push_state(workspace, doubles)
    assert serve(workspace, "pin", "1").returncode == 0
    quiet = serve(workspace, "rollout", "--if-canary")
    assert quiet.returncode == 0 and "nothing to roll out" in quiet.stdout
    refused = serve(workspace, "rollout")
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith("no canary in "
                                           f"{workspace / 'serving' / 'models.config'}: nothing "
                                           "to roll out; nothing changed")
    assert json.loads(serve(workspace, "status", "--json").stdout)["labels"]["stable"] == 1

"""Test double for the TF Serving binary, which cannot be installed here (no PyPI, Debian or
npm package): it answers TF Serving's REST API from the real SavedModels under a model's
base path, resolving version labels through the real `models.config`.

    with serve_models(serving_dir, "digits") as server:
        requests.post(f"{server.url}/v1/models/digits/labels/canary:predict", json=body)

Answers `GET /v1/models/<name>` (the versions models.config loads, AVAILABLE) and
`POST /v1/models/<name>[/versions/N | /labels/L]:predict` (TF Serving's "inputs" or
"instances" body, `{"b64": ...}` for strings; the reply's "outputs" or "predictions").
`answer_from[label] = version` makes it answer a label from the wrong version, as a
misconfigured server would.

`GET /monitoring/prometheus/metrics` serves what TF Serving 2.16's own exporter serves
(`util/prometheus_exporter.cc`, the metrics of `servables/tensorflow/util.cc` as
`model_servers/http_server.cc` records them) for the requests this double answered:
`:tensorflow:serving:request_count{model_name,status}` for every request, probes included,
and the histogram `:tensorflow:serving:request_latency{model_name,API,entrypoint}` in µs
for the successful ones only. Like TF Serving's, neither carries a version: a test tells
versions apart by running one double per track, as a cluster runs one pod per track.

Faults a test injects for one version (all empty by default):
`fail_every[version] = n` answers every n-th predict request of that version with TF
Serving's error (HTTP 500, status INTERNAL); `extra_latency_ms[version] = ms` delays its
answers; `collapse_to_class[version] = c` makes it answer class c for every example
(probability 0.9), as a broken model whose predictions collapsed would.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np


def served(serving_dir: Path, model_name: str) -> dict:
    """models.config as TF Serving parses it: the model's labels and the versions its
    policy loads (`serving_dir` holds models.config and `<model_name>/<version>/`)."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    config = text_format.Parse((serving_dir / "models.config").read_text(),
                               model_server_config_pb2.ModelServerConfig())
    [entry] = [e for e in config.model_config_list.config if e.name == model_name]
    return {"base_path": entry.base_path, "labels": dict(entry.version_labels),
            "versions": list(entry.model_version_policy.specific.versions)}


METRICS_PATH = "/monitoring/prometheus/metrics"
# TF Serving's request_latency buckets: monitoring::Buckets::Exponential(10, 1.8, 33) (µs),
# then the last one, to +Inf.
LATENCY_BUCKETS_US = [10 * 1.8 ** i for i in range(33)]
_HTTP_CODE = {"OK": 200, "INVALID_ARGUMENT": 400, "NOT_FOUND": 404, "INTERNAL": 500}


class ServingMetrics:
    """TF Serving's request_count and request_latency, as its exporter prints them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.request_count: dict[tuple[str, str], int] = {}
        self.latency: dict[tuple[str, str, str], list] = {}  # -> [bucket counts, sum]

    def record(self, model_name: str, api: str, status: str, latency_us: float) -> None:
        """What http_server.cc records for one REST request."""
        with self.lock:
            key = (model_name, status)
            self.request_count[key] = self.request_count.get(key, 0) + 1
            if status != "OK":  # latency is only recorded for successful requests
                return
            counts, total = self.latency.setdefault((model_name, api, "REST"),
                                                    [[0] * (len(LATENCY_BUCKETS_US) + 1), 0.0])
            index = next((i for i, limit in enumerate(LATENCY_BUCKETS_US)
                          if latency_us < limit), len(LATENCY_BUCKETS_US))
            counts[index] += 1
            self.latency[(model_name, api, "REST")][1] = total + latency_us

    def page(self) -> str:
        """The Prometheus text TF Serving's PrometheusExporter::GeneratePage writes."""
        lines = ["# TYPE :tensorflow:serving:request_count counter"]
        with self.lock:
            for (model, status), count in sorted(self.request_count.items()):
                lines.append(f':tensorflow:serving:request_count{{model_name="{model}",'
                             f'status="{status}"}} {count}')
            lines.append("# TYPE :tensorflow:serving:request_latency histogram")
            for (model, api, entrypoint), (counts, total) in sorted(self.latency.items()):
                labels = f'model_name="{model}",API="{api}",entrypoint="{entrypoint}"'
                cumulative = 0
                for index, count in enumerate(counts):
                    cumulative += count
                    limit = (f"{LATENCY_BUCKETS_US[index]:.6g}"
                             if index < len(LATENCY_BUCKETS_US) else "+Inf")
                    lines.append(f':tensorflow:serving:request_latency_bucket{{{labels},'
                                 f'le="{limit}"}} {cumulative}')
                lines.append(f":tensorflow:serving:request_latency_sum{{{labels}}} {total:.6g}")
                lines.append(f":tensorflow:serving:request_latency_count{{{labels}}} "
                             f"{cumulative}")
        return "\n".join(lines) + "\n"


class TFServingDouble(BaseHTTPRequestHandler):
    """The request handler; `serve_models` makes a subclass per server with its state."""

    serving_dir: Path
    model_name: str
    answer_from: dict[str, int]
    models: dict[int, Any]
    metrics: ServingMetrics
    fail_every: dict[int, int]
    extra_latency_ms: dict[int, float]
    collapse_to_class: dict[int, int]
    answered: dict[int, int]

    def log_message(self, *args) -> None:
        pass

    def reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path == METRICS_PATH:  # not a model request: TF Serving counts nothing
            data = self.metrics.page().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        started = time.monotonic()
        versions = served(self.serving_dir, self.model_name)["versions"]
        self.reply(200, {"model_version_status": [
            {"version": str(v), "state": "AVAILABLE", "status": {"error_code": "OK"}}
            for v in versions]})
        # A status request: API is the empty method name, as for TF Serving's probes.
        self.metrics.record(self.model_name, "", "OK", (time.monotonic() - started) * 1e6)

    def resolve_version(self, parts: list[str]) -> int | None:
        """The version a predict path names (`labels/L`, `versions/N`, or stable)."""
        labels = served(self.serving_dir, self.model_name)["labels"]
        if len(parts) == 5 and parts[3] == "labels":
            if parts[4] not in labels:
                return None
            return self.answer_from.get(parts[4], labels[parts[4]])
        return int(parts[4]) if len(parts) == 5 else labels["stable"]

    def predict(self, version: int, body: dict) -> dict:
        """The SavedModel of `version` answers a TF Serving REST predict body, columns
        (`inputs`, answered with `outputs`) or rows (`instances`, with `predictions`), read
        and written as TF Serving's json_tensor.cc does (components/serving/rest_json.py)."""
        import tensorflow as tf

        from components.serving.rest_json import answer, parse_request

        if version not in self.models:
            self.models[version] = tf.saved_model.load(
                str(self.serving_dir / self.model_name / str(version)))
        signature = self.models[version].signatures[body.get("signature_name",
                                                             "serving_default")]
        specs = signature.structured_input_signature[1]
        arrays, rows = parse_request(body, {name: spec.dtype.as_numpy_dtype
                                            for name, spec in specs.items()})
        outputs = {name: value.numpy() for name, value in signature(**{
            name: tf.constant(array, dtype=specs[name].dtype)
            for name, array in arrays.items()}).items()}
        if version in self.collapse_to_class and "class_id" in outputs:
            outputs = self.collapsed(outputs, self.collapse_to_class[version])
        return answer(outputs, rows)

    @staticmethod
    def collapsed(outputs: dict, class_id: int) -> dict:
        """The same outputs, every example predicted as `class_id` (probability 0.9)."""
        count, classes = outputs["probabilities"].shape
        rest = 0.1 / (classes - 1)
        row = [0.9 if k == class_id else rest for k in range(classes)]
        changed = {"class_id": np.full(count, class_id, np.int64),
                   "probabilities": np.array([row] * count, np.float32)}
        if "class_name" in outputs:
            changed["class_name"] = np.array([str(class_id).encode()] * count, dtype=object)
        return {**outputs, **changed}

    def do_POST(self) -> None:  # noqa: N802
        started = time.monotonic()
        path, _, verb = self.path.partition(":")
        parts = path.strip("/").split("/")  # v1 models NAME [labels L | versions N]
        if verb != "predict" or parts[:3] != ["v1", "models", self.model_name]:
            return self.reply(404, {"error": f"no such path {self.path}"})
        version = self.resolve_version(parts)
        if version is None:
            self.metrics.record(self.model_name, verb, "NOT_FOUND", 0)
            return self.reply(404, {"error": f"unknown label {parts[4]}"})
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.metrics.lock:
            self.answered[version] = number = self.answered.get(version, 0) + 1
        status = "OK"
        if self.fail_every.get(version) and number % self.fail_every[version] == 0:
            status, code, answer = "INTERNAL", 500, {"error": f"injected failure of version "
                                                              f"{version}"}
        else:
            try:
                code, answer = 200, self.predict(version, body)
            except Exception as error:  # TF Serving answers a bad request with its error
                status, code, answer = "INVALID_ARGUMENT", 400, {"error": _cause(error)}
        if self.extra_latency_ms.get(version):
            time.sleep(self.extra_latency_ms[version] / 1000)
        self.reply(code, answer)
        self.metrics.record(self.model_name, verb, status, (time.monotonic() - started) * 1e6)


def _state(serving_dir: Path, model_name: str, **extra: Any) -> dict[str, Any]:
    """A fresh state for one server's handler class: every attribute TFServingDouble reads."""
    return {"serving_dir": Path(serving_dir), "model_name": model_name, "answer_from": {},
            "models": {}, "metrics": ServingMetrics(), "fail_every": {}, "extra_latency_ms": {},
            "collapse_to_class": {}, "answered": {}, **extra}


class _Server(ThreadingHTTPServer):
    """socketserver prints a traceback to sys.stderr when a client leaves mid-answer, as
    Prometheus does when a scrape outlives its 1 s timeout on a loaded machine; inside a test
    that redirects sys.stderr to read a command's one-line error, that traceback became a
    second line (ci32). TF Serving says nothing when a client goes away; neither does this."""

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class RunningDouble:
    """A started double: its URL and its handler class (whose attributes are its state)."""

    def __init__(self, handler: type[TFServingDouble], server: ThreadingHTTPServer):
        self.handler = handler
        self.server = server
        self.url = f"http://127.0.0.1:{server.server_port}"


@contextlib.contextmanager
def serve_models(serving_dir: Path, model_name: str,
                 handler: type[TFServingDouble] = TFServingDouble) -> Iterator[RunningDouble]:
    """The double on a free port of 127.0.0.1 for `<serving_dir>/<model_name>`; stopped on
    exit."""
    bound = type("Handler", (handler,), _state(serving_dir, model_name))
    server = _Server(("127.0.0.1", 0), bound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield RunningDouble(bound, server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# -- one model from --model_base_path, as `tensorflow_model_server` started with flags ----


def _cause(error: Exception) -> str:
    """The line of a TensorFlow error TF Serving reports: the assertion, else the first."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    cause = [line for line in lines if line.startswith("assertion failed")]
    return next(iter(cause or lines), type(error).__name__)[:300]


class BasePathDouble(TFServingDouble):
    """The double for `tensorflow_model_server --model_name=M --model_base_path=P`: like
    TF Serving's file-system source, it serves the newest integer version folder under P,
    looked for every `poll_seconds` (a hidden or half-copied folder is not a version), and
    answers 404 while there is none; a version is AVAILABLE once loaded and its warm-up
    records replayed (END with the error otherwise). What the InfraValidator's TF Serving
    sidecar does."""

    base_path: Path
    poll_seconds: float
    load_errors: dict[int, str]

    def versions(self) -> list[int]:
        if not self.base_path.is_dir():
            return []
        return sorted(int(p.name) for p in self.base_path.iterdir()
                      if p.name.isdigit() and (p / "saved_model.pb").exists())

    def do_GET(self) -> None:  # noqa: N802
        versions = self.versions()
        if not versions:
            return self.reply(404, {"error": f"Could not find any versions of model "
                                             f"{self.model_name}"})
        for version in versions:  # TF Serving loads a version before it is AVAILABLE
            if version not in self.models and version not in self.load_errors:
                self.load(version)
        self.reply(200, {"model_version_status": [
            {"version": str(v), "state": "END", "status": {
                "error_code": "UNKNOWN", "error_message": self.load_errors[v]}}
            if v in self.load_errors else
            {"version": str(v), "state": "AVAILABLE", "status": {"error_code": "OK"}}
            for v in versions]})

    def load(self, version: int) -> None:
        """Load a version and replay its warm-up records, as `--enable_model_warmup` does:
        a record that fails makes the version END with the error, never AVAILABLE."""
        import tensorflow as tf

        from components.serving.warmup_requests import read_warmup_requests

        folder = str(self.base_path / str(version))
        model = tf.saved_model.load(folder)
        for request in read_warmup_requests(folder):
            try:
                model.signatures[request.signature_name](
                    **{k: tf.constant(v) for k, v in request.inputs.items()})
            except Exception as error:
                self.load_errors[version] = _cause(error)
                return
        self.models[version] = model

    def resolve_version(self, parts: list[str]) -> int | None:
        versions = self.versions()
        if len(parts) == 5 and parts[3] == "versions":
            return int(parts[4]) if int(parts[4]) in versions else None
        return versions[-1] if versions else None

    def predict(self, version: int, body: dict) -> dict:
        if version not in self.models:
            return {"error": f"Servable not found for request: Specific({self.model_name}, "
                             f"{version})"}
        try:
            return super().predict(version, body)
        except Exception as error:  # TF Serving answers a failed request with its error
            return {"error": _cause(error)}

    def do_POST(self) -> None:  # noqa: N802
        path, _, verb = self.path.partition(":")
        parts = path.strip("/").split("/")
        if verb != "predict" or parts[:3] != ["v1", "models", self.model_name]:
            return self.reply(404, {"error": f"no such path {self.path}"})
        version = self.resolve_version(parts)
        if version is None:
            return self.reply(404, {"error": "Servable not found"})
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        answer = self.predict(version, body)
        self.reply(400 if "error" in answer else 200, answer)


@contextlib.contextmanager
def serve_base_path(base_path: Path, model_name: str, port: int = 0
                    ) -> Iterator[RunningDouble]:
    """The base-path double on 127.0.0.1:`port` (0: a free one); stopped on exit."""
    state = _state(base_path, model_name, base_path=Path(base_path), poll_seconds=1.0,
                   load_errors={})
    bound = type("Handler", (BasePathDouble,), state)
    server = _Server(("127.0.0.1", port), bound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield RunningDouble(bound, server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def main(argv: list[str] | None = None) -> None:
    """`python tests/tf_serving_double.py FLAGS`: what a test starts in place of the TF
    Serving container (tests/k8s_double.py), with the container's own flags; it reads
    --rest_api_port, --model_name and --model_base_path and ignores the others (batching,
    monitoring, warm-up), which change nothing a REST client sees. Runs until killed."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="tf_serving_double")
    parser.add_argument("--rest_api_port", type=int, required=True)
    parser.add_argument("--model_name", required=True)
    parser.add_argument("--model_base_path", required=True)
    args, _ignored = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    import tensorflow  # noqa: F401 - before the port opens: the binary starts ready to load

    with serve_base_path(Path(args.model_base_path), args.model_name, args.rest_api_port):
        threading.Event().wait()


if __name__ == "__main__":
    main()

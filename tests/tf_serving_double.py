"""Test double for the TF Serving binary, which cannot be installed here (no PyPI, Debian or
npm package): it answers TF Serving's REST API from the real SavedModels under a model's
base path, resolving version labels through the real `models.config`.

    with serve_models(serving_dir, "digits") as server:
        requests.post(f"{server.url}/v1/models/digits/labels/canary:predict", json=body)

Answers `GET /v1/models/<name>` (the versions models.config loads, AVAILABLE) and
`POST /v1/models/<name>[/versions/N | /labels/L]:predict` (TF Serving's "inputs" body,
`{"b64": ...}` for strings; the reply's "outputs"). `answer_from[label] = version` makes it
answer a label from the wrong version, as a misconfigured server would.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


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


class TFServingDouble(BaseHTTPRequestHandler):
    """The request handler; `serve_models` makes a subclass per server with its state."""

    serving_dir: Path
    model_name: str
    answer_from: dict[str, int]
    models: dict[int, Any]

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
        versions = served(self.serving_dir, self.model_name)["versions"]
        self.reply(200, {"model_version_status": [
            {"version": str(v), "state": "AVAILABLE", "status": {"error_code": "OK"}}
            for v in versions]})

    def resolve_version(self, parts: list[str]) -> int | None:
        """The version a predict path names (`labels/L`, `versions/N`, or stable)."""
        labels = served(self.serving_dir, self.model_name)["labels"]
        if len(parts) == 5 and parts[3] == "labels":
            if parts[4] not in labels:
                return None
            return self.answer_from.get(parts[4], labels[parts[4]])
        return int(parts[4]) if len(parts) == 5 else labels["stable"]

    def predict(self, version: int, body: dict) -> dict:
        """The SavedModel of `version` answers a TF Serving REST predict body."""
        import tensorflow as tf

        if version not in self.models:
            self.models[version] = tf.saved_model.load(
                str(self.serving_dir / self.model_name / str(version)))

        def decode(value):
            if isinstance(value, dict):
                return base64.b64decode(value["b64"])
            return [decode(v) for v in value] if isinstance(value, list) else value

        signature = self.models[version].signatures[body.get("signature_name",
                                                             "serving_default")]
        inputs = {}
        for name, value in body["inputs"].items():
            dtype = signature.structured_input_signature[1][name].dtype
            inputs[name] = tf.constant(decode(value), dtype=dtype)
        outputs = signature(**inputs)
        return {"outputs": {k: (v.numpy().astype(str) if v.dtype == tf.string
                                else v.numpy()).tolist() for k, v in outputs.items()}}

    def do_POST(self) -> None:  # noqa: N802
        path, _, verb = self.path.partition(":")
        parts = path.strip("/").split("/")  # v1 models NAME [labels L | versions N]
        if verb != "predict" or parts[:3] != ["v1", "models", self.model_name]:
            return self.reply(404, {"error": f"no such path {self.path}"})
        version = self.resolve_version(parts)
        if version is None:
            return self.reply(404, {"error": f"unknown label {parts[4]}"})
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.reply(200, self.predict(version, body))


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
    state = {"serving_dir": Path(serving_dir), "model_name": model_name,
             "answer_from": {}, "models": {}}
    bound = type("Handler", (handler,), state)
    server = ThreadingHTTPServer(("127.0.0.1", 0), bound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield RunningDouble(bound, server)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()

"""The request logger: a small HTTP proxy in the serving pod, in front of TF Serving's REST API.

Open-source TF Serving can be given a `logging_config` but registers no log collector to
write it (docs/guide/monitoring.md shows where in its source), so this sidecar does what
that collector would: it forwards every request to TF Serving unchanged, and for a sampled
share (`serving.request_log.sampling_rate`) of the predict calls TF Serving answered it
writes the PredictionLog (request, response, the version that answered) to the request log
(request_log.py). A request is answered before it is logged, and a log that cannot be
written never fails a request: one warning line a minute says so.

    with RequestLogger(upstream, serving_dir, log_dir, sampling_rate=0.05).running(port=0) as url:
        requests.post(f"{url}/v1/models/digits:predict", json=body)   # TF Serving answers

The version is the one the path names (`/versions/N`), the label's in models.config
(`/labels/L`), or the stable label's for `/v1/models/<name>`, as docs/INTERFACES.md says
clients get. The tensors' dtypes come from the version's saved_model.pb on the shared volume.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import re
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from components.core.saved_model import serving_signatures
from components.core.text import one_line
from components.monitor.request_log import RequestLogWriter, predict_log_from_rest

_PREDICT_PATH = re.compile(
    r"^/v1/models/(?P<model>[^/:]+)(?:/versions/(?P<version>\d+)|/labels/(?P<label>[^/:]+))?"
    r":predict$")
# Hop-by-hop headers (RFC 9110 7.6.1) are the proxy's own; everything else passes through.
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
               "trailer", "upgrade", "host", "content-length"}
WARNING_INTERVAL_SECONDS = 60.0


class _Upstream:
    """Keep-alive connections to TF Serving, one per handler thread."""

    def __init__(self, url: str, timeout: float) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"the upstream must be an http:// URL. Received: {url!r}")
        self.host, self.port = parsed.hostname, parsed.port or 80
        self.timeout = timeout
        self._local = threading.local()

    def call(self, method: str, path: str, body: bytes,
             headers: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
        """Send one request; a kept-alive connection TF Serving closed is reopened once."""
        try:
            return self._send(method, path, body, headers)
        except (ConnectionError, http.client.HTTPException, OSError):
            return self._send(method, path, body, headers)

    def _send(self, method: str, path: str, body: bytes,
              headers: dict[str, str]) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self._local.connection = connection
        try:
            connection.request(method, path, body=body or None, headers=headers)
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        except BaseException:
            connection.close()
            self._local.connection = None
            raise


class RequestLogger:
    """The proxy's state: where it forwards, what it logs and where."""

    def __init__(self, upstream: str, serving_dir: str | Path, log_dir: str | Path,
                 sampling_rate: float, timeout: float = 60.0,
                 draw: Callable[[], float] = random.random) -> None:
        self.upstream_url = upstream
        self.upstream = _Upstream(upstream, timeout)
        self.serving_dir = Path(serving_dir)
        self.writer = RequestLogWriter(log_dir)
        self.sampling_rate = sampling_rate
        self.draw = draw
        self.logged = 0
        self._signatures: dict[tuple[str, int], dict[str, Any]] = {}
        self._last_warning = 0.0

    def resolve_version(self, model_name: str, version: str | None, label: str | None) -> int:
        """The version that answers a predict path (0 when models.config cannot tell)."""
        if version:
            return int(version)
        from components.serving.models_config import models_config_path, read_labels

        try:
            labels = read_labels(models_config_path(self.serving_dir), model_name).as_dict()
        except Exception:  # no models.config (yet), or another model's: unknown version
            return 0
        return labels.get(label or "stable") or 0

    def signatures(self, model_name: str, version: int) -> dict[str, Any]:
        key = (model_name, version)
        if key not in self._signatures:
            self._signatures[key] = serving_signatures(self.serving_dir / model_name / str(version))
        return self._signatures[key]

    def log(self, path: str, request_body: bytes, response_body: bytes) -> None:
        """Write the PredictionLog of one answered predict call (sampled by the caller)."""
        match = _PREDICT_PATH.match(path)
        if match is None:
            return
        model_name = match["model"]
        try:
            version = self.resolve_version(model_name, match["version"], match["label"])
            request, response = json.loads(request_body), json.loads(response_body)
            signature_name = request.get("signature_name") or "serving_default"
            signature = self.signatures(model_name, version)[signature_name]
            self.writer.write(predict_log_from_rest(model_name, version, request, response,
                                                    signature, self.sampling_rate))
            self.logged += 1
        except Exception as error:  # logging must never fail serving
            self.warn(f"a {model_name} request was answered but not logged: "
                      f"{type(error).__name__}: {one_line(error, limit=200)}")

    def warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_warning >= WARNING_INTERVAL_SECONDS or not self._last_warning:
            self._last_warning = now
            print(f"mptfx request-logger: warning: {message}", file=sys.stderr, flush=True)

    def make_server(self, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
        """An HTTP server bound to host:port (0 = a free port) that proxies to TF Serving."""
        handler = type("Handler", (_ProxyHandler,), {"logger": self})
        server = ThreadingHTTPServer((host, port), handler)
        server.daemon_threads = True
        return server

    @contextlib.contextmanager
    def running(self, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
        """The proxy serving in a background thread; yields its URL; stopped on exit."""
        server = self.make_server(host, port)
        thread = threading.Thread(target=server.serve_forever, name="mptfx-request-logger",
                                  daemon=True)
        thread.start()
        try:
            yield f"http://{host}:{server.server_port}"
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
            self.writer.close()


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive with clients, as TF Serving offers
    # Headers and body go out in two writes; with Nagle's algorithm on a kept-alive
    # connection the body waits for the client's delayed ACK (40 ms a call on Linux).
    disable_nagle_algorithm = True
    logger: RequestLogger

    def log_message(self, *args: Any) -> None:  # one line per request would flood the pod log
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's names)
        self._forward()

    def do_POST(self) -> None:  # noqa: N802
        self._forward()

    def do_HEAD(self) -> None:  # noqa: N802
        self._forward()

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        try:
            status, reply_headers, reply = self.logger.upstream.call(
                self.command, self.path, body, headers)
        except Exception as error:
            status, reply_headers = 502, [("Content-Type", "application/json")]
            reply = json.dumps({"error": f"TF Serving at {self.logger.upstream_url} did not "
                                         f"answer: {error}"}).encode()
        self.send_response(status)
        for name, value in reply_headers:
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(reply)
        self.wfile.flush()
        logger = self.logger
        if (self.command == "POST" and status == 200 and logger.sampling_rate > 0
                and logger.draw() < logger.sampling_rate):
            logger.log(self.path, body, reply)

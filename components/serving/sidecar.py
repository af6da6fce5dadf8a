"""The metrics sidecar: what TF Serving's own Prometheus metrics leave out, the answers.

TF Serving counts requests and times them (`:tensorflow:serving:request_count`,
`:request_latency`), but exports nothing about what the model predicted, so a canary that
answers fast with one class for every image passes every latency gate. This sidecar runs in
each serving pod as a reverse proxy in front of TF Serving's REST port: every request is
forwarded unchanged and every answer returned unchanged, and the answers of `:predict`
requests are counted on its metrics port:

- `mptfx_serving_predictions_total{model_name, class_id}`: predicted examples by class;
- `mptfx_serving_top1_confidence{model_name}` (histogram): the top-1 probability of each;
- `mptfx_serving_unreadable_answers_total{model_name}`: answers without `class_id`
  (another signature, a segmentation model): passed on, not counted.

Which version answered is not in the answer: the pod's track is, as a scrape target label
(`track="canary"` on the canary pods; see components/serving/analysis.py).

    mptfx serve sidecar --upstream http://127.0.0.1:8501 --port 8508 --metrics-port 9108
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
from typing import Any

PREDICT_PATH = re.compile(
    r"^/v1/models/(?P<model>[^/:]+)(?:/versions/\d+|/labels/[^/:]+)?:predict$", re.IGNORECASE)
METRICS_PATH = "/metrics"
CONFIDENCE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
# Headers that belong to one connection (RFC 9110 §7.6.1), never forwarded; the body's
# length is recomputed for the copy.
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
               "trailer", "transfer-encoding", "upgrade", "host", "content-length"}


class PredictionMetrics:
    """The sidecar's counters, on a registry of their own (nothing of the process itself)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

        disable_created_metrics()  # `*_created` series: nothing reads them, twice the series
        self.registry = CollectorRegistry(auto_describe=True)
        self.predictions = Counter(
            "mptfx_serving_predictions", "Predicted examples in TF Serving's predict answers, "
            "by predicted class.", ["model_name", "class_id"], registry=self.registry)
        self.confidence = Histogram(
            "mptfx_serving_top1_confidence", "Top-1 probability of each predicted example.",
            ["model_name"], buckets=CONFIDENCE_BUCKETS, registry=self.registry)
        self.unreadable = Counter(
            "mptfx_serving_unreadable_answers", "Predict answers passed on without a class_id "
            "output to count.", ["model_name"], registry=self.registry)

    def observe(self, model_name: str, body: bytes) -> int:
        """Count the examples of one successful predict answer; returns how many."""
        try:
            answers = predicted_examples(json.loads(body))
        except (ValueError, TypeError, KeyError, IndexError):
            answers = []
        if not answers:
            self.unreadable.labels(model_name).inc()
        for class_id, confidence in answers:
            self.predictions.labels(model_name, str(class_id)).inc()
            if confidence is not None:
                self.confidence.labels(model_name).observe(confidence)
        return len(answers)

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


def predicted_examples(body: Any) -> list[tuple[int, float | None]]:
    """(class_id, top-1 probability) of each example of a TF Serving REST predict answer,
    columnar (`{"outputs": {"class_id": [...], "probabilities": [[...]]}}`, the answer to
    "inputs") or by row (`{"predictions": [{"class_id": 3, ...}]}`, to "instances")."""
    if isinstance(body.get("outputs"), dict):
        outputs = body["outputs"]
        if "class_id" not in outputs:  # not a classifier's signature: nothing to count
            return []
        rows = [{"class_id": c, "probabilities": p} for c, p in
                zip(outputs["class_id"], outputs.get("probabilities") or
                    [None] * len(outputs["class_id"]), strict=True)]
    elif isinstance(body.get("predictions"), list):
        rows = [row for row in body["predictions"] if isinstance(row, dict)]
    else:
        return []
    answers = []
    for row in rows:
        if "class_id" not in row:
            return []
        probabilities = row.get("probabilities")
        top = max(probabilities) if probabilities else None
        answers.append((int(row["class_id"]), None if top is None else float(top)))
    return answers


def _forwarded(headers: Any) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP}


def build_apps(upstream: str, metrics: PredictionMetrics, max_body_mb: float = 64.0):
    """The proxy application and the metrics application (aiohttp)."""
    from aiohttp import ClientSession, ClientTimeout, web

    async def open_session(app: web.Application) -> Any:
        # No decompression: bodies pass through byte for byte.
        app["session"] = ClientSession(upstream.rstrip("/"), auto_decompress=False,
                                       timeout=ClientTimeout(total=None, sock_connect=5))
        yield
        await app["session"].close()

    async def proxy(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            async with request.app["session"].request(
                    request.method, request.rel_url, data=body or None,
                    headers=_forwarded(request.headers), allow_redirects=False) as answer:
                payload = await answer.read()
                status, headers = answer.status, _forwarded(answer.headers)
        except OSError as error:  # TF Serving not up (yet): what a gateway answers
            return web.json_response({"error": f"TF Serving at {upstream} did not answer: "
                                      f"{error}"}, status=502)
        match = PREDICT_PATH.match(request.path)
        if (match and request.method == "POST" and status == 200
                and "content-encoding" not in {k.lower() for k in headers}):
            metrics.observe(match["model"], payload)
        return web.Response(status=status, body=payload, headers=headers)

    async def exposition(request: web.Request) -> web.Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        return web.Response(body=metrics.exposition(),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application(client_max_size=int(max_body_mb * 1024 * 1024))
    app.cleanup_ctx.append(open_session)
    app.router.add_route("*", "/{tail:.*}", proxy)
    metrics_app = web.Application()
    metrics_app.router.add_get(METRICS_PATH, exposition)
    return app, metrics_app


def run_sidecar(upstream: str, host: str, port: int, metrics_port: int,
                max_body_mb: float = 64.0, ready: Any = None) -> None:
    """Serve until SIGTERM or SIGINT (what Kubernetes sends a stopping pod). `ready`, when
    given, is called with the bound (proxy port, metrics port) once both listen."""
    from aiohttp import web

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        app, metrics_app = build_apps(upstream, PredictionMetrics(), max_body_mb)
        runners = [web.AppRunner(app, access_log=None), web.AppRunner(metrics_app,
                                                                      access_log=None)]
        for runner, bound in zip(runners, (port, metrics_port), strict=True):
            await runner.setup()
            await web.TCPSite(runner, host, bound).start()
        if ready is not None:
            ready(*(runner.addresses[0][1] for runner in runners))
        try:
            await stop.wait()
        finally:
            for runner in runners:
                await runner.cleanup()

    asyncio.run(serve())

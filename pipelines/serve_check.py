"""`mptfx serve check`: replay the model's warm-up requests against a TF Serving REST endpoint.

Every request in `assets.extra/tf_serving_warmup_requests` of the labelled version is sent
to `<url>/v1/models/<name>/labels/<label>:predict` (TF Serving's REST predict API, columnar
"inputs" format) and to the SavedModel on disk; the report gives the latency of each call
and whether the server's class ids (and probabilities, within `tolerance`) agree.

    report = check_endpoint("http://127.0.0.1:8501", target, "stable")
"""

from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

import numpy as np

from components.serving.rest_json import rest_value
from components.serving.rollout import ServingTarget
from components.serving.warmup_requests import read_warmup_requests

_TIMEOUT_SECONDS = 30.0


class EndpointError(RuntimeError):
    """The endpoint did not answer, or answered something that is not TF Serving's API."""


@dataclass
class RequestResult:
    """One replayed request: its signature, latency and agreement with the SavedModel."""

    signature_name: str
    latency_ms: float
    agrees: bool
    max_probability_difference: float | None


def _local_outputs(model: Any, signature: str, inputs: dict[str, np.ndarray]) -> dict:
    import tensorflow as tf

    outputs = model.signatures[signature](**{k: tf.constant(v) for k, v in inputs.items()})
    return {name: value.numpy() for name, value in outputs.items()}


def _server_outputs(body: Any) -> dict[str, np.ndarray]:
    outputs = body.get("outputs") if isinstance(body, dict) else None
    if outputs is None:
        raise EndpointError(f"predict answer has no 'outputs': {str(body)[:200]}")
    if not isinstance(outputs, dict):  # a single-output signature answers a bare list
        outputs = {"probabilities": outputs}
    return {name: np.asarray(value) for name, value in outputs.items()}


def _compare(local: dict[str, np.ndarray], served: dict[str, np.ndarray],
             tolerance: float) -> tuple[bool, float | None]:
    difference = None
    if "probabilities" in local and "probabilities" in served:
        difference = float(np.max(np.abs(local["probabilities"].astype(np.float64)
                                          - served["probabilities"].astype(np.float64))))
    agrees = difference is None or difference <= tolerance
    if "class_id" in local:
        agrees = agrees and "class_id" in served and np.array_equal(
            local["class_id"].astype(np.int64), served["class_id"].astype(np.int64))
    return agrees, difference


def _post(session: Any, url: str, payload: dict) -> tuple[Any, float]:
    import requests

    started = time.perf_counter()
    try:
        response = session.post(url, json=payload, timeout=_TIMEOUT_SECONDS)
    except requests.RequestException as error:
        raise EndpointError(f"{_host(url)} did not answer: {type(error).__name__}") from None
    elapsed_ms = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise EndpointError(f"POST {url} answered HTTP {response.status_code}: "
                            f"{response.text[:200]}")
    return response.json(), elapsed_ms


def _host(url: str) -> str:
    return urllib.parse.urlparse(url).netloc or url


def check_endpoint(url: str, target: ServingTarget, label: str,
                   tolerance: float = 1e-4) -> dict[str, Any]:
    """Replay the warm-up requests of the version `label` points at; return the report.

    Raises EndpointError naming the host when the server does not answer or refuses.
    """
    import requests
    import tensorflow as tf

    version = target.labels().as_dict().get(label)
    if version is None:
        raise LookupError(f"no label {label!r} in {target.config_path}")
    model_dir = f"{target.base_path}/{version}"
    warmup = read_warmup_requests(model_dir)
    if not warmup:
        raise LookupError(f"{model_dir} has no warm-up requests to replay")
    model = tf.saved_model.load(model_dir)
    root = url.rstrip("/")
    predict_url = f"{root}/v1/models/{target.model_name}/labels/{label}:predict"
    results = []
    with requests.Session() as session:
        try:
            status = session.get(f"{root}/v1/models/{target.model_name}",
                                 timeout=_TIMEOUT_SECONDS)
        except requests.RequestException as error:
            raise EndpointError(f"{_host(url)} did not answer: {type(error).__name__}") from None
        if status.status_code != 200:
            raise EndpointError(f"GET {root}/v1/models/{target.model_name} answered HTTP "
                                f"{status.status_code}")
        for request in warmup:
            payload = {"signature_name": request.signature_name,
                       "inputs": {k: rest_value(v) for k, v in request.inputs.items()}}
            body, latency_ms = _post(session, predict_url, payload)
            local = _local_outputs(model, request.signature_name, request.inputs)
            agrees, difference = _compare(local, _server_outputs(body), tolerance)
            results.append(RequestResult(request.signature_name, round(latency_ms, 2), agrees,
                                         difference))
    latencies = [r.latency_ms for r in results]
    return {
        "url": predict_url,
        "label": label,
        "version": version,
        "model_status": status.json().get("model_version_status", []),
        "requests": [r.__dict__ for r in results],
        "agreement": sum(r.agrees for r in results) / len(results),
        "latency_ms": {"median": float(np.median(latencies)), "max": max(latencies)},
    }

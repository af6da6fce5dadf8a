"""The InfraValidator's check: load the candidate in a model server, query it, judge it.

    requests = build_requests(model_dir, examples_uri, num_examples=16)
    with ModelProcess(4 << 30, "model_process.log") as server:
        result = check_candidate(server, model_dir, requests, limits)
    result.blessed, result.reason, result.load_seconds, result.p99_ms

The server is TF Serving (a sidecar on Kubernetes, `tf_serving.TFServingSidecar`) or a
process of its own (`model_process.ModelProcess`); both take TF Serving's REST predict
body. The requests: every warm-up record of the SavedModel, `num_examples` eval examples
through `serving_default`, each example's image file through `predict_image_bytes` as a
client sends a photo (`{"instances": [{"b64": ...}]}`), and a batch of zeros for each
numeric signature none of those covers, so every exported signature answers once (the zeros
are not timed: no warm-up record warms those signatures). A candidate is blessed when it
loads within `max_load_seconds`, answers every request, answers each image's bytes as it
answered its Example (the same class, probabilities within `SAME_ANSWER_TOLERANCE`), stays
under the memory limit and its p99 latency is at most `p99_latency_ms`; otherwise `reason`
is one line naming the cause.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Protocol

import numpy as np

from components.core.saved_model import serving_signatures
from components.examples_format import COMPRESSION, EVAL_SPLIT, IMAGE_KEY, split_pattern
from components.infra.model_process import ModelServerError, ServerTimeout
from components.serving.rest_json import COLUMNS_ANSWER_KEY, ROWS_ANSWER_KEY, b64, rest_value

SERVING_SIGNATURE = "serving_default"
IMAGE_BYTES_SIGNATURE = "predict_image_bytes"
# Both signatures decode the same file with the same ops, one image a request: the answers
# differ by float round-off at most.
SAME_ANSWER_TOLERANCE = 1e-5
# The harness (a Python process importing TensorFlow, or the sidecar's start) is not the
# candidate: it gets its own generous bound, apart from infra.max_load_seconds.
START_TIMEOUT_SECONDS = 600.0


class ModelServer(Protocol):
    """What the check needs of a model server (TF Serving, or the local model process)."""

    kind: str

    def start(self, timeout: float) -> float: ...
    def load(self, model_dir: str, timeout: float) -> dict[str, Any]: ...
    def predict(self, body: dict[str, Any]) -> dict[str, Any]: ...
    def memory_peak_bytes(self) -> int | None: ...
    def over_limit(self) -> bool: ...


@dataclasses.dataclass(frozen=True)
class Limits:
    """The thresholds, as configured (`infra.*`)."""

    max_load_seconds: float
    p99_latency_ms: float
    memory_limit: str          # e.g. "4Gi", as in the serving Deployment
    memory_limit_bytes: int


@dataclasses.dataclass
class InfraResult:
    """What the check found; `reason` is "" when blessed."""

    blessed: bool = False
    reason: str = ""
    server: str = ""
    start_seconds: float | None = None
    load_seconds: float | None = None
    requests: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    peak_rss_mb: float | None = None
    memory_limit: str = ""
    signatures: list[str] = dataclasses.field(default_factory=list)

    def refuse(self, reason: str) -> InfraResult:
        """Not blessed, for `reason` (the first refusal is kept)."""
        self.blessed = False
        self.reason = self.reason or reason
        return self


@dataclasses.dataclass(frozen=True)
class Request:
    """One REST predict body and what it is, for the line that names a failed one."""

    label: str
    body: dict[str, Any]
    # Counted in p50/p99. A signature no warm-up record warms pays its graph's setup on
    # its first call: that request checks that it answers, not how fast.
    timed: bool = True
    # The index of an earlier request whose answer this one must equal (the same image).
    same_as: int | None = None


def rest_inputs(inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    """Named arrays as TF Serving's REST "inputs": nested lists, bytes as {"b64": ...}."""
    return {name: rest_value(np.asarray(array)) for name, array in inputs.items()}


def _zeros_request(name: str, signature: Any) -> Request | None:
    """A batch of one zero input for a numeric signature (None when an input is a string)."""
    import tensorflow as tf

    inputs = {}
    for key, tensor in signature.inputs.items():
        dtype = tf.dtypes.as_dtype(tensor.dtype)
        if dtype == tf.string:
            return None
        shape = [1 if dim.size < 0 else dim.size for dim in tensor.tensor_shape.dim]
        inputs[key] = np.zeros(shape or [1], dtype=dtype.as_numpy_dtype)
    return Request(f"zeros ({name})", {"signature_name": name, "inputs": rest_inputs(inputs)},
                   timed=False)


def _eval_examples(examples_uri: str, count: int) -> list[bytes]:
    import tensorflow as tf

    files = sorted(tf.io.gfile.glob(split_pattern(examples_uri, EVAL_SPLIT)))
    if not files:
        return []
    dataset = tf.data.TFRecordDataset(files, compression_type=COMPRESSION).take(count)
    return [record.numpy() for record in dataset]


def _image_of(example: bytes) -> bytes:
    from tensorflow.core.example import example_pb2

    return example_pb2.Example.FromString(example).features.feature[IMAGE_KEY].bytes_list.value[0]


def _eval_requests(signatures: dict[str, Any], examples: list[bytes],
                   first_index: int) -> list[Request]:
    """Each eval example through `serving_default`, then its image file through
    `predict_image_bytes` (when the model has it), whose answer must equal the first's."""
    serving = signatures.get(SERVING_SIGNATURE)
    if serving is None or len(serving.inputs) != 1:
        return []
    [input_name] = serving.inputs
    image_bytes = signatures.get(IMAGE_BYTES_SIGNATURE)
    requests = []
    for number, example in enumerate(examples, 1):
        requests.append(Request(
            f"eval example {number} ({SERVING_SIGNATURE})",
            {"signature_name": SERVING_SIGNATURE,
             "inputs": rest_inputs({input_name: np.array([example], dtype=object)})}))
        if image_bytes is not None and len(image_bytes.inputs) == 1:
            requests.append(Request(
                f"image of eval example {number} ({IMAGE_BYTES_SIGNATURE})",
                {"signature_name": IMAGE_BYTES_SIGNATURE,
                 "instances": [b64(_image_of(example))]},
                same_as=first_index + len(requests) - 1))
    return requests


def build_requests(model_dir: str, examples_uri: str, num_examples: int) -> list[Request]:
    """The warm-up records, `num_examples` eval examples (and their image files) and zeros
    for what is left over."""
    from components.serving.warmup_requests import read_warmup_requests

    signatures = serving_signatures(model_dir)
    requests = [Request(f"warm-up record {number} ({warmup.signature_name})",
                        {"signature_name": warmup.signature_name,
                         "inputs": rest_inputs(warmup.inputs)})
                for number, warmup in enumerate(read_warmup_requests(model_dir), 1)]
    requests += _eval_requests(signatures, _eval_examples(examples_uri, num_examples),
                               len(requests))
    covered = {request.body["signature_name"] for request in requests}
    for name, signature in sorted(signatures.items()):
        if name not in covered:
            zeros = _zeros_request(name, signature)
            if zeros is not None:
                requests.append(zeros)
    return requests


def answer_columns(reply: dict[str, Any]) -> dict[str, Any] | None:
    """Output name -> batch of a TF Serving answer in either format (None: no outputs)."""
    outputs = reply.get(COLUMNS_ANSWER_KEY)
    if isinstance(outputs, dict):
        return outputs
    if isinstance(outputs, list):
        return {"": outputs}
    rows = reply.get(ROWS_ANSWER_KEY)
    if isinstance(rows, list) and rows and all(isinstance(row, dict) for row in rows):
        return {name: [row.get(name) for row in rows] for name in rows[0]}
    return {"": rows} if isinstance(rows, list) else None


def different_answer(reply: dict[str, Any], reference: dict[str, Any]) -> str | None:
    """How `reply` differs from `reference` (the same image's answer), or None."""
    answer, expected = answer_columns(reply) or {}, answer_columns(reference) or {}
    if answer.get("class_id") != expected.get("class_id"):
        return f"class_id {answer.get('class_id')} and {expected.get('class_id')}"
    try:
        difference = float(np.max(np.abs(np.asarray(answer.get("probabilities"), float)
                                          - np.asarray(expected.get("probabilities"), float))))
    except (TypeError, ValueError):
        return "probabilities of another shape"
    if not difference <= SAME_ANSWER_TOLERANCE:
        return f"probabilities {difference:.2g} apart"
    return None


def _mib(size: int | None) -> float | None:
    return None if size is None else round(size / 2**20, 1)


def check_candidate(server: ModelServer, model_dir: str, requests: list[Request],
                    limits: Limits) -> InfraResult:
    """Start `server`, load `model_dir` into it, send `requests`, judge against `limits`."""
    result = InfraResult(server=server.kind, memory_limit=limits.memory_limit,
                         signatures=sorted(serving_signatures(model_dir)))
    latencies: list[float] = []
    try:
        result.start_seconds = round(server.start(START_TIMEOUT_SECONDS), 2)
        try:
            loaded = server.load(model_dir, limits.max_load_seconds)
        except ServerTimeout:
            return result.refuse(f"the candidate did not load within infra.max_load_seconds "
                                 f"{limits.max_load_seconds:g} s")
        if "error" in loaded:
            return result.refuse(loaded["error"])
        result.load_seconds = round(loaded["seconds"], 3)
        replies = []
        for number, request in enumerate(requests, 1):
            started = time.perf_counter()
            reply = server.predict(request.body)
            if request.timed:
                latencies.append((time.perf_counter() - started) * 1000)
            result.requests = number
            replies.append(reply)
            if "error" in reply or answer_columns(reply) is None:
                return result.refuse(f"request {number} of {len(requests)} ({request.label}) "
                                     f"failed: {reply.get('error') or 'no outputs in the reply'}")
            if request.same_as is not None:
                differs = different_answer(reply, replies[request.same_as])
                if differs:
                    return result.refuse(
                        f"request {number} of {len(requests)} ({request.label}) and request "
                        f"{request.same_as + 1} ({requests[request.same_as].label}) answered "
                        f"differently for the same image: {differs}")
    except ModelServerError as error:
        return result.refuse(str(error))
    finally:
        result.peak_rss_mb = _mib(server.memory_peak_bytes())
        if latencies:  # of the timed requests
            result.p50_ms = round(float(np.percentile(latencies, 50)), 2)
            result.p99_ms = round(float(np.percentile(latencies, 99)), 2)
        if server.over_limit():
            result.refuse(f"peak resident memory {result.peak_rss_mb:.0f} MiB is over "
                          f"infra.limits.memory {limits.memory_limit}")
    if result.p99_ms is not None and result.p99_ms > limits.p99_latency_ms:
        return result.refuse(f"p99 latency {result.p99_ms:.1f} ms over {len(latencies)} "
                             f"requests is above infra.p99_latency_ms "
                             f"{limits.p99_latency_ms:g}")
    result.blessed = not result.reason
    return result

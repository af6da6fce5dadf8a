"""`infra`: the InfraValidator's keys (components/infra/), composed by pipelines/config.py.

    infra = InfraSection(num_examples=8)
    infra.memory_limit_bytes      # 4 GiB: limits.memory, the serving Deployment's

The defaults of `requests` and `limits` are those of the CPU serving Deployment
(`mptfx-serving-cpu` in k8s/base/serving.yaml): the candidate is judged under the memory it
will get in production. Importing this module is cheap (pydantic only).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from components.core.sections import StrictSection

# A Kubernetes quantity of bytes: 4Gi, 512Mi, 2G, 1500000000.
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_FACTORS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
            "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
# An image reference pinned by its content: NAME[:TAG]@sha256:<64 hex digits>.
_DIGEST_PINNED = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")


def quantity_bytes(quantity: str) -> int:
    """Bytes of a Kubernetes memory quantity ("4Gi" -> 4294967296).

    Raises:
        ValueError: not a quantity of bytes.
    """
    match = _QUANTITY.match(quantity.strip())
    if not match:
        raise ValueError(f"not a memory quantity such as 4Gi or 512Mi. Received: {quantity!r}")
    return int(float(match.group(1)) * _FACTORS[match.group(2)])


class InfraSection(StrictSection):
    """The check between the Evaluator and the Pusher (docs/guide/infra-validation.md)."""

    # Eval examples sent one by one through serving_default, after the warm-up records.
    num_examples: int = Field(16, ge=1, le=10_000)
    # The candidate must load (and replay its warm-up records) within this many seconds.
    max_load_seconds: float = Field(60.0, gt=0)
    # p99 of the requests' latencies must stay at or under this many milliseconds.
    p99_latency_ms: float = Field(250.0, gt=0)
    # The serving Deployment's resources (mptfx-serving-cpu): the local check holds the
    # model process to limits.memory; on Kubernetes the TF Serving sidecar gets both.
    requests: dict[str, str] = Field(default_factory=lambda: {
        "cpu": "2", "memory": "2Gi", "ephemeral-storage": "256Mi"})
    limits: dict[str, str] = Field(default_factory=lambda: {
        "cpu": "4", "memory": "4Gi", "ephemeral-storage": "1Gi"})
    # Kubernetes: the TF Serving image the check runs, pinned by digest
    # (tensorflow/serving:2.16.1@sha256:...); "" = the node pod checks in its own TensorFlow.
    serving_image: str = ""

    @field_validator("limits")
    @classmethod
    def _memory_limit(cls, limits: dict[str, str]) -> dict[str, str]:
        if not str(limits.get("memory", "")).strip():
            raise ValueError("infra.limits.memory must be set (the serving Deployment's "
                             "memory limit, e.g. 4Gi)")
        quantity_bytes(limits["memory"])
        return limits

    @field_validator("serving_image")
    @classmethod
    def _pinned_by_digest(cls, image: str) -> str:
        if image and not _DIGEST_PINNED.match(image):
            raise ValueError("infra.serving_image must be pinned by digest, e.g. "
                             "tensorflow/serving:2.16.1@sha256:<64 hex digits> "
                             "(`crane digest tensorflow/serving:2.16.1` prints it), or \"\"")
        return image

    @property
    def memory_limit_bytes(self) -> int:
        """`limits.memory` in bytes."""
        return quantity_bytes(self.limits["memory"])

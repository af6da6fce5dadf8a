"""The one edge between the canary analysis and Prometheus' HTTP API (`/api/v1/query`).

Every failure to get an answer becomes `PrometheusUnreachable` (a UsageError, exit 2) whose
one line names the host; a query Prometheus refuses (bad PromQL) is `PrometheusQueryError`.

    prometheus = Prometheus("http://127.0.0.1:9090", timeout_seconds=10)
    prometheus.scalar('sum(up{job="mptfx-serving"})')   # 2.0, or None when nothing matched
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from components.errors import UsageError


class PrometheusUnreachable(UsageError):
    """Prometheus did not answer: nothing was changed (exit 2)."""


class PrometheusQueryError(RuntimeError):
    """Prometheus answered but refused the query (a PromQL error in mptfx: a bug)."""


@dataclass(frozen=True)
class Sample:
    """One series of an instant vector: its labels and its value."""

    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Prometheus:
    """Instant queries against one Prometheus server."""

    url: str
    timeout_seconds: float = 10.0

    @property
    def host(self) -> str:
        """host:port, as the error lines name it."""
        parts = urlsplit(self.url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return f"{parts.hostname}:{port}"

    def vector(self, promql: str) -> list[Sample]:
        """Evaluate `promql` now; an empty list when no series matched. NaN values (0/0)
        are left out: for a ratio they mean "no data", not a number."""
        import requests

        try:
            reply = requests.get(f"{self.url}/api/v1/query", params={"query": promql},
                                 timeout=self.timeout_seconds)
        except requests.Timeout:
            raise PrometheusUnreachable(
                f"Prometheus {self.host} did not answer within {self.timeout_seconds:g} s "
                f"(serving.analysis.query_timeout_seconds)") from None
        except requests.RequestException as error:
            raise PrometheusUnreachable(
                f"Prometheus {self.host} is unreachable ({_reason(error)}); check "
                f"serving.analysis.prometheus_url") from None
        body = _json(reply)
        if reply.status_code >= 500 or body is None:
            raise PrometheusUnreachable(
                f"Prometheus {self.host} answered HTTP {reply.status_code} without a query "
                f"result; is serving.analysis.prometheus_url Prometheus' own URL?")
        if body.get("status") != "success":
            raise PrometheusQueryError(f"Prometheus {self.host} refused {promql!r}: "
                                       f"{body.get('errorType')}: {body.get('error')}")
        data = body["data"]
        if data["resultType"] == "scalar":
            value = float(data["result"][1])
            return [] if math.isnan(value) else [Sample({}, value)]
        samples = [Sample(dict(series["metric"]), float(series["value"][1]))
                   for series in data["result"]]
        return [s for s in samples if not math.isnan(s.value)]

    def scalar(self, promql: str) -> float | None:
        """The value of a query that yields at most one series (None when it yields none)."""
        samples = self.vector(promql)
        if len(samples) > 1:
            raise PrometheusQueryError(f"{promql!r} gave {len(samples)} series, expected one")
        return samples[0].value if samples else None


def _json(reply: Any) -> dict | None:
    try:
        body = reply.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) and "status" in body else None


def _reason(error: Exception) -> str:
    text = str(error)
    for known in ("Connection refused", "Name or service not known",
                  "Temporary failure in name resolution", "No route to host"):
        if known in text:
            return known.lower()
    return type(error).__name__

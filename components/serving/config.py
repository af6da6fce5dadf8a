"""`serving`: the serving package's keys (`ServingSection`: gateway, canary weight, alert
budgets) and `serving.analysis`, how `mptfx serve rollout` judges a canary
(docs/guide/canary.md). pipelines/sections.py adds the monitor's `request_log`.

The rollout steps the HTTPRoute's canary weight through `steps`; at each step it waits
`interval` seconds, then asks Prometheus about the last `interval` seconds of the canary's
traffic. A check passes, fails, or is inconclusive (fewer than `min_requests` canary
requests); `failure_limit` failed checks abort the rollout, `inconclusive_limit` inconclusive
checks in a row give up without promoting.

    settings = AnalysisSection(steps=[20, 100], interval=30)
    settings.window  # "30s", the PromQL range of every query

Importing this module is cheap (pydantic only): the CLI loads it for every command.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator

from components.core.sections import StrictSection


class AnalysisSection(StrictSection):
    """The canary analysis' settings; see configs/local.yaml for every key's meaning."""

    # Prometheus' HTTP API root (what `/api/v1/query` is under).
    prometheus_url: str = "http://127.0.0.1:9090"
    # Percent of predict requests the canary gets at each step; all passing promotes.
    steps: list[int] = Field(default_factory=lambda: [10, 25, 50, 100])
    # Seconds each check waits, and the window its queries cover (at least 2 scrapes).
    interval: float = Field(120.0, gt=0)
    # Failed checks (over the whole rollout) that abort it.
    failure_limit: int = Field(2, ge=1)
    # Inconclusive checks in a row that give up (no promotion; the canary keeps its label).
    inconclusive_limit: int = Field(5, ge=1)
    # Fewer canary predict requests than this in a window: inconclusive, the step holds.
    min_requests: int = Field(100, ge=1)
    # A check fails when more than this fraction of the canary's requests fail...
    max_error_rate: float = Field(0.01, ge=0, le=1)
    # ... or its p99 predict latency (TF Serving's own histogram) is above this ...
    max_p99_latency_ms: float = Field(250.0, gt=0)
    # ... or false: compare predictions at all (the metrics sidecar; classifiers only).
    compare_predictions: bool = True
    # ... or the Jensen-Shannon distance (base 2, 0..1) between the canary's and the
    # stable's predicted-class shares is above this ...
    max_class_distance: float = Field(0.25, ge=0, le=1)
    # ... or the canary's mean top-1 confidence is below the stable's by more than this.
    max_confidence_drop: float = Field(0.1, ge=0, le=1)
    # How long one Prometheus query may take before Prometheus counts as unreachable.
    query_timeout_seconds: float = Field(10.0, gt=0)

    @field_validator("prometheus_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("serving.analysis.prometheus_url must be Prometheus' http(s) URL, "
                             f"e.g. http://127.0.0.1:9090. Received: {url!r}")
        return url.strip().rstrip("/")

    @field_validator("steps")
    @classmethod
    def _increasing_percentages(cls, steps: list[int]) -> list[int]:
        if not steps:
            raise ValueError("serving.analysis.steps must list at least one canary weight, "
                             "e.g. [10, 25, 50, 100]")
        if any(not 1 <= step <= 100 for step in steps):
            raise ValueError(f"serving.analysis.steps are percentages from 1 to 100. "
                             f"Received: {steps}")
        if any(later <= earlier for earlier, later in zip(steps, steps[1:], strict=False)):
            raise ValueError(f"serving.analysis.steps must increase. Received: {steps}")
        return steps

    @property
    def window(self) -> str:
        """The PromQL range of one check: the last `interval` seconds."""
        return f"{max(1, round(self.interval))}s"


class ServingSection(StrictSection):
    """Traffic split and monitoring around TF Serving (`mptfx serve`, components/serving/);
    pipelines/sections.py adds the monitor's `request_log` to it."""

    # The Gateway API Gateway the rendered HTTPRoute attaches to ("" namespace = the route's).
    gateway: str = "mptfx-gateway"
    gateway_namespace: str = ""
    # `mptfx serve canary VERSION` without --weight: this percentage of predict requests.
    canary_weight: int = Field(10, ge=0, le=100)
    # PrometheusRule alerts: p99 request latency above this, error ratio above max_error_rate.
    p99_latency_budget_ms: float = Field(250.0, gt=0)
    max_error_rate: float = Field(0.01, gt=0, le=1)
    # `mptfx serve rollout`: the automatic canary analysis (AnalysisSection above).
    analysis: AnalysisSection = Field(default_factory=AnalysisSection)

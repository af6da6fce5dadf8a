"""One check of a canary: PromQL over TF Serving's own metrics and the metrics sidecar's,
and the verdict on what came back.

What each series is, and why the queries read the ones they read (TF Serving 2.16's
`tensorflow_serving/servables/tensorflow/util.cc` and `model_servers/http_server.cc`):

- `:tensorflow:serving:request_count{model_name, status}` counts every request TF Serving
  answered, readiness probes (`GET /v1/models/<name>`) included, by status code name (`OK`,
  `INVALID_ARGUMENT`, ...). Failed requests are its `status!="OK"` series.
- `:tensorflow:serving:request_latency_bucket{model_name, API, entrypoint, le}` (µs) is only
  recorded for requests that succeeded; `API="predict"` (REST) or `"Predict"` (gRPC) leaves
  the probes (API="") out. Its `_count` is the successful predict requests.
- Neither carries a version or a label: one TF Serving process serves all of them. The
  canary is told apart by where it runs: the canary's own pods, whose scrape targets carry
  `track="canary"` (the ServiceMonitor copies the pod label `mptfx.dev/track`), the stable
  pods `track="stable"`.
- The metrics sidecar in front of each pod's REST port (components/serving/sidecar.py)
  exports what TF Serving does not: `mptfx_serving_predictions_total{model_name, class_id}`
  and the histogram `mptfx_serving_top1_confidence` of the answers it passed on.

    check = measure(prometheus, "digits", settings, weight=10, reference_window="300s")
    verdict = judge(check, settings)     # Verdict("failed", ["success rate 95.0 % < 99.0 %"])
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from components.serving.config import AnalysisSection
from components.serving.prometheus import Prometheus

TRACK_LABEL = "track"
STABLE_TRACK, CANARY_TRACK = "stable", "canary"
REQUEST_COUNT = ":tensorflow:serving:request_count"
REQUEST_LATENCY = ":tensorflow:serving:request_latency"
PREDICT_APIS = "predict|Predict"  # REST and gRPC names of the Predict API
PREDICTIONS = "mptfx_serving_predictions_total"
CONFIDENCE = "mptfx_serving_top1_confidence"
PASSED, FAILED, INCONCLUSIVE = "passed", "failed", "inconclusive"


def _selector(model_name: str, track: str, *extra: str) -> str:
    return ",".join([f'model_name="{model_name}"', f'{TRACK_LABEL}="{track}"', *extra])


@dataclass(frozen=True)
class Queries:
    """The PromQL of one check for `model_name`, over `window` (e.g. "120s")."""

    model_name: str
    window: str

    def targets_up(self, track: str) -> str:
        """How many scrape targets of `track` answered a scrape during the window (one slow
        scrape of a busy pod does not make it absent)."""
        return (f'count(max_over_time(up{{{TRACK_LABEL}="{track}"}}[{self.window}]) == 1)')

    def successful_predicts(self, track: str) -> str:
        selector = _selector(self.model_name, track, f'API=~"{PREDICT_APIS}"')
        return f"sum(increase({REQUEST_LATENCY}_count{{{selector}}}[{self.window}]))"

    def failed_requests(self, track: str) -> str:
        selector = _selector(self.model_name, track, 'status!="OK"')
        return f"sum(increase({REQUEST_COUNT}{{{selector}}}[{self.window}]))"

    def p99_latency_us(self, track: str) -> str:
        selector = _selector(self.model_name, track, f'API=~"{PREDICT_APIS}"')
        return (f"histogram_quantile(0.99, sum by (le) "
                f"(rate({REQUEST_LATENCY}_bucket{{{selector}}}[{self.window}])))")

    def predicted_classes(self, track: str, window: str | None = None) -> str:
        selector = _selector(self.model_name, track)
        return (f"sum by (class_id) "
                f"(increase({PREDICTIONS}{{{selector}}}[{window or self.window}]))")

    def mean_confidence(self, track: str, window: str | None = None) -> str:
        selector = _selector(self.model_name, track)
        span = window or self.window
        return (f"sum(increase({CONFIDENCE}_sum{{{selector}}}[{span}])) / "
                f"sum(increase({CONFIDENCE}_count{{{selector}}}[{span}]))")


@dataclass
class Check:
    """What Prometheus said about the canary during one window, and what it was compared
    with (the stable's predictions since the rollout began: at 100 % the stable gets none)."""

    weight: int
    window: str
    canary_targets: int
    requests: float
    failed: float
    p99_latency_ms: float | None
    canary_classes: dict[str, float] = field(default_factory=dict)
    stable_classes: dict[str, float] = field(default_factory=dict)
    canary_confidence: float | None = None
    stable_confidence: float | None = None
    class_distance: float | None = None

    @property
    def success_rate(self) -> float | None:
        """Successful share of the canary's requests (None without requests)."""
        return (self.requests - self.failed) / self.requests if self.requests else None

    @property
    def confidence_drop(self) -> float | None:
        """How far the canary's mean top-1 confidence is below the stable's."""
        if self.canary_confidence is None or self.stable_confidence is None:
            return None
        return self.stable_confidence - self.canary_confidence

    def numbers(self) -> dict[str, Any]:
        """The check as JSON-able numbers (what MLflow and rollout.json record)."""
        record = asdict(self)
        record.update(success_rate=self.success_rate, confidence_drop=self.confidence_drop)
        return record


def class_distance(canary: dict[str, float], stable: dict[str, float]) -> float | None:
    """Jensen-Shannon distance (base 2: 0 same shares, 1 disjoint) between two predicted-class
    count vectors; None when either side predicted nothing."""
    from scipy.spatial.distance import jensenshannon

    classes = sorted(set(canary) | set(stable))
    p = [canary.get(c, 0.0) for c in classes]
    q = [stable.get(c, 0.0) for c in classes]
    if sum(p) <= 0 or sum(q) <= 0:
        return None
    return float(jensenshannon(p, q, base=2))


def _count(prometheus: Prometheus, promql: str) -> float:
    value = prometheus.scalar(promql)
    return 0.0 if value is None else value


def _classes(prometheus: Prometheus, promql: str) -> dict[str, float]:
    return {s.labels.get("class_id", ""): s.value for s in prometheus.vector(promql)
            if s.value > 0}


def measure(prometheus: Prometheus, model_name: str, settings: AnalysisSection, weight: int,
            reference_window: str) -> Check:
    """Ask Prometheus about the canary's last `settings.interval` seconds."""
    queries = Queries(model_name, settings.window)
    successful = _count(prometheus, queries.successful_predicts(CANARY_TRACK))
    failed = _count(prometheus, queries.failed_requests(CANARY_TRACK))
    p99 = prometheus.scalar(queries.p99_latency_us(CANARY_TRACK))
    check = Check(weight=weight, window=settings.window,
                  canary_targets=int(_count(prometheus, queries.targets_up(CANARY_TRACK))),
                  requests=successful + failed, failed=failed,
                  p99_latency_ms=None if p99 is None or math.isinf(p99) else p99 / 1000)
    if settings.compare_predictions:
        check.canary_classes = _classes(prometheus, queries.predicted_classes(CANARY_TRACK))
        check.stable_classes = _classes(
            prometheus, queries.predicted_classes(STABLE_TRACK, reference_window))
        check.canary_confidence = prometheus.scalar(queries.mean_confidence(CANARY_TRACK))
        check.stable_confidence = prometheus.scalar(
            queries.mean_confidence(STABLE_TRACK, reference_window))
        check.class_distance = class_distance(check.canary_classes, check.stable_classes)
    return check


@dataclass(frozen=True)
class Verdict:
    """passed, failed or inconclusive, with the reasons in words (empty when passed)."""

    outcome: str
    reasons: tuple[str, ...] = ()

    @property
    def because(self) -> str:
        """The reasons as one clause."""
        return "; ".join(self.reasons)


def judge(check: Check, settings: AnalysisSection) -> Verdict:
    """Fail on errors, latency or shifted predictions; inconclusive without enough traffic."""
    if check.canary_targets == 0:
        return Verdict(INCONCLUSIVE, (f"no canary target is up in Prometheus (no "
                                      f'up{{{TRACK_LABEL}="{CANARY_TRACK}"}} == 1 in '
                                      f"{check.window}; is the canary Deployment scaled "
                                      f"to 0?)",))
    if check.requests < settings.min_requests:
        return Verdict(INCONCLUSIVE, (f"{check.requests:.0f} canary requests in "
                                      f"{check.window} < serving.analysis.min_requests "
                                      f"{settings.min_requests}",))
    failures = []
    floor = 1 - settings.max_error_rate
    if check.success_rate < floor:
        failures.append(f"success rate {check.success_rate:.1%} < {floor:.1%}")
    if check.p99_latency_ms is not None and check.p99_latency_ms > settings.max_p99_latency_ms:
        failures.append(f"p99 latency {check.p99_latency_ms:.0f} ms > "
                        f"{settings.max_p99_latency_ms:g} ms")
    if settings.compare_predictions:
        failures += _prediction_failures(check, settings)
        if not failures and check.class_distance is None:
            side = "canary" if not check.canary_classes else "stable"
            return Verdict(INCONCLUSIVE, (f"no {side} predictions exported by the metrics "
                                          f"sidecar ({PREDICTIONS})",))
    return Verdict(FAILED, tuple(failures)) if failures else Verdict(PASSED)


def _prediction_failures(check: Check, settings: AnalysisSection) -> list[str]:
    failures = []
    if check.class_distance is not None and check.class_distance > settings.max_class_distance:
        top_class, top = max(check.canary_classes.items(), key=lambda item: item[1])
        share = top / sum(check.canary_classes.values())
        failures.append(f"predicted-class distance {check.class_distance:.2f} > "
                        f"{settings.max_class_distance:g} (Jensen-Shannon; class {top_class} "
                        f"is {share:.0%} of the canary's answers)")
    drop = check.confidence_drop
    if drop is not None and drop > settings.max_confidence_drop:
        failures.append(f"mean top-1 confidence {check.canary_confidence:.2f} is "
                        f"{drop:.2f} below the stable's {check.stable_confidence:.2f} "
                        f"(> {settings.max_confidence_drop:g})")
    return failures


def describe(check: Check) -> str:
    """The numbers of a check in one clause, for the log line."""
    parts = [f"{check.requests:.0f} requests"]
    if check.success_rate is not None:
        parts.append(f"success {check.success_rate:.1%}")
    if check.p99_latency_ms is not None:
        parts.append(f"p99 {check.p99_latency_ms:.1f} ms")
    if check.class_distance is not None:
        parts.append(f"class distance {check.class_distance:.3f}")
    if check.confidence_drop is not None:
        parts.append(f"confidence {check.canary_confidence:.2f} vs {check.stable_confidence:.2f}")
    return ", ".join(parts)

"""`mptfx serve rollout`: step the canary's traffic up while Prometheus says it is healthy.

For each weight of `serving.analysis.steps` the route sends that share of predict requests to
the canary label; every `interval` seconds one check (components/serving/analysis.py) asks
Prometheus about the last interval:

- passed: the next step (after the last one: promote, the canary becomes stable);
- failed: the step holds; the `failure_limit`-th failed check of the rollout aborts it:
  weight 0, then the canary label and its `challenger` alias go; the stable is untouched;
- inconclusive (too little traffic, no canary target, Prometheus not answering): the step
  holds; `inconclusive_limit` of them in a row give up: weight 0, the labels stay as they
  are, so a later rollout (the CronJob's next run) can judge the canary again. Never promotes.

The route always moves before models.config: no request is ever sent to a label that is
about to disappear (TF Serving re-reads models.config only every poll interval).

    report = run_rollout(target, registry, settings, Prometheus(url), set_weight, recorder)
    report.outcome   # "promoted" | "aborted" | "inconclusive"
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from components.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_PIPELINE_FAILED
from components.serving.analysis import (
    FAILED,
    INCONCLUSIVE,
    PASSED,
    Check,
    Verdict,
    describe,
    judge,
    measure,
)
from components.serving.config import AnalysisSection
from components.serving.models_config import ServingLabels
from components.serving.prometheus import Prometheus, PrometheusUnreachable
from pipelines import rollout_verbs as rollout

PROMOTED, ABORTED = "promoted", "aborted"
EXIT_CODES = {PROMOTED: EXIT_OK, ABORTED: EXIT_PIPELINE_FAILED, INCONCLUSIVE: EXIT_INCONCLUSIVE}


class RolloutRecorder(Protocol):
    """Where every check and the outcome are recorded as they happen (MLflow)."""

    def check(self, record: dict[str, Any]) -> None: ...

    def finish(self, report: RolloutReport) -> None: ...


@dataclass
class RolloutReport:
    """What a rollout decided, and every check behind it (rollout.json)."""

    model_name: str
    canary: int
    stable: int
    outcome: str = ""
    reason: str = ""
    weight: int = 0
    checks: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)
    aliases_moved: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        """0 promoted, 1 aborted, 3 gave up (inconclusive)."""
        return EXIT_CODES[self.outcome]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, with the exit code."""
        return {**dataclasses.asdict(self), "exit_code": self.exit_code}


@dataclass
class _Progress:
    failed_checks: int = 0
    checks: int = 0


def run_rollout(target: rollout.ServingTarget, registry: rollout.RegistryView,
                settings: AnalysisSection, prometheus: Prometheus,
                set_weight: Callable[[int], None],
                start_recorder: Callable[[RolloutReport], RolloutRecorder] | None = None,
                say: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep,
                clock: Callable[[], float] = time.monotonic) -> RolloutReport:
    """Judge the canary of `target` step by step; promote, abort or give up.

    `start_recorder(report)` is called once Prometheus answered, before the first step: the
    recorder gets every check as it is made, then the outcome.

    Raises RolloutRefused (nothing changed) when there is no servable canary, and
    PrometheusUnreachable (nothing changed) when Prometheus does not answer before the first
    step.
    """
    labels = target.labels()
    if labels.canary is None:
        raise rollout.RolloutRefused(f"no canary in {target.config_path}: nothing to roll out")
    rollout.require_servable(target, registry, labels.canary)
    prometheus.vector("up")  # unreachable: the line names the host, and nothing has moved
    report = RolloutReport(target.model_name, labels.canary, labels.stable)
    recorder = start_recorder(report) if start_recorder is not None else None
    started = clock()
    say(f"mptfx serve rollout: {target.model_name} canary {labels.canary} beside stable "
        f"{labels.stable}; steps {', '.join(map(str, settings.steps))} % every "
        f"{settings.interval:g} s; Prometheus {prometheus.host}")
    progress = _Progress()
    for number, weight in enumerate(settings.steps, 1):
        set_weight(weight)
        report.weight = weight
        say(f"  step {number}/{len(settings.steps)}: {weight} % of predict requests to the "
            f"canary")
        verdict = _hold_step(target, settings, prometheus, recorder, say, sleep, clock,
                             report, progress, started)
        if verdict.outcome != PASSED:
            return _finish(target, registry, recorder, say, set_weight, report, verdict,
                           clock() - started)
    return _finish(target, registry, recorder, say, set_weight, report, Verdict(PASSED),
                   clock() - started)


def _hold_step(target, settings, prometheus, recorder, say, sleep, clock, report, progress,
               started) -> Verdict:
    """Check every interval until one check passes, the failures reach the limit, or the
    inconclusive checks in a row do; returns that last verdict."""
    inconclusive_in_a_row = 0
    while True:
        sleep(settings.interval)
        progress.checks += 1
        # The stable's predictions since the rollout began: at 100 % it gets none.
        reference = f"{math.ceil(clock() - started + settings.interval)}s"
        check: Check | None = None
        try:
            check = measure(prometheus, target.model_name, settings, report.weight, reference)
            verdict = judge(check, settings)
        except PrometheusUnreachable as error:
            verdict = Verdict(INCONCLUSIVE, (str(error),))
        if verdict.outcome == FAILED:
            progress.failed_checks += 1
        inconclusive_in_a_row = inconclusive_in_a_row + 1 if verdict.outcome == INCONCLUSIVE \
            else 0
        record = {"check": progress.checks, "weight": report.weight,
                  "outcome": verdict.outcome, "reasons": list(verdict.reasons),
                  "failed_checks": progress.failed_checks,
                  **({} if check is None else check.numbers())}
        report.checks.append(record)
        if recorder is not None:
            recorder.check(record)
        numbers = f" ({describe(check)})" if check is not None else ""
        because = f": {verdict.because}" if verdict.reasons else ""
        say(f"  check {progress.checks} at {report.weight} %: {verdict.outcome}{because}"
            f"{numbers}")
        if verdict.outcome == PASSED:
            return verdict
        if verdict.outcome == FAILED and progress.failed_checks >= settings.failure_limit:
            return dataclasses.replace(verdict, reasons=verdict.reasons + (
                f"{progress.failed_checks} failed checks, serving.analysis.failure_limit "
                f"{settings.failure_limit}",))
        if inconclusive_in_a_row >= settings.inconclusive_limit:
            return dataclasses.replace(verdict, reasons=verdict.reasons + (
                f"{inconclusive_in_a_row} inconclusive checks in a row, "
                f"serving.analysis.inconclusive_limit {settings.inconclusive_limit}",))


def _finish(target, registry, recorder, say, set_weight, report: RolloutReport,
            verdict: Verdict, seconds: float) -> RolloutReport:
    """Route first (weight 0: every predict request to the stable label), then labels."""
    set_weight(0)  # safe whatever happened: every predict request to the stable label
    current = target.labels()
    if current.canary != report.canary:
        raise rollout.RolloutRefused(
            f"models.config changed during the rollout (canary is now {current.canary}, was "
            f"{report.canary}); the route sends nothing to the canary label, and no label "
            f"or alias was changed")
    report.weight = 0
    report.seconds = round(seconds, 1)
    if verdict.outcome == PASSED:
        report.outcome = PROMOTED
        labels = rollout.promote(target, registry)
    elif verdict.outcome == FAILED:
        report.outcome, report.reason = ABORTED, verdict.because
        labels = dataclasses.replace(current, canary=None)
    else:
        report.outcome, report.reason = INCONCLUSIVE, verdict.because
        labels = current
    if labels != current:
        report.aliases_moved = rollout.apply(target, registry, labels)
    report.labels = labels.as_dict()
    if recorder is not None:
        recorder.finish(report)
    say(f"  route: 0 % to the canary label; {target.model_name} serves "
        f"{_served(labels)}; aliases: {'; '.join(report.aliases_moved) or 'unchanged'}")
    return report


def _served(labels: ServingLabels) -> str:
    return ", ".join(f"{name} {version}" for name, version in labels.as_dict().items())


def outcome_line(report: RolloutReport) -> str:
    """The one line that ends a rollout (stdout when promoted, the error line otherwise)."""
    where = f"{report.model_name} canary {report.canary}"
    if report.outcome == PROMOTED:
        return (f"mptfx serve rollout: promoted {where} to stable after "
                f"{len(report.checks)} checks in {report.seconds:g} s")
    if report.outcome == ABORTED:
        return (f"serve rollout: aborted {where} at {report.checks[-1]['weight']} %: "
                f"{report.reason}; stable {report.stable} serves every request, the canary "
                f"label and its challenger alias are removed")
    return (f"serve rollout: gave up on {where} at {report.checks[-1]['weight']} %, not "
            f"promoted: {report.reason}; the route sends nothing to the canary, which keeps "
            f"its label for the next rollout")

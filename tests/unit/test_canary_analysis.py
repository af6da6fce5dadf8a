"""The canary analysis' pieces that run in this process: its configuration, the verdict on
what Prometheus said, the distance between predicted-class shares, the metrics sidecar's
reading of TF Serving's answers, and the rollout CronJob's deadline. What it asks a real
Prometheus, and what a rollout does to models.config, the route and MLflow, is
tests/e2e/test_rollout_e2e.py."""

from __future__ import annotations

import pytest

from components.serving.analysis import FAILED, INCONCLUSIVE, PASSED, Check, class_distance, judge
from components.serving.config import AnalysisSection
from components.serving.sidecar import PredictionMetrics, predicted_examples
from pipelines.config import ConfigError, load_config
from pipelines.kubernetes.rollout_job import longest_rollout_seconds, render_rollout_cronjob

UNIFORM = {str(k): 30.0 for k in range(10)}


@pytest.mark.parametrize("override, named", [
    ('serving.analysis.prometheus_url=""', "'serving.analysis.prometheus_url'"),
    ("serving.analysis.prometheus_url=' '", "must be Prometheus' http(s) URL"),
    ("serving.analysis.prometheus_url=prometheus:9090", "Received: 'prometheus:9090'"),
    ("serving.analysis.steps=[]", "at least one canary weight"),
    ("serving.analysis.steps=[50, 25, 100]", "must increase"),
    ("serving.analysis.steps=[10, 150]", "percentages from 1 to 100"),
    ("serving.analysis.interval=0", "'serving.analysis.interval'"),
    ("serving.analysis.failure_limit=0", "'serving.analysis.failure_limit'"),
    ("serving.analysis.max_error=0.1", "unknown config key 'serving.analysis.max_error'"),
])
def test_bad_analysis_settings_are_one_line_naming_the_key(override, named):
    with pytest.raises(ConfigError) as refused:
        load_config(None, [override])
    message = str(refused.value)
    assert named in message and "\n" not in message, message
    assert message.endswith(f"(from --set {override})")


def test_the_defaults_are_the_documented_ones():
    analysis = load_config("configs/local.yaml").serving.analysis
    assert analysis == AnalysisSection()
    assert analysis.steps == [10, 25, 50, 100] and analysis.window == "120s"


def _check(**changes) -> Check:
    values = dict(weight=10, window="120s", canary_targets=1, requests=200, failed=0,
                  p99_latency_ms=20.0, canary_classes=dict(UNIFORM),
                  stable_classes={k: v * 9 for k, v in UNIFORM.items()},
                  canary_confidence=0.84, stable_confidence=0.85)
    values.update(changes)
    check = Check(**values)
    check.class_distance = class_distance(check.canary_classes, check.stable_classes)
    return check


def test_a_healthy_canary_passes():
    assert judge(_check(), AnalysisSection()).outcome == PASSED


def test_five_percent_errors_fail_with_the_success_rate_in_words():
    verdict = judge(_check(failed=10), AnalysisSection())
    assert verdict.outcome == FAILED
    assert verdict.reasons == ("success rate 95.0% < 99.0%",)


def test_a_slow_canary_fails_on_p99_latency():
    verdict = judge(_check(p99_latency_ms=400.0), AnalysisSection(max_p99_latency_ms=250))
    assert verdict.reasons == ("p99 latency 400 ms > 250 ms",)


def test_predictions_collapsed_to_one_class_fail_with_the_distance():
    collapsed = _check(canary_classes={"3": 300.0}, canary_confidence=0.9)
    verdict = judge(collapsed, AnalysisSection())
    assert verdict.outcome == FAILED
    [reason] = verdict.reasons
    assert reason.startswith("predicted-class distance 0.8")
    assert "class 3 is 100% of the canary's answers" in reason


def test_a_canary_much_less_sure_than_the_stable_fails():
    verdict = judge(_check(canary_confidence=0.5), AnalysisSection())
    assert verdict.reasons == ("mean top-1 confidence 0.50 is 0.35 below the stable's 0.85 "
                               "(> 0.1)",)


@pytest.mark.parametrize("changes, why", [
    ({"requests": 40}, "40 canary requests in 120s < serving.analysis.min_requests 100"),
    ({"canary_targets": 0}, "no canary target is up in Prometheus"),
    ({"stable_classes": {}}, "no stable predictions exported by the metrics sidecar"),
])
def test_too_little_to_judge_is_inconclusive_not_a_failure(changes, why):
    verdict = judge(_check(**changes), AnalysisSection())
    assert verdict.outcome == INCONCLUSIVE and why in verdict.because


def test_without_prediction_comparison_only_errors_and_latency_count():
    settings = AnalysisSection(compare_predictions=False)
    assert judge(_check(canary_classes={}, stable_classes={}), settings).outcome == PASSED


def test_class_distance_is_jensen_shannon_in_bits():
    assert class_distance(UNIFORM, {k: 2 * v for k, v in UNIFORM.items()}) == pytest.approx(0)
    assert class_distance({"0": 5.0}, {"1": 5.0}) == pytest.approx(1)
    assert class_distance({}, UNIFORM) is None


def test_the_sidecar_reads_columnar_and_row_answers_and_skips_the_rest():
    columnar = {"outputs": {"class_id": [3, 7], "class_name": ["3", "7"],
                            "probabilities": [[0.1, 0.9], [0.6, 0.4]]}}
    rows = {"predictions": [{"class_id": 1, "probabilities": [0.2, 0.8]}]}
    assert predicted_examples(columnar) == [(3, 0.9), (7, 0.6)]
    assert predicted_examples(rows) == [(1, 0.8)]
    assert predicted_examples({"outputs": [[0.1, 0.9]]}) == []  # predict_normalized
    assert predicted_examples({"outputs": {"probabilities": [[0.2]], "mask": [[1]]}}) == []


def test_the_sidecar_exports_counts_by_class_and_a_confidence_histogram():
    metrics = PredictionMetrics()
    body = b'{"outputs": {"class_id": [3, 3, 5], "probabilities": [[0.9], [0.7], [0.5]]}}'
    assert metrics.observe("digits", body) == 3
    assert metrics.observe("digits", b"not json") == 0
    text = metrics.exposition().decode()
    assert 'mptfx_serving_predictions_total{class_id="3",model_name="digits"} 2.0' in text
    assert 'mptfx_serving_top1_confidence_count{model_name="digits"} 3.0' in text
    assert 'mptfx_serving_top1_confidence_sum{model_name="digits"} 2.1' in text
    assert 'mptfx_serving_unreadable_answers_total{model_name="digits"} 1.0' in text


def test_the_cronjob_deadline_covers_the_longest_rollout_the_settings_allow():
    config = load_config(None, ["serving.analysis.interval=60"])
    analysis = config.serving.analysis
    held = len(analysis.steps) * (analysis.failure_limit + analysis.inconclusive_limit) * 60
    assert longest_rollout_seconds(analysis) > held
    job = render_rollout_cronjob(config)["spec"]["jobTemplate"]["spec"]
    assert job["activeDeadlineSeconds"] == longest_rollout_seconds(analysis)

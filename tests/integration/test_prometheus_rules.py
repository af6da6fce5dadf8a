"""Every rule group mptfx writes, checked by Prometheus' own `promtool` (Debian's prometheus
2.42, installed by scripts/start_services.sh): `promtool check rules` on the groups of the
rendered PrometheusRule and of k8s/base/serving-monitoring.yaml, and `promtool test rules`
unit tests in which each alert fires on the series that should fire it, and stays quiet on
healthy ones."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from pipelines.config import load_config
from pipelines.kubernetes.serving import render_prometheus_rule
from tests.prometheus_server import program

REPO = Path(__file__).resolve().parents[2]
TF_SERVING = 'job="mptfx-serving",endpoint="rest"'
SIDECAR = 'job="mptfx-serving",endpoint="metrics"'
COUNT = ':tensorflow:serving:request_count{model_name="digits",status="%s"}'
BUCKET = (':tensorflow:serving:request_latency_bucket{model_name="digits",API="%s",'
          'entrypoint="REST",le="%s"}')


def _groups(rule: dict) -> dict:
    return {"groups": rule["spec"]["groups"]}


def _rule_files(tmp_path: Path) -> list[Path]:
    rendered = tmp_path / "rendered.rules.yaml"
    rendered.write_text(yaml.safe_dump(_groups(render_prometheus_rule(load_config(
        None, ["serving.p99_latency_budget_ms=80", "serving.max_error_rate=0.05"])))))
    [shipped_rule] = [d for d in yaml.safe_load_all(
        (REPO / "k8s/base/serving-monitoring.yaml").read_text()) if d["kind"] == "PrometheusRule"]
    shipped = tmp_path / "shipped.rules.yaml"
    shipped.write_text(yaml.safe_dump(_groups(shipped_rule)))
    return [rendered, shipped]


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([program("promtool"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_promtool_checks_every_rule_group_mptfx_writes(tmp_path):
    for path in _rule_files(tmp_path):
        result = _promtool("check", "rules", str(path), cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS: 3 rules found" in result.stdout, result.stdout


def test_promtool_refuses_a_broken_expression(tmp_path):
    # Guards the test above: promtool parses the PromQL, it does not just read YAML.
    rule = render_prometheus_rule(load_config(None, []))
    rule["spec"]["groups"][0]["rules"][1]["expr"] = "sum(rate(x[5m]) > "
    path = tmp_path / "broken.rules.yaml"
    path.write_text(yaml.safe_dump(_groups(rule)))
    result = _promtool("check", "rules", str(path), cwd=tmp_path)
    assert result.returncode != 0 and "parse error" in result.stdout + result.stderr


def _alert(rule: dict, name: str) -> dict:
    [alert] = [r for r in rule["spec"]["groups"][0]["rules"] if r.get("alert") == name]
    return alert


def _fires(rule: dict, name: str, at: str) -> dict:
    alert = _alert(rule, name)
    return {"eval_time": at, "alertname": name, "exp_alerts": [
        {"exp_labels": dict(alert["labels"]), "exp_annotations": dict(alert["annotations"])}]}


def _quiet(name: str, at: str) -> dict:
    return {"eval_time": at, "alertname": name, "exp_alerts": []}


def _unit_tests(rule: dict) -> list[dict]:
    """One test per situation, 1-minute samples; each alert once firing and once quiet."""
    series = lambda name, values: {"series": name, "values": values}  # noqa: E731
    return [
        {"interval": "1m", "name": "TF Serving down while its sidecar answers",
         "input_series": [series(f"up{{{TF_SERVING},instance=\"a\"}}", "0x20"),
                          series(f"up{{{SIDECAR},instance=\"a\"}}", "1x20")],
         # `for: 5m`: pending at minute 4, firing from minute 6
         "alert_rule_test": [_quiet("MptfxModelNotAvailable", "4m"),
                             _fires(rule, "MptfxModelNotAvailable", "6m")]},
        {"interval": "1m", "name": "TF Serving up",
         "input_series": [series(f"up{{{TF_SERVING},instance=\"a\"}}", "1x20")],
         "alert_rule_test": [_quiet("MptfxModelNotAvailable", "10m")]},
        {"interval": "1m", "name": "8 % of requests fail",
         "input_series": [series(COUNT % "OK", "0+92x30"),
                          series(COUNT % "INTERNAL", "0+8x30")],
         "alert_rule_test": [_quiet("MptfxModelRequestErrors", "10m"),
                             _fires(rule, "MptfxModelRequestErrors", "20m")]},
        {"interval": "1m", "name": "1 % of requests fail, under the 5 % budget",
         "input_series": [series(COUNT % "OK", "0+99x30"),
                          series(COUNT % "INTERNAL", "0+1x30")],
         "alert_rule_test": [_quiet("MptfxModelRequestErrors", "20m")]},
        {"interval": "1m", "name": "predicts take 100-500 ms; fast probes do not hide it",
         "input_series": [series(BUCKET % ("predict", "50000"), "0x30"),
                          series(BUCKET % ("predict", "500000"), "0+10x30"),
                          series(BUCKET % ("predict", "+Inf"), "0+10x30"),
                          series(BUCKET % ("", "100"), "0+1000x30"),
                          series(BUCKET % ("", "+Inf"), "0+1000x30")],
         "alert_rule_test": [_quiet("MptfxModelLatencyP99", "10m"),
                             _fires(rule, "MptfxModelLatencyP99", "20m")]},
        {"interval": "1m", "name": "predicts under 50 ms",
         "input_series": [series(BUCKET % ("predict", "50000"), "0+10x30"),
                          series(BUCKET % ("predict", "+Inf"), "0+10x30")],
         "alert_rule_test": [_quiet("MptfxModelLatencyP99", "20m")]},
    ]


def test_promtool_unit_tests_cover_each_alert(tmp_path):
    rule = render_prometheus_rule(load_config(None, ["serving.p99_latency_budget_ms=80",
                                                     "serving.max_error_rate=0.05"]))
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(_groups(rule)))
    tests = _unit_tests(rule)
    covered = {t["alertname"] for test in tests for t in test["alert_rule_test"]
               if t["exp_alerts"]}
    assert covered == {r["alert"] for r in rule["spec"]["groups"][0]["rules"]}
    spec = tmp_path / "rules.test.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "1m",
                                    "tests": tests}, sort_keys=False))
    result = _promtool("test", "rules", spec.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize("wrong", ["fires", "quiet"])
def test_promtool_unit_tests_fail_when_the_expectation_is_wrong(tmp_path, wrong):
    # Guards the test above: an alert that should not fire (or should) fails promtool.
    rule = render_prometheus_rule(load_config(None, ["serving.max_error_rate=0.05"]))
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(_groups(rule)))
    [test] = [t for t in _unit_tests(rule) if t["name"] == "1 % of requests fail, under the "
              "5 % budget"]
    if wrong == "fires":
        test["alert_rule_test"] = [_fires(rule, "MptfxModelRequestErrors", "20m")]
    else:
        test["input_series"][1]["values"] = "0+20x30"  # 17 % fail, yet expected quiet
    spec = tmp_path / "rules.test.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [rules.name], "tests": [test]}))
    assert _promtool("test", "rules", spec.name, cwd=tmp_path).returncode != 0

"""The Kubernetes runner against a test double of the `kubernetes` client (BatchV1Api,
CoreV1Api and CustomObjectsApi for TFJobs): scheduling, failures, retries, podFailurePolicy,
resume and API errors. No API server can run here, so the double stands in at the client
boundary: it deserialises through the real ApiClient and applies the Job's own backoffLimit
and podFailurePolicy the way the Job controller does. Its pods finish on a script;
tests/image/test_container_replay.py runs their containers in the built image instead.
"""

from __future__ import annotations

import io

import pytest

from pipelines.config import Config
from pipelines.kubernetes.api import KubernetesError
from pipelines.kubernetes.driver import KubernetesRunner
from pipelines.kubernetes.ir import NodePlan
from pipelines.kubernetes.manifests import job_name
from pipelines.kubernetes.status import node_logs, run_status
from tests.k8s_double import ScriptedCluster, api_error

# A -> (B, C) -> D : two parallel branches joined again, like Ingest -> ... -> Evaluator.
DIAMOND = [
    NodePlan("A", (), "cpu"),
    NodePlan("B", ("A",), "cpu"),
    NodePlan("C", ("A",), "cpu"),
    NodePlan("D", ("B", "C"), "cpu"),
]


def _runner(cluster, tmp_path, sleep=lambda _: None, config=None):
    out = io.StringIO()
    runner = KubernetesRunner(config or Config(), cluster, cluster, cluster, out=out,
                              log_dir=tmp_path / "pods", sleep=sleep)
    return runner, out


def test_independent_branches_run_at_the_same_time(tmp_path):
    cluster = ScriptedCluster(ticks=3)
    runner, out = _runner(cluster, tmp_path)
    report = runner.run("r1", DIAMOND, "/ws/ir.json")
    assert report.succeeded
    nodes = [cluster.jobs[name]["node"] for name in cluster.created]
    assert nodes[0] == "A" and nodes[-1] == "D" and set(nodes[1:3]) == {"B", "C"}
    assert cluster.max_running == 2  # B and C were both running
    assert "> B: Job mptfx-r1-b (pool cpu)" in out.getvalue()
    assert "< D succeeded in" in out.getvalue()
    # Pod logs were streamed into one file per node.
    assert "last words of B" in (tmp_path / "pods" / "B.log").read_text()


def test_a_failing_node_stops_its_downstream_only(tmp_path):
    cluster = ScriptedCluster(script={"B": ["fail", "fail", "fail"]})
    runner, out = _runner(cluster, tmp_path)
    report = runner.run("r2", DIAMOND, "/ws/ir.json")
    assert not report.succeeded and report.failed_nodes == ["B"]
    assert report.nodes["C"].state == "succeeded"  # the other branch finished
    assert report.nodes["D"].state == "skipped"
    assert "mptfx-r2-d" not in cluster.jobs  # never created
    assert report.nodes["B"].retries == 2
    assert "BackoffLimitExceeded" in report.nodes["B"].message
    assert "last log line: last words of B" in report.nodes["B"].message
    assert "- D skipped: upstream B did not succeed" in out.getvalue()


def test_a_retried_pod_that_then_succeeds_counts_as_success(tmp_path):
    cluster = ScriptedCluster(script={"C": ["fail", "ok"]})
    runner, out = _runner(cluster, tmp_path)
    report = runner.run("r3", DIAMOND, "/ws/ir.json")
    assert report.succeeded
    assert report.nodes["C"].retries == 1
    assert "! C: pod failed, Kubernetes retries it (1 of 2 retries used)" in out.getvalue()
    assert "< C succeeded in" in out.getvalue() and "1 retry" in out.getvalue()


def test_a_killed_driver_resumes_without_redoing_finished_nodes(tmp_path):
    cluster = ScriptedCluster(ticks=3)

    def killed_once_b_and_c_run(_seconds):
        if "mptfx-r4-b" in cluster.jobs:  # A finished, B and C are running
            raise KeyboardInterrupt

    runner, _ = _runner(cluster, tmp_path, sleep=killed_once_b_and_c_run)
    with pytest.raises(KeyboardInterrupt):
        runner.run("r4", DIAMOND, "/ws/ir.json")
    assert sorted(cluster.created) == ["mptfx-r4-a", "mptfx-r4-b", "mptfx-r4-c"]

    resumed, out = _runner(cluster, tmp_path)  # a new driver process, same cluster
    report = resumed.run("r4", DIAMOND, "/ws/ir.json")
    assert report.succeeded
    assert cluster.created.count("mptfx-r4-a") == 1  # not redone
    assert sorted(cluster.created) == ["mptfx-r4-a", "mptfx-r4-b", "mptfx-r4-c", "mptfx-r4-d"]
    assert "= A already succeeded (Job mptfx-r4-a)" in out.getvalue()
    assert "~ B still running (Job mptfx-r4-b); watching it" in out.getvalue()


def test_resuming_a_failed_run_retries_only_the_failed_part(tmp_path):
    cluster = ScriptedCluster(script={"B": ["fail", "fail", "fail"]})
    runner, _ = _runner(cluster, tmp_path)
    assert runner.run("r5", DIAMOND, "/ws/ir.json").failed_nodes == ["B"]
    cluster.script = {}  # the cause was fixed
    resumed, out = _runner(cluster, tmp_path)
    report = resumed.run("r5", DIAMOND, "/ws/ir.json")
    assert report.succeeded
    assert report.nodes["B"].attempt == 2 and report.nodes["B"].job == "mptfx-r5-b-a2"
    assert cluster.created.count("mptfx-r5-a") == 1 and cluster.created.count("mptfx-r5-c") == 1
    assert "~ B failed before (BackoffLimitExceeded" in out.getvalue()


@pytest.mark.parametrize("error, expected", [
    (api_error(403, "Forbidden", 'jobs.batch is forbidden: User "system:serviceaccount:mptfx:'
                'default" cannot create resource "jobs" in API group "batch"'),
     "forbidden: cannot create Job mptfx-r6-a in namespace mptfx (the ServiceAccount or user "
     "lacks RBAC rights"),
    (api_error(404, "NotFound", 'namespaces "mptfx" not found'),
     "not found: cannot create Job mptfx-r6-a in namespace mptfx: namespaces \"mptfx\" not "
     "found (is namespace mptfx applied?"),
    (api_error(409, "AlreadyExists", 'jobs.batch "mptfx-r6-a" already exists'),
     "already exists: cannot create Job mptfx-r6-a in namespace mptfx"),
    (api_error(403, "Forbidden", 'jobs.batch "mptfx-r6-a" is forbidden: exceeded quota: '
                'gpu-quota, requested: requests.nvidia.com/gpu=1, used: requests.nvidia.com/'
                'gpu=4, limited: requests.nvidia.com/gpu=4'),
     "quota exceeded: cannot create Job mptfx-r6-a in namespace mptfx: jobs.batch "
     "\"mptfx-r6-a\" is forbidden: exceeded quota: gpu-quota"),
])
def test_api_errors_become_one_clear_line(tmp_path, error, expected):
    cluster = ScriptedCluster(errors={("create", "Job"): error})
    runner, _ = _runner(cluster, tmp_path)
    with pytest.raises(KubernetesError) as caught:
        runner.run("r6", DIAMOND, "/ws/ir.json")
    message = str(caught.value)
    assert message.startswith(expected)
    assert "\n" not in message


def test_an_unreachable_api_server_is_named(tmp_path):
    from urllib3.exceptions import MaxRetryError

    error = MaxRetryError(None, "/apis/batch/v1/namespaces/mptfx/jobs", "Connection refused")
    cluster = ScriptedCluster(errors={("list", "Job"): error})
    runner, _ = _runner(cluster, tmp_path)
    with pytest.raises(KubernetesError, match="^cannot reach the Kubernetes API server to list "
                       "Jobs of run r7 in namespace mptfx"):
        runner.run("r7", DIAMOND, "/ws/ir.json")


def test_cli_prints_an_api_error_as_one_line_with_exit_code_2(monkeypatch, capsys):
    from pipelines import cli, k8s_commands

    cluster = ScriptedCluster(errors={("list", "Job"): api_error(
        403, "Forbidden", 'jobs.batch is forbidden: User "dev@example.com" cannot list '
        'resource "jobs"')})
    monkeypatch.setattr(k8s_commands, "make_clients",
                        lambda in_cluster=False, context=None: (cluster, cluster, None))
    assert cli.main(["k8s", "status", "r8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("mptfx: error: forbidden: cannot list Jobs of run r8 in namespace mptfx")


def test_status_and_logs_read_the_run_back_from_the_cluster(tmp_path):
    cluster = ScriptedCluster(script={"B": ["fail", "ok"]})
    runner, _ = _runner(cluster, tmp_path)
    runner.run("r9", DIAMOND, "/ws/ir.json")
    rows = {row["node"]: row for row in run_status(cluster, "mptfx", "r9")}
    assert list(rows) == ["A", "B", "C", "D"]
    assert rows["B"]["state"] == "succeeded" and rows["B"]["retries"] == 1
    assert rows["A"]["seconds"] == 60.0 and rows["A"]["job"] == job_name("r9", "A")
    logs = dict(node_logs(cluster, cluster, "mptfx", "r9", "D"))
    assert logs == {"mptfx-r9-d-pod0": "log of mptfx-r9-d\nlast words of D\n"}
    with pytest.raises(KubernetesError, match="run r9 has no node 'E'"):
        list(node_logs(cluster, cluster, "mptfx", "r9", "E"))
    with pytest.raises(KubernetesError, match="no Jobs of run nope in namespace mptfx"):
        run_status(cluster, "mptfx", "nope")


def test_a_usage_error_fails_the_job_at_once_while_a_crash_retries(tmp_path):
    # Exit code 2 (bad config or input) would fail the same way on every retry.
    cluster = ScriptedCluster(script={"B": ["exit2", "ok"], "C": ["fail", "ok"]})
    runner, out = _runner(cluster, tmp_path)
    report = runner.run("r10", DIAMOND, "/ws/ir.json")
    assert report.failed_nodes == ["B"] and report.nodes["B"].retries == 0
    assert "PodFailurePolicy" in report.nodes["B"].message
    assert report.nodes["C"].state == "succeeded" and report.nodes["C"].retries == 1
    assert report.nodes["D"].state == "skipped"


TRAINER_PLAN = [
    NodePlan("Ingest", (), "cpu"),
    NodePlan("Trainer", ("Ingest",), "gpu"),
    NodePlan("Evaluator", ("Trainer",), "cpu"),
]


def _tfjob_config():
    return Config.model_validate({"kubernetes": {"trainer": {"workers": 2, "use_tfjob": True}}})


def test_a_killed_driver_resumes_a_run_whose_trainer_is_a_tfjob(tmp_path):
    cluster = ScriptedCluster(ticks=3)

    def killed_while_the_tfjob_runs(_seconds):
        if "mptfx-r11-trainer" in cluster.jobs:
            raise KeyboardInterrupt

    runner, _ = _runner(cluster, tmp_path, sleep=killed_while_the_tfjob_runs,
                        config=_tfjob_config())
    with pytest.raises(KeyboardInterrupt):
        runner.run("r11", TRAINER_PLAN, "/ws/ir.json")
    assert cluster.jobs["mptfx-r11-trainer"]["body"]["kind"] == "TFJob"

    resumed, out = _runner(cluster, tmp_path, config=_tfjob_config())
    report = resumed.run("r11", TRAINER_PLAN, "/ws/ir.json")
    assert report.succeeded, out.getvalue()
    assert cluster.created == ["mptfx-r11-ingest", "mptfx-r11-trainer", "mptfx-r11-evaluator"]
    assert "~ Trainer still running (TFJob mptfx-r11-trainer); watching it" in out.getvalue()

    again, out = _runner(cluster, tmp_path, config=_tfjob_config())  # all done: nothing to do
    assert again.run("r11", TRAINER_PLAN, "/ws/ir.json").succeeded
    assert "= Trainer already succeeded (TFJob mptfx-r11-trainer)" in out.getvalue()
    assert len(cluster.created) == 3
    rows = {row["node"]: row for row in run_status(cluster, "mptfx", "r11", cluster)}
    assert rows["Trainer"]["state"] == "succeeded" and rows["Trainer"]["seconds"] == 120.0


def test_resuming_a_failed_tfjob_run_creates_its_next_attempt(tmp_path):
    cluster = ScriptedCluster(script={"Trainer": ["fail", "fail", "fail"]})
    runner, _ = _runner(cluster, tmp_path, config=_tfjob_config())
    assert runner.run("r12", TRAINER_PLAN, "/ws/ir.json").failed_nodes == ["Trainer"]
    cluster.script = {}
    resumed, out = _runner(cluster, tmp_path, config=_tfjob_config())
    report = resumed.run("r12", TRAINER_PLAN, "/ws/ir.json")
    assert report.succeeded, out.getvalue()
    assert report.nodes["Trainer"].job == "mptfx-r12-trainer-a2"
    assert cluster.jobs["mptfx-r12-trainer-a2"]["body"]["kind"] == "TFJob"
    assert cluster.created.count("mptfx-r12-ingest") == 1
    assert "~ Trainer failed before (TFJobFailed" in out.getvalue()

"""Tracking against real MLflow stores (sqlite files in tmp), without running the pipeline.

The pipeline itself is exercised against a real `mlflow server` in
tests/e2e/test_tracking_e2e.py; here the summaries are synthetic and fast.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import shutil
import time
from pathlib import Path

import pytest

from components import tracking
from components.run_summary import RunSummary
from components.tracking.reader import ClientStoreReader, SqliteStoreReader, open_reader
from components.tracking.store import TrackingStore, local_store_uri, mlflow_client
from components.tracking.sync import sync_workspace
from tests.ports import free_port
from tests.run_summaries import fake_summary

REPO = Path(__file__).resolve().parents[2]


def _store(workspace: Path, **changes) -> TrackingStore:
    settings = dict(uri=local_store_uri(workspace), requested_uri="", workspace=workspace,
                    experiment="unit-tracking", model_name="digits")
    settings.update(changes)
    return TrackingStore(**settings)


def _log(store: TrackingStore, summary: RunSummary, prepared=None) -> tuple[dict, str]:
    Path(summary.summary_path).parent.mkdir(parents=True, exist_ok=True)
    out = io.StringIO()
    section = tracking.log_run(store, summary, out, prepared)
    return section, out.getvalue()


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory) -> Path:
    """An MLflow sqlite file with the schema in place (creating one takes MLflow ~10 s)."""
    folder = tmp_path_factory.mktemp("empty-store")
    mlflow_client(local_store_uri(folder)).search_experiments()
    return folder / "mlflow.db"


@pytest.fixture
def new_store(empty_store):
    """Make `folder/mlflow.db` a fresh, empty MLflow store; returns the folder."""
    def make(folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(empty_store, folder / "mlflow.db")
        return folder
    return make


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, empty_store) -> Path:
    folder = tmp_path_factory.mktemp("tracking-ws")
    shutil.copy(empty_store, folder / "mlflow.db")
    return folder


@pytest.fixture(scope="module")
def champion_run(workspace):
    summary = fake_summary(workspace / "first")
    section, printed = _log(_store(workspace), summary)
    return summary, section, printed


def test_run_is_recorded_with_params_epoch_metrics_artifacts_and_champion(
        workspace, champion_run):
    summary, section, printed = champion_run
    assert f"mlflow: run {section['run_id']}" in printed and "@champion" in printed
    assert json.loads(Path(summary.summary_path).read_text())["mlflow"] == section
    client = mlflow_client(local_store_uri(workspace))
    run = client.get_run(section["run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == summary.run_id
    assert run.info.end_time - run.info.start_time >= 60_000  # spans the 61.5 s pipeline run
    assert run.data.params["precision"] == "mixed_float16"
    assert run.data.metrics["eval/accuracy"] == 0.97
    history = client.get_metric_history(section["run_id"], "loss_scale")
    assert [(m.step, m.value) for m in history] == [(0, 32768.0), (1, 16384.0), (2, 16384.0)]
    top = {a.path for a in client.list_artifacts(section["run_id"])}
    assert {"summary.json", "model_card.md", "training_summary.json", "evaluation",
            "serving_model"} <= top
    assert (workspace / "mlartifacts").is_dir()  # artifacts stay in the workspace
    version = client.get_model_version_by_alias("digits", "champion")
    assert version.run_id == section["run_id"] and section["registered_model"]["version"] == "1"


def test_a_cached_rerun_points_at_the_same_version_without_moving_aliases(
        workspace, champion_run):
    client = mlflow_client(local_store_uri(workspace))
    summary = fake_summary(workspace / "rerun")
    summary.trainer.model_uri = champion_run[0].trainer.model_uri
    summary.components["Pusher"].status = "cached"
    section, printed = _log(_store(workspace), summary)
    assert section["registered_model"] == {**champion_run[1]["registered_model"], "alias": None}
    assert "serving_model" not in {a.path for a in client.list_artifacts(section["run_id"])}
    assert len(client.search_model_versions("name = 'digits'")) == 1


def test_unblessed_model_is_challenger_until_it_is_pushed(workspace, champion_run):
    client = mlflow_client(local_store_uri(workspace))
    unblessed = fake_summary(workspace / "second", blessed=False, pushed=False)
    section, _ = _log(_store(workspace), unblessed)
    challenger = client.get_model_version_by_alias("digits", "challenger")
    assert str(challenger.version) == section["registered_model"]["version"] == "2"
    assert str(client.get_model_version_by_alias("digits", "champion").version) == "1"
    pushed = fake_summary(workspace / "third")
    pushed.trainer.model_uri = unblessed.trainer.model_uri  # same model, now pushed
    _log(_store(workspace), pushed)
    aliases = client.get_registered_model("digits").aliases
    assert {alias: str(version) for alias, version in aliases.items()} == {"champion": "2"}


def test_tracking_failure_never_fails_the_run(tmp_path):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the workspace's sqlite folder should be")
    summary = fake_summary(tmp_path / "run")
    section, printed = _log(_store(blocked / "ws"), summary)
    assert section["error"].startswith("MLflow tracking failed")
    assert printed.count("warning") == 1
    assert json.loads(Path(summary.summary_path).read_text())["mlflow"] == section


def test_sync_copies_runs_recorded_while_the_server_was_down_exactly_once(tmp_path, new_store):
    workspace = new_store(tmp_path / "ws")
    remote_uri = local_store_uri(new_store(tmp_path / "server"))
    down = _store(workspace, requested_uri=remote_uri, unreachable_reason="connection refused")
    section, _ = _log(down, fake_summary(tmp_path / "run", blessed=False, pushed=False))
    assert section["pending_sync_to"] == remote_uri
    lines: list[str] = []
    synced = sync_workspace(workspace, None, 2.0, lines.append)
    assert len(synced) == 1 and "registered digits v1 @challenger" in lines[0]
    remote = mlflow_client(remote_uri)
    copy = remote.get_run(synced[0].remote_run_id)
    assert copy.info.run_name == "20260101-000000-abcd" and copy.info.status == "FINISHED"
    assert copy.data.params["precision"] == "mixed_float16"
    assert [m.step for m in remote.get_metric_history(copy.info.run_id, "val_accuracy")] == [
        0, 1, 2]
    assert "model_card.md" in {a.path for a in remote.list_artifacts(copy.info.run_id)}
    assert remote.get_model_version_by_alias("digits", "challenger").run_id == copy.info.run_id
    again: list[str] = []
    assert sync_workspace(workspace, None, 2.0, again.append) == []
    assert again[0].startswith("nothing to sync")


def test_sync_to_a_down_server_names_it_and_copies_nothing(tmp_path, new_store):
    workspace, port = new_store(tmp_path / "ws"), free_port()
    down = _store(workspace, requested_uri=f"http://127.0.0.1:{port}",
                  unreachable_reason="connection refused")
    _log(down, fake_summary(tmp_path / "run"))
    started = time.monotonic()
    with pytest.raises(tracking.store.TrackingServerUnreachable, match=f"127.0.0.1:{port}"):
        sync_workspace(workspace, None, 2.0, print)
    assert time.monotonic() - started < 10
    local = mlflow_client(local_store_uri(workspace))
    run = local.search_runs([local.get_experiment_by_name("unit-tracking").experiment_id])[0]
    assert "mptfx.synced_run_id" not in run.data.tags  # still pending


@pytest.mark.parametrize("argv, named", [
    (["compare", "--workspace", "{tmp}"], "no MLflow store at {tmp}/mlflow.db"),
    (["ui", "--workspace", "{tmp}"], "no MLflow store at {tmp}/mlflow.db"),
    (["tracking", "sync", "--workspace", "{tmp}"], "no MLflow store at {tmp}/mlflow.db"),
    (["compare", "--tracking-uri", "http://127.0.0.1:{port}"], "127.0.0.1:{port} is unreachable"),
    (["sweep", "--set", "trainer.precision"], "--set expects KEY=VALUE"),
    (["compare", "--last", "2", "abc"], "either RUN_IDs or --last N"),
])
def test_commands_explain_what_is_missing_with_exit_2(mptfx_here, tmp_path, argv, named):
    port = free_port()
    values = {"tmp": str(tmp_path.resolve()), "port": port}
    result = mptfx_here(*[arg.format(**values) for arg in argv], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert named.format(**values) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_failed_pipeline_run_is_recorded_as_failed_without_a_model(workspace):
    summary = fake_summary(workspace / "failed", pushed=False)
    summary = RunSummary.parse({**summary.to_dict(), "status": "failed", "eval": {},
                                "error": "Trainer failed: out of memory",
                                "failed_component": "Trainer"})
    section, _ = _log(_store(workspace), summary)
    run = mlflow_client(local_store_uri(workspace)).get_run(section["run_id"])
    assert run.info.status == "FAILED" and section["registered_model"] is None
    assert run.data.tags["mptfx.error"] == "Trainer failed: out of memory"


def test_compare_last_n_picks_the_newest_runs_of_the_newest_experiment(mptfx_here, workspace):
    older, _ = _log(_store(workspace), fake_summary(workspace / "compare-1"))
    newer, _ = _log(_store(workspace), fake_summary(workspace / "compare-2", blessed=False))
    result = mptfx_here("compare", "--workspace", str(workspace), "--last", "2",
                        "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [row["mlflow_run_id"] for row in data["runs"]] == [older["run_id"], newer["run_id"]]
    assert [row["blessed"] for row in data["runs"]] == [True, False]
    assert Path(data["plot"]).parent == workspace / "compare"
    assert Path(data["plot"]).read_bytes()[:4] == b"\x89PNG"


def test_the_store_is_prepared_in_the_background_and_the_run_recorded_into_it(tmp_path):
    """`prepare` (what run_pipeline starts before the components run) creates the local
    store's database in another thread; `log_run` waits for it and records the run there."""
    workspace = tmp_path / "fresh"
    store = _store(workspace)
    prepared = tracking.prepare(store)
    assert prepared is not None and prepared.wait(120) is None  # nothing opened
    assert (workspace / "mlflow.db").stat().st_size > 0
    section, printed = _log(store, fake_summary(tmp_path / "run"), prepared=prepared)
    assert mlflow_client(local_store_uri(workspace)).get_run(section["run_id"])
    assert printed.count("warning") == 0
    assert tracking.prepare(_store(workspace, uri="http://127.0.0.1:5000")) is None


def test_the_sqlite_reader_reads_what_mlflows_client_reads(tmp_path, new_store):
    """`mptfx compare` and `serve status` read a workspace's store with sqlite3 (no MLflow
    import): every read agrees with MLflow's own client on a store MLflow wrote, deleted runs
    and versions, a second experiment and a NaN metric included."""
    workspace = new_store(tmp_path / "ws")
    for index, (blessed, pushed) in enumerate([(True, True), (False, False), (True, True)]):
        summary = fake_summary(tmp_path / f"run-{index}", blessed=blessed, pushed=pushed)
        summary.run_id = f"20260101-00000{index}-abcd"
        _log(_store(workspace), summary)
    other = fake_summary(tmp_path / "other")
    other.run_id = "20260102-000000-ef01"
    other_section, _ = _log(_store(workspace, experiment="other-experiment"), other)
    client = mlflow_client(local_store_uri(workspace))
    client.log_metric(other_section["run_id"], "loss", float("nan"), step=3)
    deleted = fake_summary(tmp_path / "deleted")
    deleted.run_id = "20260103-000000-dead"
    client.delete_run(_log(_store(workspace), deleted)[0]["run_id"])
    client.delete_model_version("digits", "4")  # the other experiment's

    light = open_reader(local_store_uri(workspace))
    heavy = ClientStoreReader(client)
    assert isinstance(light, SqliteStoreReader)
    assert light.experiment_names() == heavy.experiment_names()
    for name in ("unit-tracking", "other-experiment", "absent"):
        assert light.experiment_id(name) == heavy.experiment_id(name)
    newest = heavy.newest_mptfx_runs(None, 10)
    assert [r.run_id for r in newest] == [r.run_id for r in light.newest_mptfx_runs(None, 10)]
    assert "20260103-000000-dead" not in {r.run_name for r in newest}
    ids = [light.experiment_id("unit-tracking")]
    assert [r.run_id for r in light.newest_mptfx_runs(ids, 2)] == [
        r.run_id for r in heavy.newest_mptfx_runs(ids, 2)]
    for run in newest:
        assert _nan_named(light.run(run.run_id)) == _nan_named(heavy.run(run.run_id)) == \
            _nan_named(run)
        for key in ("loss", "val_accuracy", "absent"):
            assert _same(light.metric_history(run.run_id, key),
                         heavy.metric_history(run.run_id, key))
    for tfx_run_id in ("20260101-000001-abcd", "20260102-000000-ef01"):
        assert _nan_named(light.run_by_tfx_id(tfx_run_id)) == _nan_named(
            heavy.run_by_tfx_id(tfx_run_id))
    assert light.run_by_tfx_id("absent") is None and heavy.run_by_tfx_id("absent") is None
    assert light.run("0" * 32) is None and heavy.run("0" * 32) is None
    for model in ("digits", "absent"):
        assert light.model_versions(model) == heavy.model_versions(model)
        assert light.model_aliases(model) == heavy.model_aliases(model)
    assert light.model_aliases("digits") == {"champion": "5", "challenger": "2"}
    assert [v.version for v in light.model_versions("digits")] == ["1", "2", "3", "5"]


def _nan_named(record):
    """The record with NaN metrics written "nan" (a NaN equals nothing, itself included)."""
    metrics = {k: "nan" if math.isnan(v) else v for k, v in record.metrics.items()}
    return dataclasses.replace(record, metrics=metrics)


def _same(left: list, right: list) -> bool:
    """Equal, a NaN equal to a NaN."""
    return len(left) == len(right) and all(
        a == b or (a[0] == b[0] and math.isnan(a[1]) and math.isnan(b[1]))
        for a, b in zip(left, right, strict=True))


def test_compare_links_each_runs_report_when_it_has_one(mptfx_here, tmp_path, new_store):
    workspace = new_store(tmp_path / "ws")
    with_report, without = fake_summary(tmp_path / "a"), fake_summary(tmp_path / "b")
    without.run_id = "20260101-000001-abcd"
    for summary in (with_report, without):
        _log(_store(workspace), summary)  # each writes its report.html
    report = Path(with_report.summary_path).parent / "report.html"
    assert report.is_file()
    Path(without.report_path).unlink()  # as a run recorded before reports existed
    data = json.loads(mptfx_here("compare", "--workspace", str(workspace),
                                 "--format", "json").stdout)
    assert [row["report"] for row in data["runs"]] == [report.as_uri(), None]
    table = mptfx_here("compare", "--workspace", str(workspace)).stdout
    assert f"reports:\n  {with_report.run_id}  {report.as_uri()}\n  {without.run_id}  -\n" \
        in table
    markdown = mptfx_here("compare", "--workspace", str(workspace), "--format", "markdown")
    assert f"| [{with_report.run_id}]({report.as_uri()}) |" in markdown.stdout


def test_the_run_opened_when_the_pipeline_starts_is_the_one_recorded(tmp_path):
    """With system metrics on, `prepare` opens the pipeline run's MLflow run (RUNNING, for
    the Trainer's monitor); a second opening (a resumed driver) finds it; `log_run`
    records into it and ends it."""
    from components.tracking.live_run import PIPELINE_RUN_TAG, open_run

    store = _store(tmp_path / "ws")
    summary = fake_summary(tmp_path / "run")
    prepared = tracking.prepare(store, summary.run_id)
    run_id = prepared.wait(120)
    client = mlflow_client(store.uri)
    opened = client.get_run(run_id)
    assert opened.info.status == "RUNNING" and opened.info.run_name == summary.run_id
    assert opened.data.tags[PIPELINE_RUN_TAG] == summary.run_id
    assert open_run(store, summary.run_id) == run_id
    section, _ = _log(store, summary, prepared=prepared)
    assert section["run_id"] == run_id
    recorded = client.get_run(run_id)
    assert recorded.info.status == "FINISHED" and recorded.data.params
    assert len(client.search_runs([opened.info.experiment_id])) == 1


def test_the_driver_hands_the_trainer_pods_the_run_only_when_they_reach_its_store(tmp_path):
    """`mptfx k8s submit` opens the MLflow run before the first Job when the pods'
    server (kubernetes.tracking_uri) is where the run is recorded; otherwise one line says
    why the Trainer logs no system metrics, and the run goes on."""
    from pipelines.config import load_config
    from pipelines.k8s_tracking import open_run_for_pods

    workspace = tmp_path / "ws"
    same = load_config(REPO / "configs/local.yaml",
                       [f"kubernetes.tracking_uri={local_store_uri(workspace)}"])
    out = io.StringIO()
    opened, env = open_run_for_pods(same, workspace, "r1", out)
    assert env == {"MLFLOW_RUN_ID": opened.run_id,
                   "MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL": "2"}
    assert open_run_for_pods(same, workspace, "r1", out)[0].run_id == opened.run_id  # resumed
    assert out.getvalue() == ""
    elsewhere = load_config(REPO / "configs/local.yaml", [])
    assert open_run_for_pods(elsewhere, workspace, "r2", out) == (None, {})
    assert out.getvalue().strip() == (
        "mptfx k8s submit: system metrics: not logged: the pods' MLflow server "
        "kubernetes.tracking_uri http://mptfx-mlflow:5000 is not where this run is recorded "
        f"({local_store_uri(workspace)}); run the driver in the cluster (--driver-job) or "
        "set tracking.uri to it")
    off = load_config(REPO / "configs/local.yaml", ["tracking.system_metrics=false"])
    assert open_run_for_pods(off, workspace, "r3", out) == (None, {})


def test_the_trainer_logs_mlflows_system_metrics_to_the_run_handed_to_it(tmp_path, caplog):
    """What the Trainer runs around training (components/tracking/system_metrics.py): MLflow's
    own SystemMetricsMonitor on the run named by MLFLOW_RUN_ID, a timestamped series per
    metric; no GPU here: none of its series, and one line saying why."""
    import logging

    from components.tracking import system_metrics
    from components.tracking.live_run import open_run, trainer_environment

    store = _store(tmp_path / "ws")
    run_id = open_run(store, "r1")
    with caplog.at_level(logging.INFO, "mptfx.system_metrics"):
        with system_metrics.monitoring(None, trainer_environment(store, run_id, 0.3)) as monitor:
            assert monitor is not None
            time.sleep(1.5)
    client = mlflow_client(store.uri)
    for name in ("system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"):
        stamps = [m.timestamp for m in client.get_metric_history(run_id, name)]
        assert len(stamps) >= 2 and stamps == sorted(stamps), name
    assert not [k for k in client.get_run(run_id).data.metrics if k.startswith("system/gpu")]
    assert [r.message for r in caplog.records].count(
        "system metrics: no GPU metrics: NVML found no NVIDIA GPU (NVML Shared Library Not "
        "Found)") == 1


def test_without_a_handed_run_the_trainer_monitors_nothing(caplog):
    import logging

    from components.tracking import system_metrics

    with caplog.at_level(logging.INFO, "mptfx.system_metrics"):
        with system_metrics.monitoring(None, {}) as monitor:
            assert monitor is None
    assert [r.message for r in caplog.records] == [
        "system metrics: not logged (no MLflow run handed to this process: MLFLOW_RUN_ID unset)"]


def test_a_server_that_does_not_answer_never_holds_training_up(monkeypatch):
    """The monitor's thread retries on its own; the Trainer waits at most
    STOP_TIMEOUT_SECONDS for it at the end."""
    from components.tracking import system_metrics

    monkeypatch.setattr(system_metrics, "STOP_TIMEOUT_SECONDS", 2.0)
    environ = {"MLFLOW_RUN_ID": "0" * 32, "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{free_port()}",
               "MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL": "0.2"}
    started = time.monotonic()
    with system_metrics.monitoring("worker-1", environ) as monitor:
        assert monitor is not None and monitor.node_id == "worker-1"
        time.sleep(0.5)
    assert time.monotonic() - started < 6.0


def test_a_pipeline_that_crashes_leaves_no_run_running(tmp_path):
    from components.tracking.live_run import ended_on_crash

    store = _store(tmp_path / "ws")
    prepared = tracking.prepare(store, "r1")
    run_id = prepared.wait(120)
    with pytest.raises(OSError), ended_on_crash(prepared):
        raise OSError(28, "No space left on device")
    assert mlflow_client(store.uri).get_run(run_id).info.status == "FAILED"

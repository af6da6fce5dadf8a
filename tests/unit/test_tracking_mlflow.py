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
    thread = tracking.prepare(store)
    assert thread is not None and thread.name == "mptfx-mlflow-store"
    thread.join(120)
    assert not thread.is_alive() and (workspace / "mlflow.db").stat().st_size > 0
    section, printed = _log(store, fake_summary(tmp_path / "run"), prepared=thread)
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
        _log(_store(workspace), summary)
    report = Path(with_report.summary_path).parent / "report.html"
    report.write_text("<html></html>")
    data = json.loads(mptfx_here("compare", "--workspace", str(workspace),
                                 "--format", "json").stdout)
    assert [row["report"] for row in data["runs"]] == [report.as_uri(), None]
    table = mptfx_here("compare", "--workspace", str(workspace)).stdout
    assert f"reports:\n  {with_report.run_id}  {report.as_uri()}\n  {without.run_id}  -\n" \
        in table
    markdown = mptfx_here("compare", "--workspace", str(workspace), "--format", "markdown")
    assert f"| [{with_report.run_id}]({report.as_uri()}) |" in markdown.stdout

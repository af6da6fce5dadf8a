"""Tracking without a pipeline: where runs go, what is logged, grids and comparison tables."""

from __future__ import annotations

import csv
import http.server
import io
import json
import threading

import pytest

from components.errors import UsageError
from components.tracking import compare, content, registry, store
from components.tracking.config import TrackingSection
from components.tracking.model_card import render_model_card
from pipelines import sweep
from tests.ports import free_port
from tests.run_summaries import fake_summary

# --- where runs are recorded -------------------------------------------------------------


def test_default_store_is_sqlite_in_the_workspace(tmp_path):
    resolved = store.resolve_store(TrackingSection(), "mptfx-digits", "digits", tmp_path, {})
    assert resolved.uri == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    assert resolved.experiment == "mptfx-digits" and not resolved.is_fallback
    assert resolved.artifact_location == (tmp_path.resolve() / "mlartifacts").as_uri()


def test_config_uri_wins_over_the_environment_and_environment_over_the_default(tmp_path):
    env = {"MLFLOW_TRACKING_URI": "sqlite:///from-env.db"}
    from_env = store.resolve_store(TrackingSection(), "p", "m", tmp_path, env)
    assert from_env.uri == "sqlite:///from-env.db"
    configured = TrackingSection(uri="sqlite:///from-config.db", experiment="exp")
    from_config = store.resolve_store(configured, "p", "m", tmp_path, env)
    assert from_config.uri == "sqlite:///from-config.db" and from_config.experiment == "exp"


def test_unreachable_server_falls_back_to_the_workspace_with_one_line_naming_host(tmp_path):
    port = free_port()
    tracking = TrackingSection(uri=f"http://127.0.0.1:{port}", connect_timeout_seconds=2)
    resolved = store.resolve_store(tracking, "p", "m", tmp_path, {})
    assert resolved.is_fallback and resolved.uri == store.local_store_uri(tmp_path)
    assert resolved.requested_uri == f"http://127.0.0.1:{port}"
    warning = resolved.fallback_warning()
    assert "\n" not in warning and f"127.0.0.1:{port}" in warning
    assert f"mptfx tracking sync --workspace {tmp_path.resolve()}" in warning


def test_required_unreachable_server_is_a_usage_error_naming_the_host(tmp_path):
    port = free_port()
    tracking = TrackingSection(uri=f"http://user:secret@127.0.0.1:{port}", required=True,
                               connect_timeout_seconds=2)
    with pytest.raises(UsageError) as caught:
        store.resolve_store(tracking, "p", "m", tmp_path, {})
    message = str(caught.value)
    assert f"127.0.0.1:{port}" in message and "tracking.required" in message
    assert "secret" not in message and "\n" not in message


@pytest.fixture
def http_status():
    """A local HTTP server answering every GET with the status code put in the list."""
    status = [200]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(status[0])
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", status
    server.shutdown()


def test_server_errors_count_as_unreachable_but_client_errors_do_not(http_status):
    uri, status = http_status
    assert store.check_reachable(uri, 2) is None
    status[0] = 404  # an old server without /health is still a server
    assert store.check_reachable(uri, 2) is None
    status[0] = 503
    assert store.check_reachable(uri, 2) == f"HTTP 503 from {uri}/health"


# --- what a run logs ----------------------------------------------------------------------


def test_epoch_metrics_add_throughput_and_loss_scale_lists_to_keras_history(tmp_path):
    training = content.read_training_summary(fake_summary(tmp_path))
    series = content.epoch_metrics(training)
    assert series["val_accuracy"] == [(0, 0.4), (1, 0.7), (2, 0.85)]
    assert series["images_per_sec"] == [(0, 100.0), (1, 250.0), (2, 260.0)]
    assert series["loss_scale"] == [(0, 32768.0), (1, 16384.0), (2, 16384.0)]
    # A Trainer that writes them into `history` itself wins over the side lists; epochs
    # without a value keep the others at their own epoch.
    training["history"]["images_per_sec"] = [1.0, 2.0, 3.0]
    training["history"]["loss_scale"] = [None, 512.0, None]
    series = content.epoch_metrics(training)
    assert series["images_per_sec"] == [(0, 1.0), (1, 2.0), (2, 3.0)]
    assert series["loss_scale"] == [(1, 512.0)]
    training["history"]["loss_scale"] = [None, None, None]  # float32: no loss scale at all
    assert "loss_scale" not in content.epoch_metrics(training)


def test_params_hold_resolved_choices_and_every_config_key(tmp_path):
    params = content.run_params(fake_summary(tmp_path), {})
    assert params["precision"] == "mixed_float16" and params["precision_requested"] == "auto"
    assert params["xla"] == "on" and params["strategy"] == "mirrored"
    assert params["replicas"] == "2" and params["global_batch_size"] == "128"
    assert params["batch_size_per_replica"] == "64" and params["learning_rate"] == "0.002"
    assert params["gradient_accumulation_steps"] == "1" and params["device"].startswith("CPU")
    summary = fake_summary(tmp_path / "accumulating")
    summary.trainer.grad_accum_steps = 4
    summary.trainer.effective_batch_size = 512
    summary.trainer.loss_scale = {"dynamic": True, "initial": 32768, "final": 1024.0}
    params = content.run_params(summary, {})
    assert params["gradient_accumulation_steps"] == "4"
    assert params["effective_batch_size"] == "512" and params["loss_scale_dynamic"] == "true"
    assert content.final_metrics(summary, {})["train/final_loss_scale"] == 1024.0
    assert params["config.evaluator.min_accuracy"] == "0.9"
    assert all(isinstance(value, str) for value in params.values())


def test_final_metrics_cover_evaluation_sizes_and_timings(tmp_path):
    metrics = content.final_metrics(fake_summary(tmp_path), {"example_count": 363.0})
    assert metrics["eval/accuracy"] == 0.97 and metrics["eval/blessed"] == 1.0
    assert metrics["eval/recall_3"] == 0.9 and metrics["tfma/example_count"] == 363.0
    assert metrics["train/images_per_sec"] == 255.0 and metrics["seconds/Trainer"] == 12.5
    assert metrics["seconds/wall"] == 61.5 and metrics["seconds/train"] == 8.0
    assert metrics["size/saved_model_bytes"] == 2500  # the pushed SavedModel on disk
    assert metrics["tflite/int8_bytes"] == 160000 and metrics["tflite/int8_published"] == 1.0
    assert metrics["pushed/version"] == 3


def test_tags_link_the_tfx_run_mlmd_executions_versions_and_tensorboard(tmp_path):
    summary = fake_summary(tmp_path)
    tags = content.run_tags(summary, "a" * 40, {"tfx": "1.16.0", "tensorflow": "2.16.2"})
    assert tags["mptfx.tfx_run_id"] == "20260101-000000-abcd"
    assert tags["mlmd.execution_id.Trainer"] == "7" and tags["mlmd.execution_id.Pusher"] == "9"
    assert tags["mlflow.source.git.commit"] == "a" * 40
    assert tags["version.tfx"] == "1.16.0" and tags["version.tensorflow"] == "2.16.2"
    assert tags["tensorboard_logs"] == summary.trainer.tensorboard_logs


def test_git_commit_is_none_outside_a_repository(tmp_path):
    assert content.git_commit(str(tmp_path)) is None


def test_model_card_states_data_metrics_precision_and_intended_use(tmp_path):
    card = render_model_card(fake_summary(tmp_path, blessed=False, pushed=False), {})
    assert card.startswith("# Model card: digits")
    for fact in ("## Intended use", "1797", "mixed_float16", "0.97", "not blessed: accuracy "
                 "below 0.99", "not pushed", "tensorboard --logdir", "int8: 160000 bytes"):
        assert fact in card, fact


def test_pushed_model_is_the_champion_and_an_unblessed_one_the_challenger(tmp_path):
    pushed = registry.choose_candidate(fake_summary(tmp_path / "a"))
    assert pushed.alias == "champion" and pushed.model_dir.endswith("serving/digits/3")
    unblessed = registry.choose_candidate(fake_summary(tmp_path / "b", blessed=False,
                                                       pushed=False))
    assert unblessed.alias == "challenger" and unblessed.model_dir.endswith("Format-Serving")
    blessed_not_pushed = fake_summary(tmp_path / "c", pushed=False)
    assert registry.choose_candidate(blessed_not_pushed) is None
    cached = fake_summary(tmp_path / "d")
    cached.components["Pusher"].status = "cached"
    assert registry.choose_candidate(cached).decided_now is False


# --- sweep grids ----------------------------------------------------------------------------


def test_grid_is_the_product_of_the_values_in_order():
    axes = sweep.parse_grid(["trainer.precision=float32,mixed_float16", "trainer.xla=off,on",
                             "trainer.epochs=3"])
    assert sweep.expand_grid(axes) == [
        ["trainer.precision=float32", "trainer.xla=off", "trainer.epochs=3"],
        ["trainer.precision=float32", "trainer.xla=on", "trainer.epochs=3"],
        ["trainer.precision=mixed_float16", "trainer.xla=off", "trainer.epochs=3"],
        ["trainer.precision=mixed_float16", "trainer.xla=on", "trainer.epochs=3"],
    ]


def test_yaml_lists_and_quoted_commas_stay_one_value():
    assert sweep.split_values("[8, 8],[16, 16]") == ["[8, 8]", "[16, 16]"]
    assert sweep.split_values("'a,b',c") == ["'a,b'", "c"]
    assert sweep.split_values("[fp32, int8]") == ["[fp32, int8]"]


@pytest.mark.parametrize("bad, named", [
    ("trainer.precision", "KEY=VALUE"),
    ("=a,b", "KEY=VALUE"),
    ("trainer.xla=on,,off", "empty value"),
])
def test_bad_grid_arguments_are_explained(bad, named):
    with pytest.raises(sweep.GridError, match=named):
        sweep.parse_grid([bad])


def test_a_key_given_twice_is_refused():
    with pytest.raises(sweep.GridError, match="given twice"):
        sweep.parse_grid(["trainer.xla=on", "trainer.xla=off"])


# --- compare tables -------------------------------------------------------------------------


def _row(run: str, precision: str, speed: float | None, accuracy: float, size: float) -> dict:
    return {"run": run, "mlflow_run_id": run * 4, "precision": precision, "xla": "off",
            "strategy": "default", "replicas": 1, "global_batch_size": 32, "epochs": 2,
            "images_per_sec": speed, "accuracy": accuracy, "val_accuracy": accuracy,
            "saved_model_mb": size, "tflite_kb": None, "wall_seconds": 40.0, "blessed": True,
            "registered": None, "alias": None, "curves": {"loss": [(0, 1.0)]}}


ROWS = [_row("fp32", "float32", 400.0, 0.95, 1.3), _row("mixed", "mixed_float16", 37.0, 0.97,
                                                          1.3)]


def test_best_marks_the_winner_per_column_and_skips_columns_without_a_difference():
    best = compare.best_runs(ROWS)
    assert best["images_per_sec"] == ["fp32"] and best["accuracy"] == ["mixed"]
    assert "saved_model_mb" not in best and "wall_seconds" not in best  # all equal
    assert "tflite_kb" not in best  # no values


def test_table_marks_the_best_values_with_a_star():
    table = compare.format_rows(ROWS, "table").splitlines()
    assert table[0].split()[:3] == ["run", "precision", "xla"]
    fp32 = next(line for line in table if line.startswith("fp32"))
    mixed = next(line for line in table if line.startswith("mixed"))
    assert "400*" in fp32 and "0.9500 " in fp32
    assert "37 " in mixed and "0.9700*" in mixed
    assert table[-1] == "* best in column"


def test_markdown_bolds_the_best_and_csv_and_json_carry_raw_values():
    markdown = compare.format_rows(ROWS, "markdown")
    assert "**400**" in markdown and "**0.9700**" in markdown
    rows = list(csv.DictReader(io.StringIO(compare.format_rows(ROWS, "csv"))))
    assert [r["precision"] for r in rows] == ["float32", "mixed_float16"]
    assert float(rows[0]["images_per_sec"]) == 400.0 and "curves" not in rows[0]
    data = json.loads(compare.format_rows(ROWS, "json", {"plot": "x.png"}))
    assert data["plot"] == "x.png" and data["best"]["accuracy"] == ["mixed"]
    assert [r["images_per_sec"] for r in data["runs"]] == [400.0, 37.0]


def test_plot_is_a_png_even_when_a_run_has_no_throughput(tmp_path):
    rows = [*ROWS, _row("broken", "float32", None, 0.5, 1.0)]
    path = compare.plot_runs(rows, tmp_path / "out" / "compare.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000

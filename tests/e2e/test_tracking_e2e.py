"""MLflow end to end: real `mptfx` runs against real `mlflow server` processes on 127.0.0.1.

On the digits, everything checked through `MlflowClient` or HTTP, in workspace A (a user's
model file, examples/my_model.py, on all digits at 8x8):
- a float32 run whose tracking.uri names server 2 while nothing listens on its port: it
  completes, warns once and is recorded in A/mlflow.db (served by `mptfx ui`; its report and
  its system metrics are read there); the same settings with `tracking.required=true` fail
  before any component; server 2 then starts (the run still trains) and `mptfx tracking
  sync` copies the run to it;
- then `mptfx sweep` over float32 and mixed_float16 → two runs on server 1 (the first
  reuses the float32 run's Trainer: the model file is unchanged), then `compare`;
  mixed_float16 is loss-scaled, blessed and within two points of float32.
A run without tracking settings goes to its workspace's store: tests/e2e/test_pipeline_e2e.py.
A user's LSTM under mixed_float16 with its recurrent layers in float32, at `batch_size: auto`:
tests/integration/test_trainer.py.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import (
    RUN_DIR,
    assert_blessed_exported_and_converted,
    assert_every_component_ran,
)
from tests.ports import free_port

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
# A small, quick run; any accuracy is blessed, so every run but the one that sets an
# accuracy floor of 1.0 is pushed (a 40-image eval split makes regressions a coin toss).
BLESS_ANY = ["--set", "evaluator.min_accuracy=0", "--set", "evaluator.max_regression=1",
             "--set", "tflite.variants=[fp32]"]
SMALL = [*BLESS_ANY, "--set", "data.builtin_per_class=20", "--set", "trainer.epochs=2"]
# Workspace A: a user's model file (examples/my_model.py, a custom layer) on all 1,797 digits
# at 8x8 for 10 epochs, so that its float32 run and the sweep's mixed_float16 point are
# accurate enough to compare (0.93 each, about 30 s a run here).
EXAMPLE = REPO / "examples" / "my_model.py"
EPOCHS_A = 10
DIGITS_8X8 = [*BLESS_ANY, "--set", f"model.module_file={EXAMPLE}",
              "--set", "model.input_size=[8,8]", "--set", f"trainer.epochs={EPOCHS_A}"]


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def json(self) -> dict:
        return json.loads(self.stdout)


def mptfx(*args: str, timeout: int = 900) -> Result:
    """`mptfx ARGS` as a user runs it, with no MLFLOW_TRACKING_URI in the environment."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    completed = subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=RUN_DIR,
                               env=env, capture_output=True, text=True, timeout=timeout)
    return Result(completed.returncode, completed.stdout, completed.stderr)


class Launched:
    """`mptfx ARGS` started in the background; output goes to files (no pipe to fill up)."""

    def __init__(self, folder: Path, name: str, *args: str):
        env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
        self.stdout_path, self.stderr_path = folder / f"{name}.out", folder / f"{name}.err"
        with open(self.stdout_path, "w") as out, open(self.stderr_path, "w") as err:
            self.process = subprocess.Popen([sys.executable, "-m", "pipelines.cli", *args],
                                            cwd=RUN_DIR, env=env, stdout=out, stderr=err)

    def stderr_so_far(self) -> str:
        return self.stderr_path.read_text()

    def wait_for_stderr(self, text: str, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.stderr_so_far() and self.process.poll() is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{text!r} not printed within {timeout} s")
            time.sleep(0.5)

    def wait(self, timeout: float = 900) -> Result:
        returncode = self.process.wait(timeout=timeout)
        return Result(returncode, self.stdout_path.read_text(), self.stderr_path.read_text())


def wait_for_http(url: str, process: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[:4]} exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout} s")


def stop_process_group(process: subprocess.Popen) -> None:
    """Stop a process started in its own session, and its children (uvicorn)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


class MlflowServer:
    """A real `mlflow server` on 127.0.0.1 with a sqlite backend and artifacts in `root`."""

    def __init__(self, root: Path, port: int):
        self.root, self.port = root, port
        self.process: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def launch(self) -> None:
        """Start the server process; `wait_ready` blocks until it answers."""
        # No background job runner (GenAI jobs): fewer processes on the shared CPUs.
        env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
        with open(self.root / "server.log", "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1",
                 "--port", str(self.port), "--workers", "1",
                 "--backend-store-uri", f"sqlite:///{self.root / 'server.db'}",
                 "--artifacts-destination", str(self.root / "artifacts")],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )

    def wait_ready(self) -> None:
        wait_for_http(f"{self.uri}/health", self.process)

    def stop(self) -> None:
        if self.process is not None:
            stop_process_group(self.process)


def summaries(workspace: Path) -> dict[str, dict]:
    """TFX run id → summary.json of every run in the workspace."""
    return {path.parent.name: json.loads(path.read_text())
            for path in (workspace / "runs").glob("*/summary.json")}


@pytest.fixture(scope="session")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tracking")


@pytest.fixture(scope="session")
def workspace(root) -> Path:
    return root / "workspace-a"


@pytest.fixture(scope="session")
def server(root):
    """Server 1, starting up (the sweep waits for it)."""
    (root / "server-1").mkdir()
    server = MlflowServer(root / "server-1", free_port())
    server.launch()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def later_server(root):
    """Server 2: nothing listens on its port until the runs pointed at it have looked."""
    (root / "server-2").mkdir()
    server = MlflowServer(root / "server-2", free_port())
    yield server
    server.stop()


@pytest.fixture(scope="session")
def launched_default_run(root, workspace, later_server):
    """Workspace A's run, pointed at server 2 before it exists (it may fall back). float32
    as the sweep's first point: that point's Trainer then comes from the cache."""
    launched = Launched(root, "default-run", "run", "--workspace", str(workspace), "--json",
                        *DIGITS_8X8, "--set", "trainer.precision=float32",
                        "--set", f"tracking.uri={later_server.uri}")
    yield launched
    if launched.process.poll() is None:
        launched.process.kill()


@pytest.fixture(scope="session")
def required_run(root, launched_default_run, later_server) -> Result:
    """The same server with `tracking.required=true`, which may not fall back; once both
    runs have looked for it, server 2 starts while workspace A's run still trains."""
    required = Launched(root, "required", "run", "--workspace", str(root / "workspace-c"),
                        "--json", *SMALL, "--set", f"tracking.uri={later_server.uri}",
                        "--set", "tracking.required=true")
    required_result = required.wait()
    launched_default_run.wait_for_stderr("mptfx: warning: MLflow server")
    later_server.launch()
    return required_result


@pytest.fixture(scope="session")
def default_result(launched_default_run, required_run) -> Result:
    result = launched_default_run.wait()
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="session")
def default_run(default_result) -> dict:
    return default_result.json


@pytest.fixture(scope="session")
def ui(default_run, workspace):
    """`mptfx ui` on workspace A's store, starting up while the sweep runs."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "ui", "--workspace", str(workspace),
         "--port", str(port)], cwd=RUN_DIR, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)
    yield process, port
    stop_process_group(process)


@pytest.fixture(scope="session")
def sweep(server, launched_default_run, default_run, ui, workspace):
    """`mptfx sweep` over the precisions in workspace A: two runs on server 1. (The fixtures
    it lists first start the work that can run beside it.)"""
    server.wait_ready()
    result = mptfx("sweep", "--workspace", str(workspace), "--format", "json",
                   "--set", "trainer.precision=float32,mixed_float16", *DIGITS_8X8,
                   "--set", f"tracking.uri={server.uri}")
    assert result.returncode == 0, result.stderr[-3000:]
    runs = [summaries(workspace)[row["run"]] for row in result.json["runs"]]
    return result, runs


@pytest.fixture(scope="session")
def client(server):
    from mlflow import MlflowClient

    server.wait_ready()
    return MlflowClient(tracking_uri=server.uri, registry_uri=server.uri)


@pytest.fixture(scope="session")
def synced(default_run, later_server, workspace):
    later_server.wait_ready()
    return mptfx("tracking", "sync", "--workspace", str(workspace))


@pytest.fixture(scope="session")
def later_client(later_server):
    from mlflow import MlflowClient

    later_server.wait_ready()
    return MlflowClient(tracking_uri=later_server.uri, registry_uri=later_server.uri)


def test_sweep_runs_every_point_reusing_cached_components_then_compares(sweep):
    result, (fp32, mixed) = sweep
    assert [row["precision"] for row in result.json["runs"]] == ["float32", "mixed_float16"]
    assert "mptfx sweep 1/2: trainer.precision=float32" in result.stderr
    assert "mptfx sweep 2/2: trainer.precision=mixed_float16" in result.stderr
    assert mixed["components"]["Ingest"]["status"] == "cached"
    assert mixed["components"]["StatisticsGen"]["status"] == "cached"
    assert mixed["components"]["Trainer"]["status"] == "completed"
    assert Path(result.json["plot"]).read_bytes()[:4] == b"\x89PNG"


def test_mixed_float16_is_within_two_points_of_float32(sweep):
    from components.run_summary import RunSummary

    float32, mixed = (RunSummary.parse(run, "the sweep's summary.json") for run in sweep[1])
    for summary in (float32, mixed):
        assert_every_component_ran(summary)
    assert float32.trainer.precision == "float32"
    assert mixed.trainer.precision == "mixed_float16"
    assert mixed.trainer.loss_scale["dynamic"] is True  # float16 is loss-scaled
    assert float32.trainer.loss_scale is None
    accuracy32, accuracy16 = float32.eval.accuracy, mixed.eval.accuracy
    assert accuracy32 > 0.9
    assert abs(accuracy16 - accuracy32) <= 0.02, (accuracy16, accuracy32)


def test_custom_layer_model_trains_blessed_and_converts_under_float16(sweep):
    """The user's model file (a custom layer done right) under mixed_float16, loss-scaled;
    bfloat16 and the staged copy: tests/e2e/test_user_model_e2e.py."""
    from components.run_summary import RunSummary

    summary = RunSummary.parse(sweep[1][1], "the sweep's mixed_float16 summary.json")
    assert_blessed_exported_and_converted(summary, "mixed_float16")
    assert summary.trainer.model_file == str(EXAMPLE)
    assert summary.trainer.loss_scale["dynamic"] is True  # float16 trains loss-scaled


def test_unchanged_model_file_reuses_the_cached_trainer(default_run, sweep):
    """The sweep's float32 point has the default run's settings and the same model file."""
    fp32 = sweep[1][0]
    assert fp32["trainer"]["model_file_sha256"] == default_run["trainer"]["model_file_sha256"]
    assert fp32["components"]["Trainer"]["status"] == "cached"
    assert default_run["components"]["Trainer"]["status"] == "completed"


def test_run_on_the_server_has_params_epoch_metrics_tfma_metrics_and_tags(sweep, client, server):
    fp32 = sweep[1][0]
    assert fp32["mlflow"]["tracking_uri"] == server.uri
    run = client.get_run(fp32["mlflow"]["run_id"])
    assert client.get_experiment(run.info.experiment_id).name == "mptfx-digits"
    params = run.data.params
    assert params["precision"] == params["precision_requested"] == "float32"
    assert params["precision_reason"] == fp32["trainer"]["precision_reason"]
    assert params["xla"] == "off" and params["strategy"] == fp32["trainer"]["strategy"]
    assert params["replicas"] == "1" and params["global_batch_size"] == "32"
    assert params["epochs"] == str(EPOCHS_A) and params["learning_rate"] == "0.001"
    assert params["gradient_accumulation_steps"] and params["device"]
    for key in ("loss", "accuracy", "val_loss", "val_accuracy", "images_per_sec",
                "learning_rate"):
        history = client.get_metric_history(run.info.run_id, key)
        assert sorted(m.step for m in history) == list(range(EPOCHS_A)), key
    # The learning-rate curve: the train images at batch 32 make `per_epoch` steps; auto warms
    # up for 10 % of the 10 epochs (one epoch), then decays by cosine to 0 at the last step,
    # logged at the end of each epoch: 0.001 x (1 + cos(pi x (done - warm-up) / rest)) / 2.
    per_epoch = math.ceil(fp32["data"]["split_counts"]["train"] / 32)
    total, warmup = EPOCHS_A * per_epoch, per_epoch
    expected = [0.001 * (1 + math.cos(math.pi * (epoch * per_epoch - warmup)
                                      / (total - warmup))) / 2
                for epoch in range(1, EPOCHS_A + 1)]
    rates = sorted(client.get_metric_history(run.info.run_id, "learning_rate"),
                   key=lambda m: m.step)
    assert [m.value for m in rates] == pytest.approx(expected, abs=1e-9)
    assert expected[-1] == pytest.approx(0.0, abs=1e-12)
    assert params["lr_schedule"] == "cosine" and params["warmup_epochs"] == "1.0"
    assert params["model_reason"] == "model.name" or params["model_reason"].startswith("auto")
    metrics = run.data.metrics
    assert metrics["eval/accuracy"] == fp32["eval"]["accuracy"]
    assert metrics["tfma/example_count"] == fp32["data"]["split_counts"]["eval"]
    assert metrics["eval/blessed"] == 1.0 and metrics["train/images_per_sec"] > 0
    assert metrics["size/saved_model_bytes"] > 100_000
    assert metrics["tflite/fp32_bytes"] == fp32["tflite"]["fp32"]["bytes"]
    assert metrics["seconds/Trainer"] > 0 and metrics["seconds/wall"] > 0
    tags = run.data.tags
    assert tags["mptfx.tfx_run_id"] == fp32["run_id"] == run.info.run_name
    for component in ("Ingest", "Trainer", "Evaluator", "Pusher"):
        assert tags[f"mlmd.execution_id.{component}"] == str(
            fp32["components"][component]["execution_id"])
    assert tags["version.tfx"] == "1.16.0" and tags["version.tensorflow"].startswith("2.16")
    assert len(tags.get("mlflow.source.git.commit", "")) in (0, 40)
    assert Path(tags["tensorboard_logs"]).is_dir()


def test_run_on_the_server_has_summary_report_model_card_and_model(sweep, client, tmp_path):
    fp32 = sweep[1][0]
    run_id = fp32["mlflow"]["run_id"]
    local = Path(client.download_artifacts(run_id, "", str(tmp_path)))
    assert json.loads((local / "summary.json").read_text())["run_id"] == fp32["run_id"]
    report = json.loads((local / "evaluation" / "report.json").read_text())
    assert report["blessed"] is True and report["accuracy"] == fp32["eval"]["accuracy"]
    assert (local / "evaluation" / "tfma" / "eval_config.json").exists()
    card = (local / "model_card.md").read_text()
    assert "## Intended use" in card and "float32" in card and fp32["run_id"] in card
    # serving_model/ is an MLflow pyfunc model wrapping the pushed SavedModel.
    mlmodel = yaml.safe_load((local / "serving_model" / "MLmodel").read_text())
    wrapped = mlmodel["flavors"]["python_function"]["artifacts"]["saved_model"]["path"]
    assert (local / "serving_model" / wrapped / "saved_model.pb").exists()


def test_the_pushed_version_is_the_champion(sweep, client):
    fp32, mixed = sweep[1]
    assert fp32["pushed"]["pushed"] and mixed["pushed"]["pushed"]
    versions = {run["mlflow"]["run_id"]: run["mlflow"]["registered_model"] for run in sweep[1]}
    assert [v["alias"] for v in versions.values()] == ["champion", "champion"]
    champion = client.get_model_version_by_alias("digits", "champion")
    assert champion.run_id == mixed["mlflow"]["run_id"]  # the newest push is what TF serves
    assert champion.tags["serving_version"] == str(mixed["pushed"]["version"])
    assert champion.tags["precision"] == "mixed_float16"
    first = client.get_model_version("digits", versions[fp32["mlflow"]["run_id"]]["version"])
    assert first.run_id == fp32["mlflow"]["run_id"] and "champion" not in first.aliases


def test_compare_json_lists_both_precisions_with_throughput(sweep, server, workspace):
    tfx_run_ids = [run["run_id"] for run in sweep[1]]  # TFX run ids work as well as MLflow's
    result = mptfx("compare", "--workspace", str(workspace), "--tracking-uri", server.uri,
                   *tfx_run_ids, "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = result.json["runs"]
    assert [row["precision"] for row in rows] == ["float32", "mixed_float16"]
    assert [row["mlflow_run_id"] for row in rows] == [r["mlflow"]["run_id"] for r in sweep[1]]
    assert all(row["images_per_sec"] > 0 and row["accuracy"] is not None for row in rows)
    fastest = max(rows, key=lambda row: row["images_per_sec"])["run"]
    assert result.json["best"]["images_per_sec"] == [fastest]


def test_with_the_server_down_the_run_completes_warns_once_and_is_kept_locally(
        default_result, later_server, workspace):
    assert default_result.returncode == 0, default_result.stderr[-3000:]
    warnings = [line for line in default_result.stderr.splitlines()
                if "warning" in line.lower()]
    assert len(warnings) == 1, warnings
    assert f"127.0.0.1:{later_server.port}" in warnings[0]
    assert f"mptfx tracking sync --workspace {workspace}" in warnings[0]
    section = default_result.json["mlflow"]
    assert section["tracking_uri"] == f"sqlite:///{workspace}/mlflow.db"
    assert (workspace / "mlflow.db").stat().st_size > 0
    assert section["pending_sync_to"] == later_server.uri
    from mlflow import MlflowClient

    local = MlflowClient(tracking_uri=section["tracking_uri"])
    run = local.get_run(section["run_id"])
    assert run.data.tags["mptfx.tfx_run_id"] == default_result.json["run_id"]
    assert run.data.params["epochs"] == str(EPOCHS_A) and run.data.tags["mptfx.blessed"] == "true"


def test_a_pipeline_run_records_the_probe_cost(default_run):
    """`trainer.batch_size: auto` in a Trainer run: tests/unit/test_batch_size.py and
    tests/integration/test_trainer.py (which also reads summary.json's `trainer` fields)."""
    trainer = default_run["trainer"]
    assert trainer["autotune_probe_seconds"] >= 0
    assert trainer["autotune"]["status"] == "one candidate"  # the precision is forced


def test_tracking_required_fails_before_any_component_runs(required_run, later_server, root):
    required = required_run
    assert required.returncode == 2
    assert f"127.0.0.1:{later_server.port}" in required.stderr
    assert "tracking.required" in required.stderr
    assert "> Ingest" not in required.stderr and "> Trainer" not in required.stderr
    assert not summaries(root / "workspace-c")  # no summary.json: nothing ran


def test_sync_copies_the_local_run_to_the_server_once_it_is_back(
        default_run, synced, later_client):
    assert synced.returncode == 0, synced.stderr
    assert f"synced run {default_run['run_id']}" in synced.stdout
    experiment = later_client.get_experiment_by_name("mptfx-digits")
    copies = later_client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.`mptfx.synced_from` = '{default_run['mlflow']['run_id']}'")
    assert len(copies) == 1
    copy = copies[0]
    assert copy.info.run_name == default_run["run_id"] and copy.info.status == "FINISHED"
    assert copy.data.metrics["eval/accuracy"] == default_run["eval"]["accuracy"]
    assert copy.data.params["precision"] == default_run["trainer"]["precision"]
    assert len(later_client.get_metric_history(copy.info.run_id, "val_accuracy")) == EPOCHS_A
    artifacts = {a.path for a in later_client.list_artifacts(copy.info.run_id)}
    assert {"model_card.md", "summary.json", "serving_model"} <= artifacts
    champion = later_client.get_model_version_by_alias("digits", "champion")
    assert champion.run_id == copy.info.run_id  # it was pushed


def test_mptfx_ui_serves_the_workspace_store(default_run, ui):
    process, port = ui
    wait_for_http(f"http://127.0.0.1:{port}/", process)
    url = (f"http://127.0.0.1:{port}/api/2.0/mlflow/runs/get?"
           f"run_id={default_run['mlflow']['run_id']}")
    with urllib.request.urlopen(url, timeout=10) as response:
        run = json.load(response)["run"]
    assert run["info"]["run_name"] == default_run["run_id"]


@pytest.fixture(scope="session")
def workspace_client(default_run, workspace):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=default_run["mlflow"]["tracking_uri"])


def test_the_default_runs_report_opens_with_its_curves_and_confusion_matrix(
        default_run, workspace, workspace_client, tmp_path):
    """runs/<id>/report.html in headless Chromium: every image loads, no console error; the
    same PNGs are artifacts of the run's MLflow run."""
    from components.tracking.report import inlined_figures
    from tests.chromium import Chromium

    report = Path(default_run["report_path"])
    assert report == workspace / "runs" / default_run["run_id"] / "report.html"
    with Chromium(tmp_path) as browser:
        page = browser.load(report)
    assert page.errors == []
    shown = {image["file"] for image in page.images}
    assert {"training_curves.png", "confusion_matrix.png", "per_class_recall.png",
            "input_bound.png", "tflite.png", "infra_latency.png", "system_metrics.png"} <= shown
    assert all(image["complete"] and image["width"] > 0 for image in page.images), page.images
    run_id = default_run["mlflow"]["run_id"]
    logged = Path(workspace_client.download_artifacts(run_id, "report", str(tmp_path / "a")))
    figures = inlined_figures(report.read_text())
    assert sorted(figures) == sorted(shown)
    for name, png in figures.items():
        assert (logged / name).read_bytes() == png, name
    assert (logged / "report.html").read_text() == report.read_text()


def test_the_default_runs_mlflow_record_holds_system_metrics_over_time(
        default_run, workspace_client):
    """MLflow's own SystemMetricsMonitor logged into the run while the Trainer trained; no
    GPU here: no GPU series, and one line in the run's log says why."""
    run = workspace_client.get_run(default_run["mlflow"]["run_id"])
    for name in ("system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"):
        history = workspace_client.get_metric_history(run.info.run_id, name)
        stamps = [metric.timestamp for metric in history]
        assert len(stamps) >= 2 and stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
        assert run.info.start_time <= stamps[0] <= stamps[-1] <= run.info.end_time
    assert not [key for key in run.data.metrics if key.startswith("system/gpu")]
    log = Path(default_run["log_path"]).read_text()
    assert log.count("system metrics: no GPU metrics: NVML found no NVIDIA GPU") == 1


def test_a_server_run_gets_the_system_metrics_of_its_trainer(sweep, client):
    """Over HTTP to `mlflow server`: the sweep's second point trained (its first reused the
    default run's Trainer from TFX's cache, and has none)."""
    fp32, mixed = sweep[1]
    assert fp32["components"]["Trainer"]["status"] == "cached"
    assert not client.get_metric_history(fp32["mlflow"]["run_id"],
                                         "system/cpu_utilization_percentage")
    history = client.get_metric_history(mixed["mlflow"]["run_id"],
                                        "system/system_memory_usage_megabytes")
    assert len(history) >= 2

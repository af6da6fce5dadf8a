"""`mptfx k8s compile`: the real pipeline compiled for the cluster, every object it would
create validated offline, and the Kubeflow Pipelines v2 export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pipelines import cli
from pipelines.config import load_config
from tests.conftest import RUN_DIR

REPO = Path(__file__).resolve().parents[2]


def _config(workspace: Path, *overrides: str):
    return load_config(REPO / "configs/local.yaml",
                       [f"kubernetes.workspace={workspace}", "data.builtin_per_class=5",
                        *overrides])


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from pipelines.k8s_commands import compile_for_kubernetes

    workspace = tmp_path_factory.mktemp("ws")
    config = _config(workspace, "kubernetes.beam_pipeline_args=[--runner=FlinkRunner, "
                     "--flink_master=flink:8081]")
    pipeline, ir, note = compile_for_kubernetes(config, "r1", None)
    return config, pipeline, ir, note


def test_the_plan_is_the_pipelines_dag_in_topological_order(compiled):
    from pipelines.kubernetes.ir import plan_nodes

    config, pipeline, ir, note = compiled
    plan = plan_nodes(ir, config)
    assert note == ""
    assert {n.node_id for n in plan} == {c.id for c in pipeline.components}
    seen = set()
    for node in plan:
        assert set(node.upstream) <= seen, node  # upstream nodes come first
        seen.add(node.node_id)
    upstream = {n.node_id: set(n.upstream) for n in plan}
    assert upstream["Ingest"] == set() and upstream["LatestBlessedModel"] == set()
    assert {"Trainer", "Ingest", "LatestBlessedModel"} <= upstream["Evaluator"]
    assert {n.node_id: n.pool for n in plan if n.pool != "cpu"} == {"Trainer": "gpu"}


def test_the_ir_names_the_clusters_database_without_its_password(compiled):
    from pipelines.node_entrypoint import connection_config

    config, _, ir, _ = compiled
    stored = _ir_json(ir)  # what every pod reads from the workspace
    assert '"host": "mptfx-postgres"' in stored and "password" not in stored
    postgres = connection_config(ir).postgresql
    assert (postgres.host, postgres.port, postgres.dbname, postgres.user) == \
        ("mptfx-postgres", "5432", "mlmd", "mptfx")


def test_beam_components_get_the_configured_beam_pipeline_args(compiled):
    from tfx.proto.orchestration import executable_spec_pb2, pipeline_pb2

    _, _, ir, _ = compiled
    deployment = pipeline_pb2.IntermediateDeploymentConfig()
    ir.deployment_config.Unpack(deployment)
    beam_nodes = {}
    for node_id, spec in deployment.executor_specs.items():
        beam = executable_spec_pb2.BeamExecutableSpec()
        if spec.Unpack(beam):
            beam_nodes[node_id] = list(beam.beam_pipeline_args)
    assert {"StatisticsGen", "Evaluator"} <= set(beam_nodes)
    assert all(args == ["--runner=FlinkRunner", "--flink_master=flink:8081"]
               for args in beam_nodes.values())


def _ir_json(ir) -> str:
    from google.protobuf import json_format

    return json_format.MessageToJson(ir)


def test_compile_writes_every_object_of_a_run_and_they_validate(tmp_path, capsys):
    from tests.k8s_schemas import validate

    out = tmp_path / "out"
    code = cli.main(["k8s", "compile", "--out", str(out), "--run-id", "r2",
                     "--set", f"kubernetes.workspace={tmp_path / 'ws'}",
                     "--set", "data.builtin_per_class=5",
                     "--set", "kubernetes.trainer.workers=2"])
    assert code == 0
    files = sorted(out.glob("*.yaml"))
    kinds = [yaml.safe_load(f.read_text())["kind"] for f in files]
    assert kinds.count("Job") == 12 and kinds.count("Service") == 1  # 11 nodes + driver
    assert kinds.count("ConfigMap") == 1
    result = validate(files)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (out / "pipeline.json").exists()


def test_compile_without_the_data_here_still_writes_the_objects(tmp_path):
    out = tmp_path / "out"
    code = cli.main(["k8s", "compile", "--out", str(out), "--run-id", "r3",
                     "--set", f"kubernetes.workspace={tmp_path / 'ws'}",
                     "--data", "/mnt/mptfx-not-here/data"])
    assert code == 0
    assert len(list(out.glob("*-job-*.yaml"))) == 12  # 11 nodes + driver


def test_kfp_export_carries_the_trainers_accelerator(compiled, tmp_path):
    from pipelines.kfp_export import export_kfp

    config, pipeline, _, _ = compiled
    path = export_kfp(config, pipeline, tmp_path, "gs://my-bucket/mptfx/")
    spec = json.loads(path.read_text())["pipelineSpec"]
    executors = spec["deploymentSpec"]["executors"]
    trainer = executors["Trainer_executor"]["container"]
    assert trainer["image"] == "mptfx:0.1.0"
    assert trainer["resources"]["accelerator"] == {"type": "NVIDIA_L4", "count": "1"}
    assert trainer["resources"]["cpuLimit"] == 8.0
    assert "accelerator" not in executors["StatisticsGen_executor"]["container"]["resources"]
    assert set(spec["root"]["dag"]["tasks"]) >= {"Ingest", "Trainer", "Evaluator", "Pusher"}
    job = json.loads(path.read_text())
    assert job["runtimeConfig"]["gcsOutputDirectory"] == "gs://my-bucket/mptfx"


def test_kfp_export_carries_each_components_node_pool(tmp_path):
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    out = tmp_path / "kfp"
    code = cli.main([
        "k8s", "compile", "--engine", "kfp", "--out", str(out), "--run-id", "r1",
        "--pipeline-root", "s3://models/mptfx", "--set", f"kubernetes.workspace={tmp_path}",
        "--set", "data.builtin_per_class=5",
        "--set", "kubernetes.pools.gpu.node_selector={nvidia.com/gpu.product: NVIDIA-L4}",
        "--set", "kubernetes.pools.gpu.tolerations=[{key: dedicated, operator: Equal, "
                 "value: ml, effect: NoSchedule}]",
        "--set", "kubernetes.pools.cpu.node_selector={pool: batch}"])
    assert code == 0
    pipeline_doc, platform_doc = yaml.safe_load_all((out / "mptfx-digits.yaml").read_text())
    json_format.ParseDict(pipeline_doc, pipeline_spec_pb2.PipelineSpec())  # a valid spec
    assert pipeline_doc["defaultPipelineRoot"] == "s3://models/mptfx"
    executors = platform_doc["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    trainer_label = pipeline_doc["components"][pipeline_doc["root"]["dag"]["tasks"]["Trainer"][
        "componentRef"]["name"]]["executorLabel"]
    assert executors[trainer_label] == {
        "nodeSelector": {"labels": {"nvidia.com/gpu.product": "NVIDIA-L4"}},
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    assert executors["StatisticsGen_executor"] == {"nodeSelector": {"labels": {"pool": "batch"}}}
    # Every executing step is placed; the Resolver node runs no container.
    assert set(executors) == {label for label, executor in
                              pipeline_doc["deploymentSpec"]["executors"].items()
                              if "container" in executor}


@pytest.mark.parametrize("root", ["/mnt/mptfx/kfp", "hdfs://nn/mptfx", "gs://"])
def test_kfp_export_refuses_a_pipeline_root_the_cluster_cannot_write(tmp_path, capsys, root):
    code = cli.main(["k8s", "compile", "--engine", "kfp", "--out", str(tmp_path),
                     "--pipeline-root", root])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("mptfx: error: --pipeline-root: the KFP pipeline root must be a "
                          "bucket URI") and repr(root) in err


def test_kubernetes_quantities_and_accelerator_names_convert():
    from pipelines.kfp_export import accelerator_type, quantity

    assert quantity("500m") == 0.5 and quantity("2Gi") == 2 * 2**30 and quantity("8") == 8
    assert accelerator_type("nvidia-h100-80gb") == "NVIDIA_H100_80GB"
    with pytest.raises(ValueError, match="Received: '2 cores'"):
        quantity("2 cores")


def test_multi_worker_needs_a_strategy_that_can_use_it(capsys):
    code = cli.main(["k8s", "compile", "--set", "kubernetes.trainer.workers=2",
                     "--set", "trainer.strategy=mirrored"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.strip() == ("mptfx: error: kubernetes.trainer.workers=2 needs trainer.strategy "
                           "auto or multi_worker. Received: trainer.strategy=mirrored")


@pytest.fixture(autouse=True)
def _outside_the_checkout(monkeypatch, tmp_path):
    """The commands run here in-process, as a user runs them in a folder of their own: a
    driver outside the cluster records its run in ./workspace (MLflow's store)."""
    monkeypatch.chdir(tmp_path)


def _fake_cluster(monkeypatch, **script):
    from pipelines import k8s_commands
    from tests.k8s_double import ScriptedCluster

    cluster = ScriptedCluster(script=script, ticks=1)
    cluster.config_maps = []
    cluster.create_namespaced_config_map = lambda namespace, body: cluster.config_maps.append(
        body)
    monkeypatch.setattr(k8s_commands, "make_clients",
                        lambda in_cluster=False, context=None: (cluster, cluster, None))
    return cluster


def _cluster_database(postgres, monkeypatch) -> list[str]:
    """`--set`s that point kubernetes.metadata at the test PostgreSQL (the cluster's stand-in:
    the run lock and ML Metadata live there), its password in the pods' variable."""
    monkeypatch.setenv("MPTFX_MLMD_PASSWORD", postgres["password"])
    sets = []
    for key in ("host", "port", "database", "user"):
        sets += ["--set", f"kubernetes.metadata.{key}={postgres[key]}"]
    return sets


def _hold_cluster_lock(postgres, pipeline="mptfx-digits"):
    from pipelines.locking import DatabaseRunLock

    return DatabaseRunLock(f"retrain/{pipeline}", host=postgres["host"], port=postgres["port"],
                           database=postgres["database"], user=postgres["user"],
                           password=postgres["password"])


def test_submit_stores_the_ir_runs_the_nodes_and_resumes(monkeypatch, tmp_path, capfd,
                                                          postgres):
    cluster = _fake_cluster(monkeypatch, Evaluator=["fail", "fail", "fail"])
    workspace = tmp_path / "ws"
    sets = ["--set", f"kubernetes.workspace={workspace}", "--set", "data.builtin_per_class=5",
            "--set", "kubernetes.poll_seconds=0.01", *_cluster_database(postgres, monkeypatch)]
    code = cli.main(["k8s", "submit", "--run-id", "r4", "--log-dir", str(tmp_path / "logs"),
                     *sets])
    out, err = capfd.readouterr()  # the driver writes to the terminal's file descriptor
    assert code == 1
    assert "- Pusher skipped: upstream Evaluator did not succeed" in out
    assert "run r4: FAILED" in out
    assert err.startswith("mptfx: error: run r4 failed at Evaluator: BackoffLimitExceeded")
    ir = workspace / "tfx/mptfx-digits/_mptfx/r4/pipeline.json"
    assert ir.exists()
    job = yaml.safe_load(json.dumps(cluster.jobs["mptfx-r4-ingest"]["body"]))
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-4:] == \
        ["--ir", str(ir), "--node", "Ingest"]
    assert (tmp_path / "logs" / "pods" / "Evaluator.log").exists()  # the pods' logs

    cluster.script = {}
    code = cli.main(["k8s", "submit", "--resume", "r4", "--log-dir", str(tmp_path / "logs2"),
                     *sets])
    assert code == 0
    assert cluster.created.count("mptfx-r4-ingest") == 1
    assert "mptfx-r4-evaluator-a2" in cluster.created and "mptfx-r4-tflite" in cluster.created


def test_submit_driver_job_creates_the_config_and_the_driver(monkeypatch, tmp_path, capsys):
    cluster = _fake_cluster(monkeypatch)
    code = cli.main(["k8s", "submit", "--driver-job", "--run-id", "r5",
                     "--set", "trainer.epochs=2"])
    assert code == 0
    assert cluster.created == ["mptfx-r5-driver"]
    [config_map] = cluster.config_maps
    assert yaml.safe_load(config_map["data"]["config.yaml"])["trainer"]["epochs"] == 2
    driver = cluster.jobs["mptfx-r5-driver"]["body"]["spec"]["template"]["spec"]
    assert driver["serviceAccountName"] == "mptfx-runner"
    assert driver["containers"][0]["command"][:5] == ["mptfx", "k8s", "submit", "--in-cluster",
                                                      "--run-id"]
    assert "mptfx k8s status r5" in capsys.readouterr().out


@pytest.mark.parametrize("tf_config", ['{"cluster": {"worker": ["a:1"]', '["worker"]',
                                       '{"task": {"type": "worker", "index": "x"}}'])
def test_a_malformed_tf_config_is_one_line_and_exit_2_in_the_pod(compiled, tmp_path,
                                                                  tf_config):
    import os
    import subprocess
    import sys

    _, _, ir, _ = compiled
    ir_path = tmp_path / "pipeline.json"
    ir_path.write_text(_ir_json(ir))
    result = subprocess.run(
        [sys.executable, "-m", "pipelines.node_entrypoint", "--ir", str(ir_path),
         "--node", "Trainer"], cwd=RUN_DIR, capture_output=True, text=True, timeout=120,
        env={**os.environ, "TF_CONFIG": tf_config})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mptfx node: error: TF_CONFIG"), lines
    assert "Traceback" not in result.stderr


def _submit_parser():
    parser = cli.build_parser()
    k8s = next(a for a in parser._actions if a.dest == "command").choices["k8s"]
    return next(a for a in k8s._actions if a.dest == "k8s_command").choices["submit"]


# What `--driver-job` does with each `submit` option; a new option must be added here.
_DRIVER_JOB_HANDLING = {
    "--data": "forwarded", "--log-dir": "forwarded", "--follow-logs": "forwarded",
    "--resume": "forwarded", "--run-id": "forwarded", "--verbose": "forwarded",
    "--config": "ConfigMap", "--set": "ConfigMap",
    "--context": "used here", "--in-cluster": "used here", "--driver-job": "used here",
    "--help": "used here",
}


def test_driver_job_forwards_every_submit_flag_to_the_in_cluster_driver(monkeypatch):
    options = {o for a in _submit_parser()._actions for o in a.option_strings
               if o.startswith("--")}
    assert options == set(_DRIVER_JOB_HANDLING)
    cluster = _fake_cluster(monkeypatch)
    code = cli.main(["k8s", "submit", "--driver-job", "--run-id", "r6", "--data",
                     "/mnt/mptfx/data/drop-3", "--log-dir", "/mnt/mptfx/logs/r6",
                     "--follow-logs", "--set", "trainer.epochs=2", "--verbose"])
    assert code == 0
    [config_map] = cluster.config_maps
    assert yaml.safe_load(config_map["data"]["config.yaml"])["trainer"]["epochs"] == 2
    command = cluster.jobs["mptfx-r6-driver"]["body"]["spec"]["template"]["spec"][
        "containers"][0]["command"]
    assert command[0] == "mptfx"
    seen = cli.build_parser().parse_args(command[1:])  # what the driver pod will run
    assert (seen.in_cluster, seen.run_id, seen.data, seen.log_dir, seen.follow_logs,
            seen.verbose) == (True, "r6", "/mnt/mptfx/data/drop-3", "/mnt/mptfx/logs/r6", True,
                              True)
    assert seen.config == "/etc/mptfx/config.yaml" and not seen.driver_job


def test_driver_job_resumes_a_run_in_the_cluster(monkeypatch):
    cluster = _fake_cluster(monkeypatch)
    assert cli.main(["k8s", "submit", "--driver-job", "--resume", "r7"]) == 0
    [name] = cluster.created
    assert name.startswith("mptfx-r7-driver-r")  # a new name: the first driver may remain
    command = cluster.jobs[name]["body"]["spec"]["template"]["spec"]["containers"][0]["command"]
    seen = cli.build_parser().parse_args(command[1:])
    assert seen.resume == "r7" and seen.in_cluster


@pytest.mark.parametrize("flag", ["--data", "--log-dir"])
def test_driver_job_refuses_a_path_the_pod_cannot_see(monkeypatch, capsys, flag):
    cluster = _fake_cluster(monkeypatch)
    code = cli.main(["k8s", "submit", "--driver-job", flag, "data/incoming"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"mptfx: error: {flag} data/incoming is relative")
    assert cluster.created == [] and cluster.config_maps == []


def test_submit_and_cluster_retraining_share_one_run_lock(monkeypatch, tmp_path, capsys,
                                                          postgres):
    cluster = _fake_cluster(monkeypatch)
    sets = ["--set", f"kubernetes.workspace={tmp_path}", "--set", "data.builtin_per_class=5",
            *_cluster_database(postgres, monkeypatch)]
    with _hold_cluster_lock(postgres) as held:  # a run of this pipeline is going on
        assert held.acquired
        code = cli.main(["k8s", "submit", "--run-id", "r8", *sets])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1
        assert err.startswith("mptfx: error: pipeline mptfx-digits is already running on the "
                              "cluster (since ")
        assert cli.main(["retrain", "--runner", "kubernetes", *sets]) == 0
        assert "mptfx retrain: already running (since " in capsys.readouterr().out
        assert cluster.created == []
    with _hold_cluster_lock(postgres, "other-pipeline") as other:  # another pipeline's lock
        assert other.acquired
        assert cli.main(["k8s", "submit", "--driver-job", "--run-id", "r9", *sets]) == 0


def test_cluster_retraining_runs_every_node_as_a_job_against_the_clusters_metadata(
        monkeypatch, tmp_path, capfd, postgres):
    cluster = _fake_cluster(monkeypatch)
    sets = ["--set", f"kubernetes.workspace={tmp_path}", "--set", "data.builtin_per_class=5",
            "--set", "kubernetes.poll_seconds=0.01", *_cluster_database(postgres, monkeypatch)]
    # Nothing trained yet in the cluster's ML Metadata: the whole pipeline runs.
    assert cli.main(["retrain", "--runner", "kubernetes", "--in-cluster", *sets]) == 0
    out = capfd.readouterr().out
    nodes = {cluster.jobs[name]["node"] for name in cluster.created}
    assert {"Ingest", "Trainer", "Evaluator", "Pusher"} <= nodes and len(nodes) == 11
    [ir_path] = (tmp_path / "tfx/mptfx-digits/_mptfx").glob("*/pipeline.json")
    stored = ir_path.read_text()
    assert f'"host": "{postgres["host"]}"' in stored and "sqlite" not in stored
    assert "run " in out and "succeeded" in out
    trainer = next(j["body"] for j in cluster.jobs.values() if j["node"] == "Trainer")
    limits = trainer["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1"  # the Trainer's Job asks for the GPU


def test_cluster_retraining_refuses_local_only_flags(capsys):
    for flags in (["--lock", "file"], ["--workspace", "/tmp/ws"], ["--json"]):
        assert cli.main(["retrain", "--runner", "kubernetes", *flags]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "does not apply to --runner kubernetes" in err


def test_pipeline_beam_args_reach_the_beam_components_of_a_local_run(tmp_path):
    from tfx.proto.orchestration import executable_spec_pb2, pipeline_pb2

    from components.ingest.selection import DataSelection
    from pipelines.local_runner import compile_pipeline
    from pipelines.pipeline import LOCAL_BEAM_ARGS, create_pipeline
    from pipelines.workspace import Workspace

    def beam_args(*overrides):
        config = load_config(REPO / "configs/local.yaml", list(overrides))
        pipeline = create_pipeline(config, Workspace(tmp_path), DataSelection(root=str(tmp_path)))
        deployment = pipeline_pb2.IntermediateDeploymentConfig()
        compile_pipeline(pipeline, "r1").deployment_config.Unpack(deployment)
        found = {}
        for node_id, spec in deployment.executor_specs.items():
            beam = executable_spec_pb2.BeamExecutableSpec()
            if spec.Unpack(beam):
                found[node_id] = list(beam.beam_pipeline_args)
        return found

    flink = ["--runner=FlinkRunner", "--flink_master=flink:8081", "--parallelism=8"]
    configured = beam_args(f"pipeline.beam_pipeline_args=[{', '.join(flink)}]")
    assert {"StatisticsGen", "Evaluator"} <= set(configured)
    assert all(args == flink for args in configured.values())
    default = beam_args()
    assert default["StatisticsGen"] == default["Evaluator"] == LOCAL_BEAM_ARGS

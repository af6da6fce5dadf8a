"""`mptfx k8s compile`: the real pipeline compiled for the cluster, every object it would
create validated offline, and the Kubeflow Pipelines v2 export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pipelines import cli
from pipelines.config import load_config

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
    from test_k8s_manifests import validate

    out = tmp_path / "out"
    code = cli.main(["k8s", "compile", "--out", str(out), "--run-id", "r2",
                     "--set", f"kubernetes.workspace={tmp_path / 'ws'}",
                     "--set", "data.builtin_per_class=5",
                     "--set", "kubernetes.trainer.workers=2"])
    assert code == 0
    files = sorted(out.glob("*.yaml"))
    kinds = [yaml.safe_load(f.read_text())["kind"] for f in files]
    assert kinds.count("Job") == 11 and kinds.count("Service") == 1  # 10 nodes + driver
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
    assert len(list(out.glob("*-job-*.yaml"))) == 11


def test_kfp_export_carries_the_trainers_accelerator(compiled, tmp_path):
    from pipelines.kfp_export import export_kfp

    config, pipeline, _, _ = compiled
    path = export_kfp(config, pipeline, tmp_path)
    spec = json.loads(path.read_text())["pipelineSpec"]
    executors = spec["deploymentSpec"]["executors"]
    trainer = executors["Trainer_executor"]["container"]
    assert trainer["image"] == "mptfx:0.1.0"
    assert trainer["resources"]["accelerator"] == {"type": "NVIDIA_L4", "count": "1"}
    assert trainer["resources"]["cpuLimit"] == 8.0
    assert "accelerator" not in executors["StatisticsGen_executor"]["container"]["resources"]
    assert set(spec["root"]["dag"]["tasks"]) >= {"Ingest", "Trainer", "Evaluator", "Pusher"}


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


def _fake_cluster(monkeypatch, **script):
    from test_k8s_runner import ScriptedCluster

    from pipelines import k8s_commands

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
         "--node", "Trainer"], cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "TF_CONFIG": tf_config})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mptfx node: error: TF_CONFIG"), lines
    assert "Traceback" not in result.stderr

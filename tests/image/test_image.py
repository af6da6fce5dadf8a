"""Inside the built image, as uid 10001 with the environment the manifests give each
container: every command starts, the MLflow server answers, and every module the code imports
is installed. The suite's whole run in the image is the container replay
(tests/image/test_container_replay.py): all eleven components, each in its own pod's
container, writing only their volumes."""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
import urllib.request

import yaml
from containers import REPO, Container, buildah, container_env, empty_dir, pod_volume

from tests.ports import free_port

FIRST_PARTY = {"pipelines", "components", "models", "benchmarks"}
SECRETS = {("mptfx-postgres", "password"): "not-used-by-help"}
# Where uid 10001 may write in the image: the pod's emptyDir and Debian's sticky scratch dirs.
SCRATCH = ("/tmp", "/var/tmp", "/run/lock", "/dev")


def _driver_container() -> dict:
    """The container the runner's in-cluster driver Job runs (`mptfx k8s submit`)."""
    from pipelines.config import load_config
    from pipelines.kubernetes.manifests import driver_job

    job = driver_job(load_config(REPO / "configs" / "local.yaml", []), "image-test")
    return job["spec"]["template"]["spec"]["containers"][0]


def _manifest_container(path: str, name: str) -> dict:
    """Container NAME of the first workload in k8s/base/PATH."""
    for doc in yaml.safe_load_all((REPO / "k8s" / "base" / path).read_text()):
        spec = (doc or {}).get("spec", {})
        pod = spec.get("template", spec.get("jobTemplate", {}).get("spec", {}).get("template"))
        pod = (pod or {}).get("spec", {})
        for container in pod.get("containers", []):
            if container["name"] == name:
                return container
    raise AssertionError(f"no container {name} in k8s/base/{path}")


def _command_paths() -> list[list[str]]:
    """Every sub-command of `mptfx`, as the argv before --help (from the real parser)."""
    from pipelines.cli import build_parser

    def walk(parser: argparse.ArgumentParser, prefix: list[str]) -> list[list[str]]:
        paths = [prefix]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    paths += walk(sub, [*prefix, name])
        return paths

    return walk(build_parser(), [])


_HELP_PROBE = """
import contextlib, io, json, sys
from pipelines.cli import main
usage = {}
for argv in json.loads(sys.argv[1]):
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        try:
            main([*argv, "--help"])
            code = None
        except SystemExit as exit_:
            code = exit_.code
    usage[" ".join(argv)] = [code, (text.getvalue().splitlines() or [""])[0]]
print(json.dumps(usage))
"""


def test_every_mptfx_command_starts_in_the_image(container: Container, tmp_path):
    paths = _command_paths()
    assert ["run"] in paths and ["k8s", "submit"] in paths and ["bench"] in paths
    env = container_env(_driver_container(), SECRETS)
    mounts = {empty_dir(tmp_path / "tmp"): "/tmp"}
    console = container.run(["mptfx", "--help"], env=env, mounts=mounts)  # the console script
    assert console.returncode == 0, console.stderr[-2000:]
    assert console.stdout.startswith("usage: mptfx ")
    # Every sub-command's --help through the same main(), in one process: one TF-free start.
    result = container.run(["python", "-c", _HELP_PROBE, json.dumps(paths[1:])], env=env,
                           mounts=mounts)
    assert result.returncode == 0, result.stderr[-2000:]
    usage = json.loads(result.stdout.strip().splitlines()[-1])
    assert list(usage) == [" ".join(path) for path in paths[1:]]
    for command, (code, first_line) in usage.items():
        assert code == 0 and first_line.startswith(f"usage: mptfx {command}"), command


def test_the_node_entrypoint_is_the_default_command_and_starts(image: str,
                                                               container: Container, tmp_path):
    from pipelines.config import load_config
    from pipelines.kubernetes.ir import NodePlan
    from pipelines.kubernetes.manifests import node_objects

    plan = [NodePlan("Ingest", (), "cpu")]
    config = load_config(REPO / "configs" / "local.yaml", [])
    [job] = node_objects(config, "image-test", plan[0], plan, "/mnt/mptfx/ir.json")
    spec = job["spec"]["template"]["spec"]["containers"][0]
    default = json.loads(buildah("inspect", "--type", "image", image).stdout)["OCIv1"]["config"]
    assert default["Cmd"] == spec["command"][:3] == ["python", "-m", "pipelines.node_entrypoint"]
    assert default["User"] == "10001:10001"
    result = container.run([*spec["command"][:3], "--help"], env=container_env(spec, SECRETS),
                           mounts={empty_dir(tmp_path / "tmp"): "/tmp"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--ir" in result.stdout and "--node" in result.stdout


def test_the_mlflow_server_answers_health(container: Container, postgres, tmp_path):
    spec = _manifest_container("mlflow.yaml", "mlflow")
    port = free_port()
    database = (f"postgresql://{postgres['user']}@{postgres['host']}:{postgres['port']}/"
                f"{postgres['database']}")
    args = {arg.split("=", 1)[0]: arg.split("=", 1)[1] for arg in spec["args"]}
    args.update({"--host": "127.0.0.1", "--port": str(port), "--backend-store-uri": database,
                 "--allowed-hosts": f"127.0.0.1:{port}"})
    env = container_env(spec, {("mptfx-postgres", "password"): postgres["password"]})
    mounts = {pod_volume(tmp_path / "workspace"): "/mnt/mptfx",
              empty_dir(tmp_path / "tmp"): "/tmp"}
    server = container.popen([*spec["command"], *(f"{k}={v}" for k, v in args.items())],
                             env, mounts, tmp_path / "mlflow.log")
    try:
        deadline, body = time.monotonic() + 180, None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    body = r.read().decode()
                break
            except OSError:
                time.sleep(1)
        log = (tmp_path / "mlflow.log").read_text(errors="replace")
        assert body == "OK", log[-3000:]
    finally:
        container.stop(server)


def _third_party_imports() -> set[str]:
    """Top-level modules that the code under pipelines/ components/ models/ benchmarks/
    imports and that neither the standard library nor the project provides."""
    names: set[str] = set()
    for package in FIRST_PARTY:
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in FIRST_PARTY
            and n != "__future__"}


def test_every_module_the_code_imports_is_in_the_image(container: Container, tmp_path):
    modules = sorted(_third_party_imports())
    assert {"tensorflow", "tfx", "keras", "mlflow", "kubernetes", "matplotlib"} <= set(modules)
    probe = ("import importlib, json, sys\n"
             "missing = {}\n"
             "for name in sys.argv[1:]:\n"
             "    try:\n"
             "        importlib.import_module(name)\n"
             "    except Exception as error:\n"
             "        missing[name] = f'{type(error).__name__}: {error}'\n"
             "print(json.dumps(missing))\n")
    result = container.run(["python", "-c", probe, *modules, *sorted(FIRST_PARTY)],
                           env=container_env(_driver_container(), SECRETS),
                           mounts={empty_dir(tmp_path / "tmp"): "/tmp"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {}


def test_the_developer_lab_is_not_in_the_image(container: Container, tmp_path):
    """The bench a user runs is installed; the lab (tools/lab: MFU, kernels, profiles,
    stock TFX) stays in the checkout (issue 24)."""
    probe = ("import importlib.util as u, json; print(json.dumps([u.find_spec(n) is not None "
             "for n in ('benchmarks.sections.data_scale', 'tools')]))")
    result = container.run(["python", "-c", probe], mounts={empty_dir(tmp_path / "tmp"): "/tmp"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [True, False]
    assert container.find("-path", "*tools/lab*", "-print", "-quit") == []


def test_the_image_files_are_not_writable_by_the_pod_user(container: Container, tmp_path):
    """The pod user lists what it can write and tries to write into the code and the venv.
    The results are read on the host (a mounted folder, the container's root file system),
    not from `buildah run`'s relayed output: once, under CI's load, that came back empty,
    which an empty `find` reads as a pass."""
    out = empty_dir(tmp_path / "out")
    script = ("find / -xdev -writable -not -type l > /out/writable 2>/dev/null; "
              "touch /opt/venv/x /opt/mptfx/x 2>/dev/null; echo done > /out/done")
    result = container.run(["sh", "-c", script], mounts={out: "/out"})
    assert (out / "done").exists(), result.stderr[-2000:]
    writable = [p for p in (out / "writable").read_text().splitlines()
                if not p.startswith((*SCRATCH, "/out"))]
    assert writable == []
    assert [p for p in ("opt/venv/x", "opt/mptfx/x") if (container.rootfs / p).exists()] == []


def test_xla_finds_libdevice_from_the_nvcc_wheel(container: Container, tmp_path):
    """XLA_FLAGS names the CUDA data dir of the nvcc wheel; XLA's GPU compiler needs its
    libdevice there (no CUDA toolkit in the image)."""
    probe = ("import os, pathlib\n"
             "flag = os.environ['XLA_FLAGS'].split('--xla_gpu_cuda_data_dir=')[1].split()[0]\n"
             "print(pathlib.Path(flag, 'nvvm/libdevice/libdevice.10.bc').stat().st_size)\n")
    result = container.run(["python", "-c", probe], mounts={empty_dir(tmp_path / "tmp"): "/tmp"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert int(result.stdout.strip()) > 100_000

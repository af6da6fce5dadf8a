"""The warm standby (pipelines/standby) with real processes: `mptfx` commands started as a
user starts them, the standby they leave behind, signals and kills.

Every test asks for a ready standby first (`mptfx standby start --wait`), in a standby folder
of this module's own; the rest of the suite runs with MPTFX_STANDBY=off (tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from components.run_summary import RunSummary

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
SMALL = ["--set", "data.builtin_per_class=20", "--set", "trainer.epochs=2",
         "--set", "evaluator.min_accuracy=0", "--set", "tflite.variants=[fp32]"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    folder = tmp_path_factory.mktemp("standbys")
    folder.chmod(0o700)
    environ = dict(os.environ, MPTFX_STANDBY="on", MPTFX_STANDBY_DIR=str(folder),
                   MPTFX_STANDBY_IDLE_SECONDS="900", PYTHONUNBUFFERED="1")
    yield environ
    subprocess.run([sys.executable, "-m", "pipelines.cli", "standby", "stop"], env=environ,
                   cwd=REPO, timeout=60)


def mptfx(env, *args, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def launch(env, folder: Path, *args) -> tuple[subprocess.Popen, Path]:
    out = folder / "stdout.txt"
    with open(out, "w") as stdout, open(folder / "stderr.txt", "w") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "pipelines.cli", *args], cwd=REPO,
                                   env=env, stdout=stdout, stderr=stderr)
    return process, out


def ready(env) -> int:
    """The pid of this environment's standby, started if needed, once it takes commands."""
    started = mptfx(env, "standby", "start", "--wait", "600", timeout=700)
    assert started.returncode == 0, started.stdout + started.stderr
    return int(re.search(r"pid (\d+) ready", started.stdout).group(1))


def alive(pid: int) -> bool:
    """Running (an exited process its new parent has not reaped yet is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not alive(pid)


def wait_for(path: Path, text: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while text not in (path.read_text() if path.exists() else ""):
        assert time.monotonic() < deadline, f"{text!r} not in {path} after {seconds} s"
        time.sleep(0.2)


def standby_log(env) -> str:
    return "".join(p.read_text(errors="replace")
                   for p in Path(env["MPTFX_STANDBY_DIR"]).glob("*.log"))


def test_the_next_run_goes_to_the_ready_standby_which_leaves_a_successor(env, tmp_path):
    pid = ready(env)
    result = mptfx(env, "run", "--json", "--workspace", str(tmp_path / "ws"), *SMALL)

    assert result.returncode == 0, result.stderr[-3000:]
    summary = RunSummary.parse(json.loads(result.stdout), "mptfx run --json")
    assert summary.status == "completed"
    assert all(c.status == "completed" for c in summary.components.values())
    assert (tmp_path / "ws" / "serving" / "digits" / "1" / "saved_model.pb").exists()
    assert "  > Ingest ..." in result.stderr  # our lines reached the caller's stderr
    assert gone_within(pid, 30)  # one command per standby
    log = standby_log(env)
    assert f"--workspace {tmp_path / 'ws'}" in log and "exit 0 after" in log
    status = mptfx(env, "standby", "status")
    assert re.search(r"pid (\d+): (importing|ready), this environment", status.stdout)
    assert f"pid {pid}:" not in status.stdout


def test_another_environment_runs_in_a_fresh_process_and_leaves_the_standby(env):
    pid = ready(env)
    other = dict(env, MPTFX_TEST_SOMETHING_ELSE="1")
    result = mptfx(other, "run", "--set", "trainer.nonsense=1")

    assert result.returncode == 2 and "trainer.nonsense" in result.stderr
    assert ready(env) == pid  # still waiting, for a command from its own environment
    # The fresh process started a standby for its own environment: stop just that one.
    deadline = time.monotonic() + 30
    while not (found := re.search(r"pid (\d+): \w+, this environment",
                                  mptfx(other, "standby", "status").stdout)):
        assert time.monotonic() < deadline, "no standby started for the other environment"
        time.sleep(0.5)
    os.kill(int(found.group(1)), signal.SIGTERM)
    assert gone_within(int(found.group(1)), 60) and alive(pid)


def test_a_bad_key_in_the_standby_is_exit_2_with_one_line(env):
    pid = ready(env)  # the one the test above left waiting
    result = mptfx(env, "run", "--set", "trainer.nonsense=1")

    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("mptfx: error:")
    assert "trainer.nonsense" in lines[0]
    assert gone_within(pid, 30)


def test_killing_the_command_ends_its_standby(env, tmp_path):
    pid = ready(env)
    process, out = launch(env, tmp_path, "run", "--workspace", str(tmp_path / "ws"), *SMALL)
    wait_for(out, "  > Ingest ...", 300)
    process.kill()
    process.wait(timeout=30)

    assert gone_within(pid, 15)  # the run does not go on without anyone waiting for it


def test_a_standby_killed_mid_run_is_one_line_and_exit_1(env, tmp_path):
    pid = ready(env)
    process, out = launch(env, tmp_path, "run", "--workspace", str(tmp_path / "ws"), *SMALL)
    wait_for(out, "  > Ingest ...", 300)
    os.kill(pid, signal.SIGKILL)  # what the out-of-memory killer does

    assert process.wait(timeout=60) == 1
    (line,) = [x for x in (tmp_path / "stderr.txt").read_text().splitlines() if x.strip()]
    assert line.startswith(f"mptfx: the warm process (pid {pid}) that ran this command "
                           "ended without an exit code")


def test_ctrl_c_reaches_the_standby_and_the_run_ends_as_interrupted(env, tmp_path):
    pid = ready(env)
    process, out = launch(env, tmp_path, "run", "--workspace", str(tmp_path / "ws"), *SMALL)
    wait_for(out, "  > Trainer ...", 600)
    process.send_signal(signal.SIGINT)

    assert process.wait(timeout=300) == 130
    (summary_path,) = (tmp_path / "ws" / "runs").glob("*/summary.json")
    summary = RunSummary.read(summary_path)
    assert summary.status == "failed" and "interrupted" in summary.error
    assert gone_within(pid, 30)

"""What decides whether a command may go to a standby (pipelines/standby): its key, the
commands it serves, the switch, the folder's permissions, and the messages on the socket.
The processes themselves: tests/e2e/test_standby_e2e.py."""

from __future__ import annotations

import os
import socket

import pytest

from pipelines import standby
from pipelines.standby import client

BASE = {"HOME": "/home/u", "PATH": "/usr/bin", "TF_CPP_MIN_LOG_LEVEL": "1"}


@pytest.fixture
def code_tree(tmp_path, monkeypatch):
    """Our packages, as far as the key sees them: a tree of .py files."""
    for package in standby.CODE_PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    monkeypatch.setattr(standby, "repo_root", lambda: tmp_path)
    return tmp_path


def test_what_a_shell_changes_between_commands_keeps_the_key(code_tree):
    moved = dict(BASE, PWD="/elsewhere", OLDPWD="/before", SHLVL="3", _="/usr/bin/mptfx",
                 MPTFX_STANDBY="on")
    assert standby.key(moved) == standby.key(BASE)


@pytest.mark.parametrize("change", [{"TF_CPP_MIN_LOG_LEVEL": "3"}, {"CUDA_VISIBLE_DEVICES": ""},
                                    {"MPTFX_FAULT": "ingest"}])
def test_any_other_variable_is_another_key(code_tree, change):
    assert standby.key(dict(BASE, **change)) != standby.key(BASE)


def test_the_key_takes_sys_path_as_the_command_started(code_tree):
    started = ["/venv/bin", "/venv/lib/python3.10/site-packages"]
    assert standby.key(BASE, path=started) == standby.key(BASE, path=list(started))
    assert standby.key(BASE, path=[*started, "/vendored/by/an/import"]) != standby.key(
        BASE, path=started)


def test_an_edited_source_file_is_another_key(code_tree):
    before = standby.key(BASE)
    source = code_tree / "pipelines" / "__init__.py"
    source.write_text("# edited\n")
    os.utime(source, ns=(1, 1))
    assert standby.key(BASE) != before


@pytest.mark.parametrize("argv, expected", [
    (["run", "--json"], True), (["--json", "sweep", "--set", "a=1"], True),
    (["serve", "status"], False), (["--help"], False), ([], False), (["runs"], False),
])
def test_only_run_and_sweep_go_to_a_standby(argv, expected):
    assert client.served(argv) is expected


@pytest.mark.parametrize("value", ["off", "0", "false", "No"])
def test_the_switch_turns_it_off(value):
    assert not standby.enabled({"MPTFX_STANDBY": value})
    assert standby.enabled({}) and standby.enabled({"MPTFX_STANDBY": "on"})


def test_a_folder_others_can_open_is_not_used(tmp_path, monkeypatch):
    folder = tmp_path / "standbys"
    monkeypatch.setenv("MPTFX_STANDBY_DIR", str(folder))
    assert standby.standby_dir() == folder
    assert folder.stat().st_mode & 0o777 == 0o700
    folder.chmod(0o755)
    assert standby.standby_dir() is None


def test_no_standby_listening_means_the_command_runs_here(tmp_path, monkeypatch):
    monkeypatch.setenv("MPTFX_STANDBY", "on")
    monkeypatch.setenv("MPTFX_STANDBY_DIR", str(tmp_path / "standbys"))
    assert client.run_in_standby(["run", "--json"]) is None
    assert client.run_in_standby(["serve", "status"]) is None


def test_messages_arrive_whole_and_a_closed_peer_is_none():
    left, right = socket.socketpair()
    message = {"op": "run", "argv": ["mptfx", "run"], "env": {"K": "v" * 50_000}}
    standby.send_message(left, message)
    assert standby.receive_message(right) == message
    left.close()
    assert standby.receive_message(right) is None


def test_a_process_that_exited_but_is_not_reaped_is_not_running():
    import subprocess
    import time

    assert standby.running(os.getpid())
    child = subprocess.Popen(["true"])  # exits at once; not waited for: a zombie
    deadline = time.monotonic() + 10
    while standby.running(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not standby.running(child.pid)
    child.wait()
    assert not standby.running(child.pid) and not standby.running(None)

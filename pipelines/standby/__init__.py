"""A warm process for the next `mptfx run`: TensorFlow, TFX, Beam and MLflow already imported.

A cold `mptfx run` spends a third to a half of its wall time importing libraries (README,
"Performance"). After a `run` or `sweep` from the command line, `mptfx` starts one standby
process in the background (`server.py`): it imports everything the last run imported, then
waits on a Unix socket. The next `run` or `sweep` with the same interpreter, code and
environment (`key`) hands it the command line, working directory, environment and its own
stdin/stdout/stderr (`client.py`); the standby runs `mptfx` in itself, exactly as a fresh
process would, sends back the exit code and exits. Every standby serves one command.

    MPTFX_STANDBY=off            never use or start one (the test suite sets this)
    MPTFX_STANDBY_IDLE_SECONDS   how long an unused standby waits before exiting (900)
    MPTFX_STANDBY_DIR            where the sockets live (default $XDG_RUNTIME_DIR/mptfx,
                                 else /tmp/mptfx-<uid>; a folder only this user can open)

`mptfx standby start [--wait] | status | stop` (commands.py). Only the standard library is
imported here: the client runs before anything heavy.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
import sys
import sysconfig
from pathlib import Path

ENV_SWITCH = "MPTFX_STANDBY"
ENV_IDLE = "MPTFX_STANDBY_IDLE_SECONDS"
ENV_DIR = "MPTFX_STANDBY_DIR"
DEFAULT_IDLE_SECONDS = 900.0
# The sub-commands a standby runs: the ones that import the pipeline's libraries.
SERVED_COMMANDS = ("run", "sweep")
# Variables a shell changes between two commands without changing what a run does.
VOLATILE_ENV = frozenset({"_", "PWD", "OLDPWD", "SHLVL", "COLUMNS", "LINES", ENV_SWITCH})
# Our packages: a change to any of their files means a new standby.
CODE_PACKAGES = ("components", "pipelines", "models", "benchmarks")
_HEADER = struct.Struct(">I")


def enabled(environ: dict[str, str] | None = None) -> bool:
    """False when MPTFX_STANDBY is off, 0, false or no."""
    value = (os.environ if environ is None else environ).get(ENV_SWITCH, "on")
    return value.strip().lower() not in {"off", "0", "false", "no"}


def idle_seconds() -> float:
    try:
        return max(1.0, float(os.environ.get(ENV_IDLE, DEFAULT_IDLE_SECONDS)))
    except ValueError:
        return DEFAULT_IDLE_SECONDS


def standby_dir() -> Path | None:
    """The folder of the sockets, created 0700; None when it exists but another user owns
    it or others can open it (then no standby is used: one line would be noise)."""
    if os.environ.get(ENV_DIR):
        folder = Path(os.environ[ENV_DIR])
    elif os.environ.get("XDG_RUNTIME_DIR"):
        folder = Path(os.environ["XDG_RUNTIME_DIR"]) / "mptfx"
    else:
        folder = Path("/tmp") / f"mptfx-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
    except OSError:
        return None
    if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        return None
    return folder


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def _code_fingerprint(digest: hashlib._Hash) -> None:
    """Every .py file of our packages by path, size and mtime, and the mtime of the
    site-packages folders (it changes when a package is installed or removed there)."""
    root = repo_root()
    for package in CODE_PACKAGES:
        for folder, dirs, files in os.walk(root / package):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    info = os.stat(os.path.join(folder, name))
                    digest.update(f"{folder}/{name}:{info.st_size}:{info.st_mtime_ns}\n".encode())
    for name in ("purelib", "platlib"):
        folder = sysconfig.get_paths()[name]
        try:
            digest.update(f"{folder}:{os.stat(folder).st_mtime_ns}\n".encode())
        except OSError:
            digest.update(f"{folder}:missing\n".encode())


def key(environ: dict[str, str] | None = None, path: list[str] | None = None) -> str:
    """What a standby must share with a command to run it: interpreter, its flags and
    `path` (sys.path as the command started: imports extend it), our code, the installed
    packages, and the environment (but VOLATILE_ENV)."""
    environ = dict(os.environ if environ is None else environ)
    digest = hashlib.sha256()
    digest.update(json.dumps([sys.executable, sys.version, sys.path if path is None else path,
                              sys.warnoptions, sorted(sys._xoptions.items(), key=str),
                              list(sys.flags)], default=str).encode())
    digest.update(json.dumps(sorted((k, v) for k, v in environ.items()
                                    if k not in VOLATILE_ENV)).encode())
    _code_fingerprint(digest)
    return digest.hexdigest()[:24]


def paths(folder: Path, standby_key: str) -> tuple[Path, Path, Path]:
    """The socket, lock and log file of the standby with `standby_key`."""
    return (folder / f"{standby_key}.sock", folder / f"{standby_key}.lock",
            folder / f"{standby_key}.log")


def running(pid: int | None) -> bool:
    """True while `pid` runs; an exited process its parent has not reaped (a zombie) does
    not count."""
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def send_message(sock, message: dict) -> None:
    data = json.dumps(message).encode()
    sock.sendall(_HEADER.pack(len(data)) + data)


def receive_message(sock) -> dict | None:
    """The next message, or None when the other side closed first."""
    header = _receive_exactly(sock, _HEADER.size)
    if header is None:
        return None
    data = _receive_exactly(sock, _HEADER.unpack(header)[0])
    return None if data is None else json.loads(data)


def _receive_exactly(sock, size: int) -> bytes | None:
    chunks, missing = [], size
    while missing:
        chunk = sock.recv(missing)
        if not chunk:
            return None
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)

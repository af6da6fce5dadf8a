"""The `mptfx` side: hand a command to a ready standby, or start one for the next command.

    code = run_in_standby(argv)   # None: no standby took it, run it here
    start(quiet=False)            # after a command that ran here

While the standby runs the command, SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to this process
are passed on to it, and when this process dies (even by SIGKILL) the standby kills itself:
to the caller, the command behaves as one process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

from components.errors import EXIT_INTERRUPTED, EXIT_PIPELINE_FAILED
from pipelines import standby

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
# How long to wait for a standby that is still importing: it is ahead of a cold start.
CONNECT_WAIT_SECONDS = 300.0
LOG_LIMIT_BYTES = 5 << 20  # each standby appends to its key's log; a longer one starts over


def served(argv: list[str]) -> bool:
    """True for the sub-commands a standby runs (the first word that is not an option)."""
    words = [word for word in argv if not word.startswith("-")]
    return bool(words) and words[0] in standby.SERVED_COMMANDS


def connect(socket_path, timeout: float) -> socket.socket | None:
    """A connection to the standby at `socket_path`, None when none listens there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(socket_path))
    except OSError:
        sock.close()
        return None
    return sock


def run_in_standby(argv: list[str]) -> int | None:
    """Run `mptfx argv` in the standby for this environment; its exit code, or None when
    there is none (or it went away before starting the command)."""
    if not standby.enabled() or not served(argv):
        return None
    folder = standby.standby_dir()
    if folder is None:
        return None
    socket_path, _, _ = standby.paths(folder, standby.key())
    try:
        return _hand_over(socket_path, argv)
    except KeyboardInterrupt:  # while waiting for a standby that was still importing
        print("mptfx: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _hand_over(socket_path, argv: list[str]) -> int | None:
    sock = connect(socket_path, CONNECT_WAIT_SECONDS)
    if sock is None:
        return None
    with sock:
        try:
            socket.send_fds(sock, [b"F"], [0, 1, 2])
            standby.send_message(sock, {
                "op": "run", "argv": ["mptfx", *argv], "cwd": os.getcwd(),
                "env": dict(os.environ), "umask": _umask()})
            accepted = standby.receive_message(sock)
        except OSError:
            return None
        if not accepted or "pid" not in accepted:
            return None  # it was taken by another command, or it is shutting down
        return _wait_for_exit(sock, accepted["pid"])


def _wait_for_exit(sock: socket.socket, pid: int) -> int:
    """Pass our signals on to `pid` until its exit message; when it dies without one, end
    as it did (the signal we passed on) or with 1 and one line."""
    received: list[int] = []

    def forward(signum: int, _frame) -> None:
        received.append(signum)
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    sock.settimeout(None)
    while True:
        try:
            message = standby.receive_message(sock)
            break
        except InterruptedError:
            continue
        except OSError:
            message = None
            break
    if message is not None and "exit" in message:
        return int(message["exit"])
    if received and received[-1] != signal.SIGINT:
        signal.signal(received[-1], signal.SIG_DFL)
        os.kill(os.getpid(), received[-1])
    if received:
        return EXIT_INTERRUPTED
    print(f"mptfx: the warm process (pid {pid}) that ran this command ended without an "
          f"exit code (killed?); its log: {_log_hint()}", file=sys.stderr)
    return EXIT_PIPELINE_FAILED


def _log_hint() -> str:
    folder = standby.standby_dir()
    return str(standby.paths(folder, standby.key())[2]) if folder else "n/a"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def start(quiet: bool = True, environ: dict[str, str] | None = None,
          path: list[str] | None = None) -> int | None:
    """Start the standby for `environ` and `path` (default this process's environment and
    sys.path) in the background unless one runs (or is starting); its pid, or None. It
    imports for a while, then waits."""
    environ = dict(os.environ if environ is None else environ)
    path = list(sys.path if path is None else path)
    folder = standby.standby_dir() if standby.enabled(environ) else None
    if folder is None:
        return None
    standby_key = standby.key(environ, path)
    socket_path, lock_path, log_path = standby.paths(folder, standby_key)
    if lock_held(lock_path):
        return None
    command = [sys.executable, *subprocess._args_from_interpreter_flags(), "-c",
               "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
               "from pipelines.standby.server import serve; serve(sys.argv[2], sys.argv[3])",
               json.dumps(path), str(folder), standby_key]
    if log_path.exists() and log_path.stat().st_size > LOG_LIMIT_BYTES:
        log_path.unlink()
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                   env=environ, start_new_session=True, close_fds=True)
    if not quiet:
        print(f"mptfx: warming a process for the next run (pid {process.pid}; "
              f"MPTFX_STANDBY=off to never do this, `mptfx standby stop` to end it)",
              file=sys.stderr)
    return process.pid


def after_cold_run(argv: list[str], environ: dict[str, str], path: list[str]) -> None:
    """After `argv` ran in this process, started with `environ` and sys.path `path` (the
    command changed both since: TensorFlow's variables, vendored folders): note what it
    imported for the standby, start one."""
    if not (standby.enabled(environ) and served(argv)):
        return
    folder = standby.standby_dir()
    if folder is None:
        return
    from pipelines.standby.preload import record_modules

    record_modules(folder)
    start(quiet=False, environ=environ, path=path)


def lock_held(lock_path) -> bool:
    """True while a standby (starting or waiting) holds `lock_path`."""
    import fcntl

    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops the lock we may have taken
    return False


def ping(socket_path, timeout: float) -> int | None:
    """The pid of the standby at `socket_path` if it takes commands within `timeout`."""
    sock = connect(socket_path, timeout)
    if sock is None:
        return None
    with sock:
        try:
            sock.sendall(b"P")
            standby.send_message(sock, {"op": "ping"})
            reply = standby.receive_message(sock)
        except OSError:
            return None
    return int(reply["pid"]) if reply and "pid" in reply else None


def wait_ready(timeout: float, pid: int | None = None) -> int | None:
    """Wait until the standby for this environment takes commands; its pid, or None when
    it is not ready within `timeout` or nothing is starting (`pid`: one just started)."""
    folder = standby.standby_dir()
    if folder is None:
        return None
    socket_path, lock_path, _ = standby.paths(folder, standby.key())
    deadline = time.monotonic() + timeout
    while True:
        ready = ping(socket_path, max(0.1, deadline - time.monotonic()))
        if ready is not None:
            return ready
        if time.monotonic() >= deadline or not (standby.running(pid) or lock_held(lock_path)):
            return None
        time.sleep(0.2)

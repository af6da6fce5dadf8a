"""The standby process: import what a run imports, wait for one command, run it, exit.

Started by `client.start` as `serve(folder, key)` in its own session with the command's
interpreter, flags, sys.path and environment. It holds `<key>.lock` while it imports and
waits (so one standby per key), listens on `<key>.sock` (mode 0600, in a folder only this
user can open, and it checks the peer's uid), answers pings once it is ready, and exits
after MPTFX_STANDBY_IDLE_SECONDS without a command, or on SIGTERM.

What it imports: a fixed list, then every module the last command it ran had imported, in
that order (`preload-modules.txt`, written after each command; only modules from the
installed packages, the standard library and our own packages, never a user's model file).
"""

from __future__ import annotations

import atexit
import fcntl
import importlib
import logging
import os
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from pathlib import Path

from pipelines import standby
from pipelines.standby.preload import preload_names, record_modules

FIXED_PRELOAD = (
    "pipelines.cli", "pipelines.run_command", "pipelines.api", "tensorflow", "tfx.v1",
    "tensorflow_model_analysis", "apache_beam", "pipelines.pipeline", "pipelines.local_runner",
    "pipelines.summary", "components.trainer.module", "components.tflite.component", "mlflow",
)
logger = logging.getLogger("mptfx.standby")


class _Stop(Exception):
    """SIGTERM while waiting."""


def serve(folder: str, standby_key: str) -> None:
    """Run one standby until it has served a command (then the process exits) or idled."""
    # Our own lines only, to the standby's log: the root logger stays as a fresh process
    # has it.
    socket_path, lock_path, log_path = standby.paths(Path(folder), standby_key)
    handler = logging.FileHandler(log_path)  # not stderr: that becomes the caller's
    handler.setFormatter(logging.Formatter("%(asctime)s mptfx standby: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    for _ in range(20):  # `mptfx standby status` probes the lock for an instant
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            time.sleep(0.05)
    else:
        logger.info("another standby holds %s; exiting", lock_path)
        return
    os.ftruncate(lock_fd, 0)
    os.write(lock_fd, f"{os.getpid()}\n".encode())

    def stop(_signum, _frame):
        raise _Stop()

    signal.signal(signal.SIGTERM, stop)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if socket_path.exists():  # a standby that died; we hold its lock now
            socket_path.unlink()
        listener.bind(str(socket_path))
        os.chmod(socket_path, 0o600)
        listener.listen(16)
        started = time.monotonic()
        count = _warm_up(Path(folder))
        logger.info("ready: %d modules imported in %.1f s; pid %d", count,
                    time.monotonic() - started, os.getpid())
        job = _wait_for_command(listener, standby.idle_seconds())
    except _Stop:
        logger.info("stopped by SIGTERM")
        job = None
    finally:
        listener.close()
        socket_path.unlink(missing_ok=True)
        os.close(lock_fd)  # a successor may start while this one runs its command
    if job is None:
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _run(*job, Path(folder))


def _warm_up(folder: Path) -> int:
    from pipelines.console import quiet_tensorflow

    quiet_tensorflow()  # as `mptfx run` does before TensorFlow is imported
    names = [*FIXED_PRELOAD, *preload_names(folder)]
    count = 0
    for name in dict.fromkeys(names):
        try:
            importlib.import_module(name)
            count += 1
        except _Stop:
            raise
        except BaseException:  # noqa: BLE001 - a module that fails to import is skipped
            logger.info("not preloaded: %s", name)
    return count


def _wait_for_command(listener: socket.socket, idle: float):
    """Answer pings until a `run` arrives: (connection, its three fds, the request); None
    after `idle` seconds without one."""
    deadline = time.monotonic() + idle
    while True:
        listener.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            logger.info("idle for %.0f s; exiting", idle)
            return None
        fds: list[int] = []
        try:
            conn.settimeout(10)
            caller, uid, _gid = struct.unpack("3i", conn.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
            _, fds, _, _ = socket.recv_fds(conn, 1, 3)
            request = standby.receive_message(conn) if uid == os.getuid() else None
            if request and request.get("op") == "run" and len(fds) == 3:
                conn.settimeout(None)
                logger.info("running %s in %s for pid %d", " ".join(request["argv"]),
                            request["cwd"], caller)
                return conn, fds, request
            if request and request.get("op") == "ping":
                standby.send_message(conn, {"pid": os.getpid(), "ready": True})
        except (OSError, ValueError):
            logger.info("a bad request", exc_info=True)
        for fd in fds:
            os.close(fd)
        conn.close()


def _run(conn: socket.socket, fds: list[int], request: dict, folder: Path) -> None:
    """Become the command's process, run `mptfx argv`, send the exit code, exit."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.umask(int(request["umask"]))
    sys.argv = list(request["argv"])
    sys.stdout.reconfigure(line_buffering=os.isatty(1))
    done = threading.Event()

    def watch_client() -> None:
        """The client went away (killed): go with it, as one process would."""
        try:
            while conn.recv(1):
                pass
        except OSError:
            pass
        if not done.is_set():
            os.kill(os.getpid(), signal.SIGKILL)

    standby.send_message(conn, {"pid": os.getpid()})
    threading.Thread(target=watch_client, name="mptfx-standby-client", daemon=True).start()
    before = list(sys.modules)
    started = time.monotonic()
    code = _main(sys.argv[1:])
    logger.info("exit %d after %.1f s", code, time.monotonic() - started)
    record_modules(folder, before)
    done.set()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        standby.send_message(conn, {"exit": code})
    finally:
        os._exit(code)


def _main(argv: list[str]) -> int:
    from pipelines.cli import main

    try:
        return int(main(argv) or 0)
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return int(exit_.code or 0)
        print(exit_.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - as an uncaught exception ends a process
        traceback.print_exc()
        return 1

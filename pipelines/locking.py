"""One retraining at a time: an exclusive lock that a killed holder cannot leave behind.

The lock is `fcntl.flock` on a file in the workspace. The kernel drops it when the holding
process dies, even under `kill -9`, so a stale lock is taken over by the next run without
any timeout guessing; the file's content (pid, host, start time) is only there to tell the
person at the terminal who holds it, or whose lock was taken over.

    with RunLock(workspace / "retrain.lock") as lock:
        if not lock.acquired:
            print(f"already running (since {lock.holder['since']}, pid {lock.holder['pid']})")
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import socket
from pathlib import Path
from typing import Any


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """Context manager: `acquired` says whether this process holds the lock; `holder` is the
    current holder (when not acquired) or the stale previous one that was taken over."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.acquired = False
        self.took_over = False
        self.holder: dict[str, Any] = {}
        self._handle = None

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115 (held open for the lock's lifetime)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.holder = self._read(handle)
            handle.close()
            return self
        self.holder = self._read(handle)
        self._handle = handle
        self.acquired = True
        # Content left behind means its writer died without releasing (a clean exit empties it).
        self.took_over = bool(self.holder)
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        }))
        handle.flush()
        return self

    @staticmethod
    def _read(handle: Any) -> dict[str, Any]:
        handle.seek(0)
        content = handle.read().strip()
        try:
            return json.loads(content) if content else {}
        except ValueError:
            return {}

    def __exit__(self, *exc_info: object) -> None:
        if self._handle is not None:
            self._handle.seek(0)
            self._handle.truncate()
            self._handle.flush()
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None

    def describe_holder(self) -> str:
        """`since 2026-11-30T01:02:03+00:00, pid 123 on host` for messages."""
        holder = self.holder
        alive = ""
        if holder.get("host") == socket.gethostname() and "pid" in holder:
            alive = "" if _pid_alive(int(holder["pid"])) else ", no longer running"
        return (f"since {holder.get('since', '?')}, pid {holder.get('pid', '?')} "
                f"on {holder.get('host', '?')}{alive}")

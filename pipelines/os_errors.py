"""An OS error names where it happened: the component or step, the path, and for a full disk
the space left.

    stage = Stage()
    stage.enter("preparing the data", workspace.root / "data")
    ...
    except Exception as error:
        raise_if_disk_full(error, stage, log_path)      # DiskFull: exit 2, one line

A full disk reaches mptfx in many shapes: `OSError(ENOSPC)` from a write (no file name),
a TensorFlow or Beam error quoting it, ML Metadata's sqlite "database or disk is full".
The exception chain is searched for any of them; the line then names what was being done
(the component, or a step such as writing summary.json), the path it writes, and how much
the filesystem holding it has left now.
"""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from components.errors import UsageError

_DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
# How libraries quote a full disk when they wrap the OSError (or never had one: sqlite).
_DISK_FULL_TEXTS = ("No space left on device", "database or disk is full",
                    "Disk quota exceeded")


class DiskFull(UsageError):
    """The disk (or quota) holding the workspace is full: exit 2 with one line naming the
    component, the path and the space left."""


@dataclass
class Stage:
    """What a command is doing now, for the line an OS error becomes: a step (a component's
    name, or e.g. "writing summary.json") and the path it writes."""

    name: str = "starting"
    path: Path | None = None

    def enter(self, name: str, path: Path | str | None) -> None:
        self.name, self.path = name, Path(path) if path is not None else None


def disk_full_cause(error: BaseException) -> BaseException | None:
    """The exception in `error`'s chain (itself, its causes and contexts) that says the disk
    is full, or None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _DISK_FULL_ERRNOS:
            return current
        if any(text in str(current) for text in _DISK_FULL_TEXTS):
            return current
        current = current.__cause__ or current.__context__
    return None


def format_bytes(size: float) -> str:
    """`512 B`, `4 KiB`, `8.0 MiB`, `1.25 GiB`: sizes as `df -h` users read them."""
    if size < 1024:
        return f"{size:.0f} B"
    if size < 2**20:
        return f"{size / 1024:.0f} KiB"
    if size < 2**30:
        return f"{size / 2**20:.1f} MiB"
    return f"{size / 2**30:.2f} GiB"


def space_left(path: Path) -> str:
    """`4 KiB free of 8.0 MiB on /mnt/disk now`: the filesystem holding `path` (its nearest
    existing folder), measured now (what the failed step had written may be gone)."""
    existing = Path(os.path.abspath(path))
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    mount = existing
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    usage = shutil.disk_usage(existing)
    return f"{format_bytes(usage.free)} free of {format_bytes(usage.total)} on {mount} now"


def describe_disk_full(cause: BaseException, stage: Stage, fallback: Path,
                       log_path: Path | None = None) -> str:
    """The line for a full disk: the step, what it could not write, the space left now."""
    named = getattr(cause, "filename", None)
    path = Path(named) if named else (stage.path or fallback)
    log = f" (full log: {log_path}; it may end early, it is on that disk)" if log_path else ""
    return (f"no space left on device: {stage.name} could not write {path} "
            f"({space_left(path)}); free some space there or give --workspace a folder on "
            f"another disk{log}")


def disk_full_error(error: BaseException, stage: Stage, fallback: Path,
                    log_path: Path | None = None) -> DiskFull | None:
    """DiskFull naming `stage` when `error` comes from a full disk, else None. `fallback`
    is the path named when neither the error nor the stage names one."""
    cause = disk_full_cause(error)
    if cause is None:
        return None
    return DiskFull(describe_disk_full(cause, stage, fallback, log_path))


def raise_if_disk_full(error: BaseException, stage: Stage, fallback: Path,
                       log_path: Path | None = None) -> None:
    """Raise `disk_full_error(...)` when there is one; else return."""
    disk_full = disk_full_error(error, stage, fallback, log_path)
    if disk_full is not None:
        raise disk_full from error


def describe_os_error(error: OSError, where: str) -> str:
    """One line for an OS error that ended a command: `where`, the path(s) it names, the
    reason, and the space left when the disk is full."""
    paths = [str(name) for name in (error.filename, error.filename2) if name is not None]
    reason = error.strerror or str(error)
    line = f"{where}: " + (f"cannot use {' -> '.join(paths)}: " if paths else "") + reason
    if error.errno in _DISK_FULL_ERRNOS:
        line += f" ({space_left(Path(paths[0]) if paths else Path.cwd())})"
    return line

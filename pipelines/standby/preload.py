"""Which modules a standby imports ahead: the ones earlier commands imported, in order.

    record_modules(folder)           # after a command: add what this process imported
    names = preload_names(folder)    # what the next standby imports

Only modules of the installed packages, the standard library and our own packages are
recorded, never a user's model file or a test module.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

from pipelines import standby

PRELOAD_FILE = "preload-modules.txt"


def preload_names(folder: Path) -> list[str]:
    try:
        return (folder / PRELOAD_FILE).read_text().split()
    except OSError:
        return []


def record_modules(folder: Path, before: list[str] = ()) -> None:
    """Add to PRELOAD_FILE, in import order, the modules this process imported (but those in
    `before`) that the next standby may import ahead: from the installed packages, the
    standard library or our packages."""
    roots = {sysconfig.get_paths()[name] for name in ("purelib", "platlib", "stdlib",
                                                        "platstdlib")}
    roots |= {str(standby.repo_root() / package) for package in standby.CODE_PACKAGES}
    skip = set(before)
    names = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) or ""
        if name in skip or name.startswith(("tests", "__main__")) or not path:
            continue
        if any(path.startswith(root + os.sep) for root in roots):
            names.append(name)
    old = preload_names(folder)
    merged = list(dict.fromkeys([*old, *names]))
    if merged == old:
        return
    temporary = folder / f"{PRELOAD_FILE}.{os.getpid()}"
    temporary.write_text("\n".join(merged) + "\n")
    os.replace(temporary, folder / PRELOAD_FILE)

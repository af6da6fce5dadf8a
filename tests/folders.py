"""Folders compared before and after: what a test checks was left untouched."""

from __future__ import annotations

import hashlib
from pathlib import Path


def tree_hash(folder: Path) -> str:
    """sha256 over every file's path (relative to `folder`) and bytes, in path order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()

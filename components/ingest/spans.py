"""Spans: dated or numbered data drops, TFX's span convention.

A data root organised as `<root>/span-<N>/<class>/<image>` (or any folder-name pattern with
`{SPAN}`, e.g. `/data/drop-{SPAN}`) holds one drop per span. A run trains on the latest span,
or on a rolling window of the last K spans (`data.spans.window`); the Examples artifact
records the latest span, and `mptfx retrain` asks ML Metadata which spans were trained on.

    select_data("/data/digits", window=2)  # DataSelection(root, ["span-2", "span-3"], span=3)

The root is read once: the same read finds the spans, or, when there are none, is the top of
the folder's one listing (listing.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from components.ingest.listing import list_folder, list_spans, read_folder
from components.ingest.selection import DataSelection

SPAN_PLACEHOLDER = "{SPAN}"
_DEFAULT_SPAN_PATTERN = "span-" + SPAN_PLACEHOLDER


def _pattern_regex(folder_pattern: str) -> re.Pattern[str]:
    before, _, after = folder_pattern.partition(SPAN_PLACEHOLDER)
    return re.compile(f"^{re.escape(before)}(\\d+){re.escape(after)}$")


def discover_spans(entries: list[Path],
                   folder_pattern: str = _DEFAULT_SPAN_PATTERN) -> dict[int, str]:
    """Span number → folder name for the folders among a root's `entries` (`read_folder`)
    matching the pattern."""
    regex = _pattern_regex(folder_pattern)
    found: dict[int, str] = {}
    for entry in entries:
        match = regex.match(entry.name)
        if match and entry.is_dir():
            found[int(match.group(1))] = entry.name
    return found


def split_span_pattern(source: str) -> tuple[str, str]:
    """`/data/drop-{SPAN}` → ("/data", "drop-{SPAN}"); a plain folder → (folder, "span-{SPAN}")."""
    if SPAN_PLACEHOLDER in source:
        parent, folder_pattern = os.path.split(source.rstrip("/"))
        if SPAN_PLACEHOLDER in parent:
            raise ValueError(f"{SPAN_PLACEHOLDER} may only appear in the last folder name of "
                             f"data.source. Received: {source!r}")
        return parent or ".", folder_pattern
    return source, _DEFAULT_SPAN_PATTERN


def select_data(source: str, window: int = 1) -> DataSelection:
    """The last `window` spans under `source`, or `source` itself when it has no spans,
    listed (the run's one listing).

    Raises:
        FileNotFoundError: `source` names a span pattern no folder matches.
        ValueError: `{SPAN}` outside the last folder name.
        DataError: see `list_folder`, `list_spans`.
    """
    root, folder_pattern = split_span_pattern(source)
    if SPAN_PLACEHOLDER in source and not os.path.isdir(root):
        raise FileNotFoundError(f"no folder matching {folder_pattern!r} in {root}")
    entries = read_folder(root)
    spans = discover_spans(entries, folder_pattern)
    root = str(Path(root))
    if not spans:
        if SPAN_PLACEHOLDER in source:
            raise FileNotFoundError(f"no folder matching {folder_pattern!r} in {root}")
        return DataSelection(root=root, listing=list_folder(root, entries))
    chosen = sorted(spans)[-window:]
    span_dirs = [spans[n] for n in chosen]
    return DataSelection(root=root, span_dirs=span_dirs, span=chosen[-1], spans=chosen,
                         listing=list_spans(root, span_dirs))

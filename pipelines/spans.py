"""Spans: dated or numbered data drops, TFX's span convention.

A data root organised as `<root>/span-<N>/<class>/<image>` (or any folder-name pattern with
`{SPAN}`, e.g. `/data/drop-{SPAN}`) holds one drop per span. A run trains on the latest span,
or on a rolling window of the last K spans (`data.spans.window`); the Examples artifact
records the latest span, and `mptfx retrain` asks ML Metadata which spans were trained on.

    select_data("/data/digits", window=2)  # DataSelection(root, ["span-2", "span-3"], span=3)
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

SPAN_PLACEHOLDER = "{SPAN}"
_DEFAULT_SPAN_PATTERN = "span-" + SPAN_PLACEHOLDER


@dataclass(frozen=True)
class DataSelection:
    """What one run ingests: `root`, and below it the span folders (none: `root` itself)."""

    root: str
    span_dirs: list[str] = field(default_factory=list)
    span: int = 0
    spans: list[int] = field(default_factory=list)
    # "images" (class folders), "tfrecords" or "volumes": what `model.name: auto` reads
    # before the Ingest to lay out the pipeline (a segmentation model's Evaluator).
    kind: str = "images"

    @property
    def folders(self) -> list[str]:
        """The folders whose files are ingested."""
        return [os.path.join(self.root, d) for d in self.span_dirs] or [self.root]


def _pattern_regex(folder_pattern: str) -> re.Pattern[str]:
    before, _, after = folder_pattern.partition(SPAN_PLACEHOLDER)
    return re.compile(f"^{re.escape(before)}(\\d+){re.escape(after)}$")


def discover_spans(root: str, folder_pattern: str = _DEFAULT_SPAN_PATTERN) -> dict[int, str]:
    """Span number → folder name for the sub-folders of `root` matching the pattern."""
    regex = _pattern_regex(folder_pattern)
    found: dict[int, str] = {}
    if not os.path.isdir(root):
        return found
    for entry in sorted(os.listdir(root)):
        match = regex.match(entry)
        if match and os.path.isdir(os.path.join(root, entry)):
            found[int(match.group(1))] = entry
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
    """The last `window` spans under `source`, or `source` itself when it has no spans."""
    root, folder_pattern = split_span_pattern(source)
    spans = discover_spans(root, folder_pattern)
    if not spans:
        if SPAN_PLACEHOLDER in source:
            raise FileNotFoundError(f"no folder matching {folder_pattern!r} in {root}")
        return DataSelection(root=str(Path(root)))
    chosen = sorted(spans)[-window:]
    return DataSelection(
        root=str(Path(root)), span_dirs=[spans[n] for n in chosen], span=chosen[-1], spans=chosen
    )

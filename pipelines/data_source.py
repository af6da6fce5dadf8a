"""What a run ingests: `--data`, else `data.source`, resolved to one DataSelection.

    data = resolve_data(config, workspace, args.data)   # UsageError (exit 2) naming the folder
    data.kind, data.root, data.span_dirs, data.listing  # what the Ingest reads, listed once
    data.parameter()                                    # the Ingest's data_selection

`builtin:digits` and `synthetic:volumes` are exported into the workspace first. The data is
listed here, once per run (`components/ingest/listing.py` decides its kind from what it
finds), before any component starts: a missing, empty or single-class folder costs seconds,
not a pipeline run. The listing is stored in the pipeline root by its hash
(`components/ingest/selection.py`); the Ingest reads it from there, and the input
fingerprint, TFX's cache key and `mptfx retrain`'s "no new data" come from it.
"""

from __future__ import annotations

import os

from components.errors import UsageError
from components.ingest.selection import DataSelection
from pipelines.config import Config
from pipelines.workspace import Workspace


def resolve_data(config: Config, workspace: Workspace, data_arg: str | None) -> DataSelection:
    """What to ingest: --data, else data.source, with its latest span(s), listed and its
    listing stored in the pipeline root.

    Raises:
        UsageError: an unknown `builtin:`/`synthetic:` source or a folder that cannot be
            ingested (one line naming it).
        OSError: the workspace cannot be written.
    """
    from components.ingest.errors import DataError
    from components.ingest.selection import stage_listing

    try:
        selection = _select(config, workspace, data_arg or config.data.source)
    except (DataError, FileNotFoundError, ValueError) as error:
        raise UsageError(str(error)) from None
    return stage_listing(selection, workspace.pipeline_root(config.pipeline.name))


def _select(config: Config, workspace: Workspace, source: str) -> DataSelection:
    """The selection of `source`, listed (raises what `select_data` raises)."""
    from components.ingest.builtin_digits import export_digits
    from components.ingest.config import BUILTIN_DIGITS, SYNTHETIC_VOLUMES
    from components.ingest.selection import select_folder
    from components.ingest.spans import select_data

    if source == BUILTIN_DIGITS:
        return select_folder(export_digits(workspace.builtin_data_dir,
                                           config.data.builtin_per_class))
    if source == SYNTHETIC_VOLUMES:
        from components.ingest.synthetic_volumes import export_volumes

        # Cubes of the model's slice size (auto: 16x16x16): depth = height.
        size = config.model.input_size
        height, width = (16, 16) if size == "auto" else size
        return select_folder(export_volumes(workspace.builtin_data_dir.parent / "volumes",
                                            config.data.builtin_per_class,
                                            (height, height, width)))
    if source.startswith("builtin:") or source.startswith("synthetic:"):
        raise UsageError(f"unknown data.source {source!r}; use {BUILTIN_DIGITS}, "
                         f"{SYNTHETIC_VOLUMES} or a folder")
    return select_data(os.path.abspath(source), config.data.spans.window)

"""What a run ingests: `--data`, else `data.source`, resolved to a DataSelection.

    data = resolve_data(config, workspace, args.data)   # UsageError (exit 2) naming the folder
    data.root, data.span_dirs                           # what the Ingest reads

`builtin:digits` and `synthetic:volumes` are exported into the workspace first; a folder is
checked before any component starts, so a missing, empty or single-class folder costs
seconds, not a pipeline run.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from components.core.config import Config
from components.errors import UsageError


def resolve_data(config: Config, workspace: Any, data_arg: str | None) -> Any:
    """What to ingest (a DataSelection): --data, else data.source, with its latest span(s);
    builtin:digits and synthetic:volumes are exported into the workspace first."""
    from components.core.config import BUILTIN_DIGITS, SYNTHETIC_VOLUMES
    from components.ingest.listing import DataError, is_tfrecord_dir, scan_image_folder
    from components.ingest.volume_source import is_volume_dir
    from pipelines.datasets import export_digits
    from pipelines.spans import DataSelection, select_data

    source = data_arg or config.data.source
    if source == BUILTIN_DIGITS:
        exported = export_digits(workspace.builtin_data_dir, config.data.builtin_per_class)
        return DataSelection(root=str(exported), kind="images")
    if source == SYNTHETIC_VOLUMES:
        from pipelines.volumes import export_volumes

        # Cubes of the model's slice size (auto: 16x16x16): depth = height.
        size = config.model.input_size
        height, width = (16, 16) if size == "auto" else size
        exported = export_volumes(workspace.builtin_data_dir.parent / "volumes",
                                  config.data.builtin_per_class, (height, height, width))
        return DataSelection(root=str(exported), kind="volumes")
    if source.startswith("builtin:") or source.startswith("synthetic:"):
        raise UsageError(f"unknown data.source {source!r}; use {BUILTIN_DIGITS}, "
                         f"{SYNTHETIC_VOLUMES} or a folder")
    try:
        selection = select_data(os.path.abspath(source), config.data.spans.window)
        kinds = set()
        for folder in selection.folders:
            if is_tfrecord_dir(folder):
                kinds.add("tfrecords")
            elif is_volume_dir(folder):
                kinds.add("volumes")
            else:
                kinds.add("images")
                scan_image_folder(folder)  # fails fast: missing, empty or single-class folder
    except (DataError, FileNotFoundError, ValueError) as error:
        raise UsageError(str(error)) from None
    kind = kinds.pop() if len(kinds) == 1 else "images"  # mixed span folders: images
    return dataclasses.replace(selection, kind=kind)

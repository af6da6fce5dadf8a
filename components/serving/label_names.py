"""The class names a served classifier carries: `assets.extra/labels.txt` in its SavedModel.

One name per line in class id order, the format of TF Lite's `labels.txt`; the Trainer's
export writes it beside the warm-up records, and clients that read `probabilities` (such as
`mptfx predict`) name the classes with it. A leaf: it imports nothing from mptfx.

    write_label_names(export_dir, ["cat", "dog"])
    read_label_names("workspace/serving/pets/3")     # ["cat", "dog"]
"""

from __future__ import annotations

import os
from collections.abc import Sequence

LABELS_FILE = os.path.join("assets.extra", "labels.txt")


def labels_text(label_names: Sequence[str]) -> str:
    """The file's text: each name on its own line (the Ingest refuses names with breaks)."""
    return "".join(f"{name}\n" for name in label_names)


def write_label_names(export_dir: str, label_names: Sequence[str]) -> str:
    """Writes `<export_dir>/assets.extra/labels.txt`; returns its path."""
    import tensorflow as tf  # tf.io.gfile: the export may be on any filesystem TF writes

    path = os.path.join(export_dir, LABELS_FILE)
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path, "w") as handle:
        handle.write(labels_text(label_names))
    return path


def read_label_names(saved_model_dir: str) -> list[str]:
    """The class names of the SavedModel in `saved_model_dir`, in class id order.

    Raises:
        FileNotFoundError: naming the file when the SavedModel has none (exported by an
            mptfx older than `predict_image_bytes`, or not by mptfx).
    """
    path = os.path.join(saved_model_dir, LABELS_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no {LABELS_FILE} in {saved_model_dir}: the class names of "
                                f"this SavedModel are unknown (export it again with mptfx)")
    with open(path, encoding="utf-8") as handle:
        return handle.read().splitlines()

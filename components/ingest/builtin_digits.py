"""The built-in data set: scikit-learn's UCI handwritten digits as image folders.

`mptfx run` with no data argument exports the 1,797 real 8×8 grayscale digits once into the
workspace, one folder per class, as PNG files — the same layout a user's own data has — so
the ingest component reads them exactly as it would read anyone's images.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

_DONE_MARKER = ".export-complete"


def export_digits(destination: str | os.PathLike, per_class: int = 0) -> Path:
    """Write the digits as `<destination>/<class>/digit_<index>.png`; returns the folder.

    `per_class` > 0 keeps only the first N images of each class (small test runs). A
    folder already exported with the same `per_class` is reused as is; the export goes to
    a temporary sibling first and is renamed into place, so a killed export never leaves a
    half-written data set behind.
    """
    from PIL import Image
    from sklearn.datasets import load_digits

    destination = Path(destination)
    marker = destination / _DONE_MARKER
    if marker.exists() and marker.read_text().strip() == str(per_class):
        return destination

    digits = load_digits()
    # The pixel values are 0..16 (counts of set bits in 4×4 blocks); stretch to 0..255.
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".digits-", dir=destination.parent))
    written_per_class: dict[int, int] = {}
    for index, (image, label) in enumerate(zip(images, digits.target, strict=True)):
        label = int(label)
        if per_class and written_per_class.get(label, 0) >= per_class:
            continue
        class_dir = staging / str(label)
        class_dir.mkdir(exist_ok=True)
        Image.fromarray(image, mode="L").save(class_dir / f"digit_{index:04d}.png")
        written_per_class[label] = written_per_class.get(label, 0) + 1
    (staging / _DONE_MARKER).write_text(str(per_class))
    if destination.exists():
        shutil.rmtree(destination)
    staging.rename(destination)
    return destination


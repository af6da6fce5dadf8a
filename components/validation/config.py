"""`evaluator`: the bar a trained model must clear to be blessed (components/validation/).

pipelines/config.py composes it into the one `Config`; pipelines/pipeline.py turns it into
the Evaluator's thresholds. Importing this module is cheap (pydantic only).

    EvaluatorSection().min_accuracy   # 0.9
"""

from __future__ import annotations

from pydantic import Field

from components.core.sections import StrictSection


class EvaluatorSection(StrictSection):
    min_accuracy: float = Field(0.9, ge=0.0, le=1.0)
    # Segmentation models (unet3d) are gated on Dice over all eval voxels instead.
    min_dice: float = Field(0.8, ge=0.0, le=1.0)
    # How much accuracy (or Dice) may drop against the latest blessed model (absolute, e.g.
    # 0.01 = 1 point).
    max_regression: float = Field(0.01, ge=0.0, le=1.0)

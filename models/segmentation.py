"""Dice metric and loss for binary segmentation (foreground probability per voxel).

Dice = 2 |P ∩ T| / (|P| + |T|), P the predicted foreground (probability >= 0.5), T the
true mask. `DiceCoefficient` accumulates the counts over a whole epoch (one Dice over every
voxel seen, like TFMA's F1 score on the flattened masks); `DiceBCELoss` is binary
cross-entropy plus (1 - soft Dice) per example, the usual loss for small foregrounds.

Example:

    model.compile(optimizer, loss=DiceBCELoss(), metrics=[DiceCoefficient()])
"""

from __future__ import annotations

import keras
from keras import ops

_SMOOTH = 1.0  # keeps soft Dice defined (and = 1) for an empty mask predicted empty


@keras.saving.register_keras_serializable(package="mptfx")
class DiceCoefficient(keras.metrics.Metric):
    """Dice of the thresholded prediction against the mask, accumulated over all batches.

    Args:
        threshold: probability at or above which a voxel counts as foreground.
        name: the metric's name in logs (`dice`, `val_dice`).

    Example:

        dice = DiceCoefficient()
        dice.update_state(masks, probabilities)
        dice.result()  # 1.0 for a perfect segmentation; 1.0 when both are empty
    """

    def __init__(self, threshold: float = 0.5, name: str = "dice", **kwargs: object) -> None:
        super().__init__(name=name, **kwargs)
        self.threshold = float(threshold)
        self.intersection = self.add_variable(shape=(), initializer="zeros", name="intersection")
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        """Adds |P ∩ T| and |P| + |T| of this batch (`sample_weight` is not supported)."""
        del sample_weight
        y_true = ops.cast(ops.reshape(y_true, (-1,)) > 0.5, "float32")
        y_pred = ops.cast(ops.reshape(ops.cast(y_pred, "float32"), (-1,)) >= self.threshold,
                          "float32")
        self.intersection.assign_add(ops.sum(y_true * y_pred))
        self.total.assign_add(ops.sum(y_true) + ops.sum(y_pred))

    def result(self):
        """2 |P ∩ T| / (|P| + |T|), and 1.0 when both are empty."""
        return ops.where(
            self.total > 0, 2.0 * self.intersection / ops.maximum(self.total, 1e-7), 1.0
        )

    def reset_state(self) -> None:
        """Forgets the counts (Keras calls this at the start of every epoch)."""
        self.intersection.assign(0.0)
        self.total.assign(0.0)

    def get_config(self) -> dict:
        """The constructor arguments, for saving."""
        return {**super().get_config(), "threshold": self.threshold}


@keras.saving.register_keras_serializable(package="mptfx")
class DiceBCELoss(keras.losses.Loss):
    """Binary cross-entropy + (1 - soft Dice), per example, computed in float32.

    Example:

        loss = DiceBCELoss()(masks, probabilities)  # masks and probabilities [B, D, H, W, 1]
    """

    def __init__(self, name: str = "dice_bce", **kwargs: object) -> None:
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        """Per-example loss [B] from masks and foreground probabilities of any rank >= 2."""
        y_true = ops.cast(y_true, "float32")
        y_pred = ops.cast(y_pred, "float32")
        batch = ops.shape(y_true)[0]
        y_true = ops.reshape(y_true, (batch, -1))
        y_pred = ops.reshape(y_pred, (batch, -1))
        bce = ops.mean(keras.losses.binary_crossentropy(y_true[..., None], y_pred[..., None]),
                       axis=-1)
        intersection = ops.sum(y_true * y_pred, axis=-1)
        soft_dice = (2.0 * intersection + _SMOOTH) / (
            ops.sum(y_true, axis=-1) + ops.sum(y_pred, axis=-1) + _SMOOTH
        )
        return bce + (1.0 - soft_dice)

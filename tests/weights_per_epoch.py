"""What a user checks of a fine-tuning run: each layer's weights at every epoch end.

    recorder = WeightsPerEpoch()
    fit_fields(fields, extra_callbacks=[recorder])      # after the Trainer's own callbacks
    assert same(recorder.epochs[0]["conv1"], start["conv1"])   # frozen in epoch 1

(Imported by the test modules only: keras is imported here, after tests/conftest.py has
imported mptfx, which sets TensorFlow's oneDNN switch before TensorFlow loads.)
"""

from __future__ import annotations

import keras
import numpy as np


class WeightsPerEpoch(keras.callbacks.Callback):
    """Copies of every layer's weights, and the optimizer in use, at each epoch end."""

    def __init__(self) -> None:
        super().__init__()
        self.epochs: list[dict[str, list[np.ndarray]]] = []
        self.optimizers: list[keras.optimizers.Optimizer] = []

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.epochs.append({layer.name: [np.array(w) for w in layer.get_weights()]
                            for layer in self.model.layers if layer.weights})
        self.optimizers.append(self.model.optimizer)


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    """Whether two layers' weight lists are equal, bit for bit."""
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))

"""`trainer.fine_tune`: Keras' transfer-learning recipe in one run.

1. Epochs 1..`frozen_epochs`: the backbone is frozen (`trainable = False`, so its
   BatchNormalization layers run in inference mode) and only the head trains, at
   `trainer.learning_rate`.
2. Then `FineTuneCallback` unfreezes the backbone ("all") or its last K blocks, keeps the
   BatchNormalization layers frozen unless `train_batchnorm`, and recompiles with the same
   optimizer recipe (loss-scaled under mixed_float16, carrying the current loss scale over;
   accumulating when asked) at `learning_rate x learning_rate_factor`, inside the
   distribution strategy's scope, so the rest of the run fine-tunes.

The head is the registered model's `head` layers (`register_model(..., head=...)`: seed_cnn's
`dense` and `logits`, resnet50's `logits`), else the last layer with weights. A block is a
Keras Applications stage block (`conv5_block3_*`, `block7a_*`), else one weighted layer.

    head = freeze_backbone(model, model_head("resnet50"))
    compile_training_model(model, ...)
    model.fit(..., callbacks=[FineTuneCallback(trainer.fine_tune, head, recompile), ...])
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import keras
from absl import logging

from components.trainer.config import FineTuneSection

# A Keras Applications block: ResNet's conv5_block3_1_conv, its stem conv1_conv / conv1_bn,
# EfficientNet's block7a_... (stem_..., top_...), MobileNetV2's block_16_..., MobileNetV3's
# expanded_conv_10_... (conv_1 / conv_1_bn), ConvNeXt's convnext_tiny_stage_3_block_2_...;
# photo_cnn's block3_...
_BLOCK = re.compile(r"^(conv\d+_block\d+|conv_?\d+|block_?\d+[a-z]?|expanded_conv(?:_\d+)?"
                    r"|\w+?_stage_\d+_block_\d+|stem|top)_")


def head_and_backbone(
    model: keras.Model, head_names: Sequence[str] = ()
) -> tuple[list[keras.layers.Layer], list[keras.layers.Layer]]:
    """(head, backbone): the model's layers with weights, split at the head.

    Raises:
        ValueError: a registered head name the model does not have.
    """
    weighted = [layer for layer in model.layers if layer.weights]
    if head_names:
        names = {layer.name for layer in weighted}
        missing = sorted(set(head_names) - names)
        if missing:
            raise ValueError(f"trainer.fine_tune: model {model.name!r} has no head layer(s) "
                             f"{missing}; its layers with weights: {sorted(names)}")
        head = [layer for layer in weighted if layer.name in head_names]
    else:
        head = weighted[-1:]
    head_ids = {id(layer) for layer in head}
    return head, [layer for layer in weighted if id(layer) not in head_ids]


def backbone_blocks(backbone: Sequence[keras.layers.Layer]) -> list[list[keras.layers.Layer]]:
    """The backbone's weighted layers grouped into blocks, in model order."""
    blocks: list[list[keras.layers.Layer]] = []
    keys: list[str] = []
    for layer in backbone:
        match = _BLOCK.match(layer.name)
        key = match.group(1) if match else layer.name
        if keys and keys[-1] == key:
            blocks[-1].append(layer)
        else:
            keys.append(key)
            blocks.append([layer])
    return blocks


def freeze_backbone(model: keras.Model, head_names: Sequence[str] = ()) -> list[str]:
    """Freezes every weighted layer but the head's; returns the head layers' names."""
    head, backbone = head_and_backbone(model, head_names)
    for layer in backbone:
        layer.trainable = False
    frozen = sum(int(keras.ops.size(w)) for layer in backbone for w in layer.weights)
    logging.info("Trainer: fine_tune: backbone frozen (%d layers, %d weights); the head %s "
                 "trains", len(backbone), frozen, [layer.name for layer in head])
    return [layer.name for layer in head]


def unfreeze_backbone(model: keras.Model, head_names: Sequence[str], unfreeze: int | str,
                      train_batchnorm: bool = False) -> list[str]:
    """Makes the whole backbone ("all") or its last `unfreeze` blocks trainable again;
    BatchNormalization layers stay frozen (inference mode) unless `train_batchnorm`.
    Returns the layers unfrozen."""
    _, backbone = head_and_backbone(model, head_names)
    blocks = backbone_blocks(backbone)
    chosen = blocks if unfreeze == "all" else blocks[-int(unfreeze):]
    unfrozen = []
    for layer in (layer for block in chosen for layer in block):
        if isinstance(layer, keras.layers.BatchNormalization) and not train_batchnorm:
            continue
        layer.trainable = True
        unfrozen.append(layer.name)
    return unfrozen


class FineTuneCallback(keras.callbacks.Callback):
    """Unfreezes the backbone when epoch `frozen_epochs + 1` begins and recompiles.

    Args:
        fine_tune: the `trainer.fine_tune` section (frozen_epochs >= 1).
        head_names: what `freeze_backbone` returned.
        recompile: compiles the model again at the plan's learning rate times the factor it
            is given, continuing the schedule from the epoch it is given, with the loss
            scale to start from (None: the configured one); called inside the strategy's
            scope, under the training policy.
        learning_rate: the learning rate of the frozen epochs (the schedule's peak).
        data_spec: the training dataset's element_spec (the new metrics and optimizer are
            built from it before the next step is traced).

    Attributes:
        unfrozen_at_epoch: the 1-based epoch the backbone unfroze at, or None.
        unfrozen_layers: the layers made trainable.
    """

    def __init__(self, fine_tune: FineTuneSection, head_names: Sequence[str],
                 recompile: Callable[[float, int, float | None], None], learning_rate: float,
                 data_spec: object) -> None:
        super().__init__()
        self.fine_tune = fine_tune
        self.head_names = list(head_names)
        self.recompile = recompile
        self.learning_rate = learning_rate
        self.data_spec = data_spec
        self.unfrozen_at_epoch: int | None = None
        self.unfrozen_layers: list[str] = []

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        if self.unfrozen_at_epoch is not None or epoch < self.fine_tune.frozen_epochs:
            return
        from components.trainer.optimizer import current_loss_scale

        model = self.model
        scale = current_loss_scale(model.optimizer)
        self.unfrozen_layers = unfreeze_backbone(model, self.head_names, self.fine_tune.unfreeze,
                                                 self.fine_tune.train_batchnorm)
        learning_rate = self.learning_rate * self.fine_tune.learning_rate_factor
        with model.distribute_strategy.scope():
            self.recompile(self.fine_tune.learning_rate_factor, epoch, scale)
            model.build_compiled_state(self.data_spec)
        model.make_train_function(force=True)
        self.unfrozen_at_epoch = epoch + 1
        batchnorm = "trains" if self.fine_tune.train_batchnorm else "stays frozen"
        logging.info(
            "Trainer: fine_tune: epoch %d: unfroze %s of the backbone (%d layers; "
            "BatchNormalization %s), learning rate %g (peak, x the schedule)", epoch + 1,
            self.fine_tune.unfreeze
            if self.fine_tune.unfreeze == "all" else f"the last {self.fine_tune.unfreeze} "
            "block(s)", len(self.unfrozen_layers), batchnorm, learning_rate,
        )

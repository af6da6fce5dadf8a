"""Knowledge distillation in the train step: the student learns from a frozen teacher's
softened predictions as well as from the labels (Hinton et al. 2015; Keras' "Knowledge
Distillation" example).

Every classifier here ends in a float32 softmax, so a model's log-probabilities are its
logits up to a constant per example, and softmax(log p / T) is its prediction at
temperature T. The loss of one step is

    alpha * loss(labels, student) + (1 - alpha) * T^2 * KL(teacher_T || student_T)

both terms in float32 whatever the compute dtype, each reduced over the batch and divided
by the replica count as Keras' own losses are (so gradients all-reduce to the mean), and
the sum scaled by the optimizer's loss scale under mixed_float16 like any loss. The
teacher runs before the gradient tape opens, in inference mode (BatchNormalization with its
moving statistics, dropout off), so no gradient and no activation of it is kept.

    distillation = Distillation(teacher, temperature=4.0, alpha=0.1)
    model.distill_from(distillation)          # TrainingModel
    model.fit(...)                            # history: distillation_loss per epoch
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import keras
import tensorflow as tf

DISTILLATION_LOSS = "distillation_loss"
# Probabilities below this are taken as this before the log: a float32 softmax can
# underflow to 0 (log 0 = -inf), and 1e-30 is still a normal float32.
_MIN_PROBABILITY = 1e-30


@keras.saving.register_keras_serializable(package="mptfx")
class DistillationLoss(keras.losses.Loss):
    """T^2 x KL(softmax(log teacher / T) || softmax(log student / T)) per example, in float32.

    Called as `loss(teacher_probabilities, student_probabilities)` (the teacher's are the
    targets): Keras reduces it over the batch and divides it by the replica count.
    """

    def __init__(self, temperature: float = 4.0, name: str = "distillation",
                 **kwargs: object) -> None:
        super().__init__(name=name, **kwargs)
        self.temperature = float(temperature)

    def call(self, teacher_probabilities: object, student_probabilities: object) -> object:
        ops = keras.ops
        teacher_log = soft_log_probabilities(teacher_probabilities, self.temperature)
        student_log = soft_log_probabilities(student_probabilities, self.temperature)
        divergence = ops.sum(ops.exp(teacher_log) * (teacher_log - student_log), axis=-1)
        return divergence * (self.temperature ** 2)

    def get_config(self) -> dict:
        return {**super().get_config(), "temperature": self.temperature}


def soft_log_probabilities(probabilities: object, temperature: float) -> object:
    """log softmax(log p / T) in float32: a model's prediction softened at temperature T."""
    ops = keras.ops
    logits = ops.log(ops.maximum(ops.cast(probabilities, "float32"), _MIN_PROBABILITY))
    return keras.activations.log_softmax(logits / temperature, axis=-1)


def adapt_images(images: tf.Tensor, size: Sequence[int], channels: int) -> tf.Tensor:
    """The student's batch as the teacher takes it: resized (bilinear) to the teacher's
    `size` and converted to its `channels` when they differ (a no-op when they agree)."""
    if int(images.shape[-1]) != channels:
        images = (tf.image.grayscale_to_rgb(images) if channels == 3
                  else tf.image.rgb_to_grayscale(images))
    if list(images.shape[1:3]) != [int(side) for side in size]:
        images = tf.image.resize(images, [int(side) for side in size])
    return images


@dataclasses.dataclass
class Distillation:
    """What the train step needs from the teacher: its predictions and the loss terms.

    Attributes:
        teacher: float32 class probabilities of an image batch, in inference mode (a
            frozen Keras model, or a SavedModel's signature).
        temperature: T of DistillationLoss.
        alpha: the weight of the true labels' loss.
        input_size, channels: what the teacher takes (the student's images are adapted).
    """

    teacher: Callable[[tf.Tensor], tf.Tensor]
    temperature: float
    alpha: float
    input_size: Sequence[int]
    channels: int

    def __post_init__(self) -> None:
        self.loss = DistillationLoss(self.temperature)

    def teacher_probabilities(self, images: tf.Tensor) -> tf.Tensor:
        """The teacher's float32 probabilities for the student's batch (no gradient)."""
        adapted = adapt_images(images, self.input_size, self.channels)
        return tf.stop_gradient(tf.cast(self.teacher(adapted), tf.float32))

    def total_loss(self, labels_loss: tf.Tensor, teacher_probabilities: tf.Tensor,
                   student_probabilities: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """(the loss to minimise, the distillation term), both float32 and, like
        `labels_loss`, already divided by the replica count."""
        distillation = self.loss(teacher_probabilities, student_probabilities)
        total = (self.alpha * tf.cast(labels_loss, tf.float32)
                 + (1.0 - self.alpha) * distillation)
        return total, distillation

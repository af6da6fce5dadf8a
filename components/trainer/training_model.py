"""A functional Keras model whose train step also reports what the callbacks watch.

The step Keras' TensorFlow trainer runs (forward pass, `compute_loss`, the optimizer's
`scale_loss` and `apply_gradients`, `compute_metrics`), written with public members only
(the one private hook left, the distributed build, is `keras_private.LocalBatchSymbolicBuild`),
plus:

- `gradient_norm`: the global L2 norm of the unscaled gradients, averaged over the epoch's
  finite steps (the seed's "watch gradient_norm"); under several replicas, each replica's
  norm of its own batch, averaged;
- `step_loss`: this step's own loss (the `loss` in logs is the running epoch mean, which one
  NaN poisons for the rest of the epoch);
- `step_skipped`: 1.0 when dynamic loss scaling skipped this step (inf/NaN gradients);
- `distillation_loss` (with a teacher, `distill_from`): the teacher term of the loss, the
  teacher's predictions computed before the gradient tape (components/trainer/distill.py).

`step_loss` and `step_skipped` are per-batch signals for `DivergenceGuard`; the callbacks
remove them from the epoch logs.

Example:

    model = TrainingModel.wrap(build_model("seed_cnn", (16, 16, 1), 10))
    model.compile(optimizer, loss, metrics, auto_scale_loss=False)
"""

from __future__ import annotations

import keras
import tensorflow as tf

from components.trainer.distill import DISTILLATION_LOSS, Distillation
from components.trainer.keras_private import LocalBatchSymbolicBuild
from components.trainer.optimizer import skips_nonfinite_steps

STEP_LOSS = "step_loss"
STEP_SKIPPED = "step_skipped"
GRADIENT_NORM = "gradient_norm"
PER_STEP_KEYS = (STEP_LOSS, STEP_SKIPPED)


class TrainingModel(LocalBatchSymbolicBuild, keras.Model):
    """The registry model's layers, trained with an instrumented train step.

    Its weights are the wrapped model's weights in the same order, so `get_weights()`
    matches a fresh build of the same registry model.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.gradient_norm_tracker = keras.metrics.Mean(name=GRADIENT_NORM)
        # A plain object: Keras tracks layers, not this, so the teacher's weights never
        # join the student's (weights, checkpoints, exports).
        self.distillation: Distillation | None = None

    @classmethod
    def wrap(cls, model: keras.Model) -> TrainingModel:
        """A `TrainingModel` over the layers of the functional `model` (shared, not copied)."""
        return cls(inputs=model.inputs, outputs=model.outputs, name=model.name)

    def distill_from(self, distillation: Distillation) -> None:
        """Trains on `distillation`'s loss from now on; call in the strategy's scope before
        the first fit (the train step is traced with it)."""
        self.distillation = distillation
        self.distillation_loss_tracker = keras.metrics.Mean(name=DISTILLATION_LOSS)

    def train_step(self, data: object) -> dict[str, tf.Tensor]:
        """One optimizer step on a batch; returns the metrics plus the per-step signals."""
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        batch_size = tf.shape(tf.nest.flatten(x)[0])[0]
        distillation = self.distillation
        # Outside the tape: nothing of the frozen teacher is recorded for gradients.
        teacher = distillation.teacher_probabilities(x) if distillation else None
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            # Already divided by the replica count, so gradients all-reduce to the mean.
            loss = self.compute_loss(x, y, y_pred, sample_weight, training=True)
            if distillation is not None:
                loss, distilled = distillation.total_loss(loss, teacher, y_pred)
                self.distillation_loss_tracker.update_state(
                    distilled * tf.cast(tf.distribute.get_strategy().num_replicas_in_sync,
                                        tf.float32), sample_weight=batch_size)
            step_loss = loss * tf.cast(
                tf.distribute.get_strategy().num_replicas_in_sync, loss.dtype
            )
            self.loss_tracker().update_state(step_loss, sample_weight=batch_size)
            scaled_loss = self.optimizer.scale_loss(loss)
        trainable_weights = self.trainable_weights
        gradients = tape.gradient(scaled_loss, trainable_weights)
        present = [g for g in gradients if g is not None]
        # scale_loss(1) is the loss scale in use: dynamic, fixed, or 1 without scaling.
        scale = tf.cast(self.optimizer.scale_loss(tf.ones([], tf.float32)), tf.float32)
        norm = tf.linalg.global_norm([tf.cast(g, tf.float32) for g in present]) / scale
        # An overflow step says nothing about the gradients' size: leave it out (a weight
        # of 0 alone would still turn the mean into NaN: 0 * inf).
        finite_norm = tf.math.is_finite(norm)
        self.gradient_norm_tracker.update_state(
            tf.where(finite_norm, norm, 0.0), sample_weight=tf.cast(finite_norm, tf.float32)
        )
        self.optimizer.apply_gradients(zip(gradients, trainable_weights, strict=True))
        if skips_nonfinite_steps(self.optimizer):
            # The loss-scale optimizer's own test, element by element: a norm can overflow
            # while every gradient is finite. Other optimizers never skip, and the per-step
            # check would cost ~10% of a small model's step.
            skipped = tf.logical_not(
                tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in present])
            )
        else:
            skipped = tf.constant(False)
        results = self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)
        results[STEP_LOSS] = step_loss
        results[STEP_SKIPPED] = tf.cast(skipped, tf.float32)
        return _reducible_across_workers(results)

    def loss_tracker(self) -> keras.metrics.Metric:
        """The mean loss `compile` adds, the `loss` of the logs (first in `self.metrics`)."""
        for metric in self.metrics:
            if metric.name == "loss":
                return metric
        raise RuntimeError(
            f"model {self.name!r} has no 'loss' metric: call compile(loss=...) before fit"
        )

    def test_step(self, data: object) -> dict[str, tf.Tensor]:
        """Keras' evaluation step, without the train-only gradient norm."""
        results = super().test_step(data)
        results.pop(GRADIENT_NORM, None)
        results.pop(DISTILLATION_LOSS, None)  # eval loss: the labels' alone
        return _reducible_across_workers(results)


def _reducible_across_workers(results: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """Gives each scalar a length-1 axis under MultiWorkerMirroredStrategy.

    Keras 3.12 averages step results across workers with `strategy.reduce("MEAN", v,
    axis=0)`, which fails for scalars ("Invalid reduction dimension 0 for input with 0
    dimensions"); averaged over that axis they come back as scalars.
    """
    strategy = tf.distribute.get_strategy()
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return results
    if _worker_count(strategy) < 2:  # one worker: Keras reduces locally
        return results
    return {key: tf.reshape(value, [1]) for key, value in results.items()}


def _worker_count(strategy: tf.distribute.MultiWorkerMirroredStrategy) -> int:
    """The chief and worker tasks of the strategy's cluster (1 without a TF_CONFIG cluster)."""
    jobs = strategy.cluster_resolver.cluster_spec().as_dict()
    return max(1, len(jobs.get("chief", ())) + len(jobs.get("worker", ())))

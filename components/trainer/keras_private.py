"""The only module of mptfx that reaches Keras/TensorFlow private names.

Every other module uses Keras' and TensorFlow's public API only
(`tests/unit/test_keras_public_api.py` scans components/, pipelines/ and models/ for private
attributes, `keras.src` and `tensorflow.python` and allows them here alone). What is left
had no public equivalent in the pinned Keras (requirements.lock):

- `keras.src.optimizers` (a module name, in `skip_tensorflow_eager_keras_import`):
  `import tensorflow` imports it eagerly; the InfraValidator's model process, which loads a
  plain SavedModel and never Keras, blocks that import to start ~40% sooner and 130 MB
  smaller (docs/guide/infra-validation.md). If Keras moves the module, the block does
  nothing and the process is only slower.
- `Trainer._maybe_symbolic_build`, `Trainer._symbolic_build` and `_distribute_strategy`
  (in `LocalBatchSymbolicBuild`): Keras builds a model from its first distributed batch
  averaged with `strategy.reduce`, which MultiWorkerMirroredStrategy cannot do for an
  (x, y) tuple ("Attempt to convert a value (PerReplica...)", keras-team/keras#20585);
  `fit` calls that hook unconditionally, so only overriding it avoids the reduce.
  `_symbolic_build` is also what `build_compiled_state` calls: a compile's variables (the
  optimizer's slots, the metrics') must be made in the strategy's scope, not inside the
  traced step, both for the first compile (without a strategy Keras makes them in the
  first trace, and a tf.function that creates variables is traced twice) and for the
  recompile `trainer.fine_tune` makes during `fit`; Keras has no public call for that.

Importing this module checks the installed Keras against the versions these names were
checked with (`TESTED_KERAS`) and raises one line naming the installed version otherwise.
The version is read from the package metadata: importing `keras` here would undo the
model process's saving.
"""

from __future__ import annotations

import importlib.metadata
import sys

TESTED_KERAS = "3.12"  # the minor version (major.minor) every name above was checked in


class UntestedKerasError(RuntimeError):
    """The installed Keras is not the version whose private names mptfx relies on."""


def check_keras_version(version: str) -> None:
    """Raises `UntestedKerasError` unless `version` is a `TESTED_KERAS` release.

    Args:
        version: a Keras version string, e.g. "3.12.4".
    """
    if version != TESTED_KERAS and not version.startswith(TESTED_KERAS + "."):
        raise UntestedKerasError(
            f"keras {version} is installed but mptfx's components/trainer/keras_private.py "
            f"was checked against keras {TESTED_KERAS}.x only. Fix: install the keras of "
            f"requirements.lock, or re-check each private name listed in keras_private.py "
            f"against {version} and set TESTED_KERAS"
        )


check_keras_version(importlib.metadata.version("keras"))


def skip_tensorflow_eager_keras_import() -> None:
    """Makes the next `import tensorflow` skip its eager import of Keras' optimizers.

    TensorFlow catches the ImportError this causes; `keras.optimizers` stays unusable in
    this process afterwards, so call it only in a process that never trains.
    """
    sys.modules.setdefault("keras.src.optimizers", None)  # type: ignore[arg-type]


class LocalBatchSymbolicBuild:
    """Mixin for a `keras.Model` subclass (listed before `keras.Model`): under a
    distribution strategy, builds the model from this worker's first replica's batch
    instead of the cross-replica mean Keras 3.12 computes (keras-team/keras#20585)."""

    def _maybe_symbolic_build(self, iterator: object = None, data_batch: object = None) -> None:
        import tensorflow as tf

        strategy = self._distribute_strategy
        if strategy is None or iterator is None:
            super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)
            return
        for _, _, batches in iterator:
            # Only the shapes and dtypes matter for building.
            data_batch = tf.nest.map_structure(
                lambda value: strategy.experimental_local_results(value)[0]
                if isinstance(value, tf.distribute.DistributedValues)
                else value,
                next(batches),
            )
            break
        with strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    def build_compiled_state(self, element_spec: object) -> None:
        """Creates the variables of a `compile` (the first one, and the recompile
        trainer.fine_tune makes during `fit` after unfreezing): its metrics', loss's and
        optimizer's, here in the caller's strategy scope, not inside the traced step.
        `element_spec`: the training dataset's (shapes only)."""
        import keras
        import tensorflow as tf

        symbolic = tf.nest.map_structure(
            lambda spec: keras.KerasTensor(tuple(spec.shape), spec.dtype.name), element_spec)
        self._symbolic_build(data_batch=symbolic)

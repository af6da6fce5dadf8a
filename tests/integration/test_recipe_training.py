"""The recipe through the Trainer's real fit step, on real digits (8x8, the Ingest's format).

- cosine with warm-up trains at `batch_size: auto` (which scales the learning rate up, so the
  warm-up turns on by itself) and at a large batch with a large rate, without divergence,
  and the learning-rate curve rises, peaks and decays;
- early stopping restores the best epoch's weights: a callback after the Trainer's records
  every epoch's weights checksum and eval loss, and the model fit returns has the checksum
  of the epoch with the lowest eval loss, which is not the last one.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from components.trainer.config import TrainerConfig
from components.trainer.fit import fit_model
from components.trainer.runtime import resolve_runtime, resolve_task
from components.trainer.tuning import choose_training
from components.trainer.warm_start import weights_checksum
from tests.trainer_testdata import fn_args_dict, make_fn_args, write_digits_examples


@pytest.fixture(scope="module")
def examples_uri(tmp_path_factory) -> str:
    return write_digits_examples(str(tmp_path_factory.mktemp("digits")), 600)


def _fit(examples_uri: str, out: str, callbacks=(), **trainer):
    fields = fn_args_dict(examples_uri, out, input_size=(16, 16), autotune="off", xla="off",
                          **trainer)
    fn_args = make_fn_args(fields, light=True)
    config = TrainerConfig.from_custom_config(fields["custom_config"])
    runtime = resolve_runtime(config.trainer, {})
    keras.utils.set_random_seed(config.trainer.seed)
    task = resolve_task(config.model, config.data, fn_args.train_files)
    choice = choose_training(runtime, config.trainer, task, fn_args.train_files)
    return fit_model(fn_args, config.trainer, choice.runtime, task, fields["model_run_dir"],
                     {}, choice.probed_model, extra_callbacks=list(callbacks)), choice.runtime


@pytest.mark.parametrize("trainer", [
    # The largest batch within a 16 MB step (about 100): the learning rate scaled up.
    {"batch_size": "auto", "batch_memory_mb": 16},
    {"batch_size": 240, "learning_rate": 0.0075},    # half the split per step, 7.5x the rate
])
def test_cosine_with_warmup_trains_large_batches_without_divergence(
        examples_uri, tmp_path, trainer, restore_dtype_policy):
    fitted, runtime = _fit(examples_uri, str(tmp_path), epochs=20, **trainer)
    plan = fitted.lr_plan
    assert plan.schedule == "cosine" and plan.warmup_epochs == 2  # 10 % of 20 epochs
    if trainer["batch_size"] == "auto":
        assert runtime.learning_rate > 0.001        # scaled up for the batch ...
        assert "scaled up for the batch" in plan.warmup_reason  # ... so it warms up
    rates = fitted.history["learning_rate"]
    assert 0 < rates[0] < plan.peak                               # still warming at epoch 1
    assert max(rates) == pytest.approx(plan.peak) == rates[1]    # the peak at epoch 2
    assert np.all(np.diff(rates[1:]) <= 1e-9)                     # then only down
    assert rates[-1] == pytest.approx(0.0, abs=1e-9)              # to 0 at the last step
    losses = fitted.history["loss"]
    assert all(np.isfinite(losses)) and fitted.history["skipped_steps"] == [0.0] * 20
    assert losses[-1] < 0.5 * losses[0]              # it trained ...
    assert fitted.history["val_accuracy"][-1] >= 0.5  # ... well above chance (0.1)


class ChecksumPerEpoch(keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.checksums: list[str] = []

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.checksums.append(weights_checksum(self.model))


def test_early_stopping_exports_the_best_epochs_weights(examples_uri, tmp_path,
                                                         restore_dtype_policy):
    recorder = ChecksumPerEpoch()
    # A constant, too high rate on a small split: the eval loss bounces, so the best epoch is
    # not the last one. Room for 40 epochs: within 12, the bounces once happened to leave the
    # best at epoch 12 (under oneDNN's kernels); by the plateau, 3 worse epochs in a row stop it.
    fitted, _ = _fit(examples_uri, str(tmp_path), callbacks=[recorder], epochs=40,
                     lr_schedule="constant", warmup_epochs=0, learning_rate=0.02,
                     label_smoothing=0.0, early_stopping={"patience": 3})
    losses = fitted.history["val_loss"]
    best = int(np.argmin(losses))
    record = fitted.early_stopping
    assert record["best_epoch"] == best + 1 and record["restored_best_weights"]
    assert best + 1 < record["epochs_trained"]      # a later epoch was worse ...
    assert weights_checksum(fitted.model) == recorder.checksums[best]  # ... and not exported
    assert weights_checksum(fitted.model) != recorder.checksums[-1]

"""The training recipe: the learning rate over the run, label smoothing, the fine-tune plan.

What a user would check in the run's learning-rate curve and summary: a linear warm-up to
the configured rate, a cosine decay to 0 at the last step, the warm-up on when the rate was
scaled up for a larger batch, and the fine-tune recipe only with pretrained weights.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from components.trainer.config import FineTuneSection, TrainerSection
from components.trainer.recipe import (
    LearningRatePlan,
    SparseCrossentropyWithSmoothing,
    WarmupSchedule,
    resolve_fine_tune,
    resolve_warmup,
)


def _rates(schedule, steps):
    return np.array([float(schedule(step)) for step in steps])


def test_warmup_then_cosine_to_zero():
    schedule = WarmupSchedule(0.1, warmup_steps=10, total_steps=110, decay="cosine")
    warm = _rates(schedule, range(10))
    np.testing.assert_allclose(warm, 0.1 * np.arange(1, 11) / 10, rtol=1e-5)  # linear
    assert float(schedule(10)) == pytest.approx(0.1)                          # the peak
    assert float(schedule(60)) == pytest.approx(0.05, rel=1e-4)               # halfway
    assert float(schedule(110)) == pytest.approx(0.0, abs=1e-7)               # the last step
    after = _rates(schedule, range(10, 111))
    assert np.all(np.diff(after) <= 1e-9)                                     # only down


def test_constant_after_warmup_and_a_continued_schedule():
    constant = WarmupSchedule(0.01, 4, 100, "constant")
    np.testing.assert_allclose(_rates(constant, [0, 3, 4, 99]), [0.0025, 0.01, 0.01, 0.01])
    # After the fine-tune recompile: the same curve, scaled, from where it was.
    whole = WarmupSchedule(0.1, 10, 110, "cosine")
    continued = WarmupSchedule(0.01, 10, 110, "cosine", start_step=50)
    assert float(continued(0)) == pytest.approx(0.1 * float(whole(50)))


@pytest.mark.parametrize("setting, schedule, epochs, scaled_up, expected", [
    ("auto", "cosine", 15, False, 1.5),
    ("auto", "constant", 15, False, 0.0),
    ("auto", "constant", 15, True, 1.5),     # a larger batch's rate wants a warm-up
    ("auto", "cosine", 100, True, 5.0),      # at most 5 epochs
    ("auto", "cosine", 3, False, 0.3),       # a fraction of an epoch in a short run
    (0.5, "cosine", 15, True, 0.5),          # an explicit value wins
])
def test_warmup_epochs(setting, schedule, epochs, scaled_up, expected):
    assert resolve_warmup(setting, schedule, epochs, scaled_up)[0] == expected


def test_a_constant_rate_without_warmup_is_a_plain_float():
    trainer = TrainerSection(lr_schedule="constant", warmup_epochs=0)
    plan = LearningRatePlan.of(trainer, 0.001, False, steps_per_epoch=45)
    assert plan.learning_rate() == 0.001
    assert plan.learning_rate(0.1) == pytest.approx(0.0001)
    cosine = LearningRatePlan.of(TrainerSection(), 0.001, False, 45)
    assert isinstance(cosine.learning_rate(), WarmupSchedule)
    assert cosine.to_dict()["warmup_epochs"] == 1.5


def test_fine_tune_auto_only_with_pretrained_weights():
    auto = FineTuneSection()
    off, _ = resolve_fine_tune(auto, epochs=15, pretrained=False, blocks=17)
    assert off.frozen_epochs == 0
    on, why = resolve_fine_tune(auto, epochs=15, pretrained=True, blocks=17)
    assert (on.frozen_epochs, on.unfreeze) == (5, 5)
    assert "pretrained weights: a third of the epochs" in why and "top 5 of 17 blocks" in why
    given, _ = resolve_fine_tune(FineTuneSection(frozen_epochs=2, unfreeze="all"), 15, True, 17)
    assert (given.frozen_epochs, given.unfreeze) == (2, "all")


def test_label_smoothing_is_cross_entropy_against_smoothed_one_hot():
    probabilities = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]], np.float32)
    labels = np.array([0, 2])
    smoothed = SparseCrossentropyWithSmoothing(0.1)(labels, probabilities)
    targets = np.eye(3)[labels] * 0.9 + 0.1 / 3
    expected = -np.mean(np.sum(targets * np.log(probabilities), axis=1))
    assert float(smoothed) == pytest.approx(expected, rel=1e-5)
    plain = SparseCrossentropyWithSmoothing(0.0)(labels, probabilities)
    assert float(plain) == pytest.approx(
        float(keras.losses.SparseCategoricalCrossentropy()(labels, probabilities)), rel=1e-5)

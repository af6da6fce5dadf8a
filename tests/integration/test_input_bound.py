"""Input-bound detection with the real Trainer: photos at 560 px decoded every epoch with
crop_flip and no cache against the same photos cached, a small model (seed_cnn at 16x16).

The slow input is slow on any CPU: 128 random crops of 560 px JPEGs decoded per step, for a
step whose model alone runs tens of steps/s; the cached one hands out decoded 16x16 images.
On 2 cores the decoding and the step share the CPU, so a busy machine slows the step too and
the share drops: with 224 px photos beside three CPU hogs single epochs measured 0.10-0.85
(CI once saw a median of 0.40); with 400 px, 0.80-0.93, and 0.50-0.94 beside a second such
training and a hog, and CI once saw 0.49. At 560 px (scikit-learn's photos enlarged 2x
first; the decoding doubles) the medians beside a second such training and a hog were 0.73,
0.92, 0.95 and 0.94, against 0.87, 0.61, 0.89 and 0.68 at 400 px in the same sitting
(2026-12-05, the 2-core AVX512_BF16 Xeon).
"""

from __future__ import annotations

import os

import pytest

from components.trainer.input_bound import (
    INPUT_BOUND_SHARE,
    advice,
    assess,
    probe_steps_per_sec,
)
from components.trainer.tuning_record import CellChoice, TuningRecord
from tests.trainer_testdata import fn_args_dict, make_fn_args, write_photo_examples

PHOTOS = 1280  # 1024 train: 8 steps of 128 per epoch
PHOTO_PX = 560  # about 6x the decoding of 224 px: the wait stays the step's larger part


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> str:
    return write_photo_examples(str(tmp_path_factory.mktemp("photos")), PHOTOS, size=PHOTO_PX)


def _train(photos: str, out: str, epochs: int = 4, **trainer: object) -> dict:
    from components.trainer import module

    fields = fn_args_dict(photos, out, input_size=(16, 16), params={"dense_units": 16},
                          epochs=epochs, batch_size=128, autotune="off", **trainer)
    result = module.train_and_export(make_fn_args(fields, light=True))
    return result.summary.to_dict()


def test_photos_decoded_every_epoch_are_input_bound_with_advice(photos, tmp_path,
                                                                 restore_dtype_policy):
    # Six epochs: the share is the median of the epochs after the first, so one epoch slowed
    # by another pytest worker does not decide it (see the module docstring for the figures).
    summary = _train(photos, str(tmp_path), epochs=6, augment="crop_flip", cache_max_mb=0)
    record = summary["input_bound"]
    assert record["wait_share"] > 0.5, record
    assert record["input_bound"] is True
    sentence = record["advice"]
    for named in ("trainer.cache_max_mb", "data.shard_mb", "decode size", "trainer.augment",
                  "more CPU", "x faster without the wait"):
        assert named in sentence, (named, sentence)
    assert f"{100 * record['wait_share']:.0f} %" in sentence
    # The model alone (no probe here: float32 is the one candidate) was timed after training.
    assert record["model_steps_per_sec"] > record["steps_per_sec"]
    assert record["model_steps_source"] == "measured after training on one cached batch"
    assert len(summary["history"]["input_wait_share"]) == 6  # per epoch, for MLflow too


def test_the_same_photos_cached_are_not_input_bound(photos, tmp_path, restore_dtype_policy):
    summary = _train(photos, str(tmp_path), augment="none")
    record = summary["input_bound"]
    assert record["wait_share"] < 0.1, record
    assert record["input_bound"] is False and record["advice"] is None


def test_the_share_is_the_median_after_the_first_epoch_and_sets_the_speedup():
    history = {"input_wait_share": [0.9, 0.2, 0.6, 0.5], "steps_per_sec": [1, 10, 12, 11]}
    record = assess(history, 40.0, "autotune probe (measured)",
                    {"augment": "none", "cache_max_mb": 0, "cache_needed_mb": 30.0,
                     "cached": False, "input_size": [64, 64]})
    assert record["wait_share"] == 0.5 and record["steps_per_sec"] == 11
    assert record["speedup_without_wait"] == 2.0
    assert record["input_bound"] is (0.5 >= INPUT_BOUND_SHARE)
    assert "now 0; the decoded train split needs 30 MB" in record["advice"]
    assert "the model alone runs 40.0 steps/s on cached batches, training ran 11.0" \
        in record["advice"]


def test_a_share_under_the_threshold_gives_no_advice():
    record = assess({"input_wait_share": [0.5, 0.05, 0.07]}, None, "not measured", {})
    assert record["input_bound"] is False and record["advice"] is None


def test_the_probe_figure_is_the_chosen_cells_row():
    choice = CellChoice("mixed_bfloat16", False, 32)
    tuning = TuningRecord("measured", choice, "", "", table=(
        {"precision": "float32", "xla": False, "step_ms": 10.0},
        {"precision": "mixed_bfloat16", "xla": False, "step_ms": 4.0}))
    assert probe_steps_per_sec(tuning) == 250.0
    assert probe_steps_per_sec(TuningRecord("off", choice, "", "")) is None


def test_crop_flip_advice_says_it_is_never_cached():
    record = {"wait_share": 0.8, "speedup_without_wait": 5.0}
    sentence = advice(record, {"augment": "crop_flip", "cache_needed_mb": 12.0,
                               "input_size": [32, 32]})
    assert "crop_flip is never cached" in sentence and "12 MB" in sentence
    assert os.linesep not in sentence

"""`trainer.batch_size: auto` (components/trainer/batch_size.py): the aligned search, the
memory estimate that sizes CPU batches, the learning-rate rules, the GPU probe's handling
of out-of-memory errors, and a real Trainer run that records the batch and why.

The GPU probe is tested with `tf.config.experimental.get_memory_info`'s answers given by
the test and a step that raises TensorFlow's own ResourceExhaustedError: the GPU cannot run
here, and these are its client boundary."""

from __future__ import annotations

import math

import keras
import pytest
import tensorflow as tf

from components.trainer import batch_size as batch_lib
from components.trainer import module
from models import build_model
from tests.trainer_testdata import fn_args_dict, write_digits_examples


def _estimate(precision: str, input_shape=(32, 32, 1)):
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_dtype_policy(precision)
    try:
        model = build_model("seed_cnn", input_shape, 10)
    finally:
        keras.mixed_precision.set_dtype_policy(previous)
    return lambda batch: batch_lib.estimate_training_memory_mb(model, batch)


def test_under_the_same_memory_cap_bfloat16_gets_a_larger_batch_than_float32():
    cap = 64.0
    chosen = {}
    for precision in ("float32", "mixed_bfloat16"):
        fits = batch_lib.estimated_fits(_estimate(precision), cap)
        chosen[precision] = batch_lib.choose_batch_size(
            precision, fits, f"estimate <= {cap} MB", 32, 4096, "the train split")
    assert chosen["mixed_bfloat16"].batch_size > chosen["float32"].batch_size
    for choice in chosen.values():
        batch = choice.batch_size
        assert batch % batch_lib.BATCH_MULTIPLE == 0
        assert choice.precision in choice.reason and f"{batch + 8} would not fit" in \
            choice.reason
    estimate = _estimate("float32")
    assert estimate(chosen["float32"].batch_size) <= cap < estimate(
        chosen["float32"].batch_size + 8)


def test_the_estimate_grows_with_the_batch_and_halves_activations_under_bfloat16():
    float32, bfloat16 = _estimate("float32"), _estimate("mixed_bfloat16")
    per_sample_f32 = float32(101) - float32(100)
    per_sample_bf16 = bfloat16(101) - bfloat16(100)
    assert per_sample_f32 > 0
    # Only the float32 input batch is not halved.
    assert 0.5 < per_sample_bf16 / per_sample_f32 < 0.6
    assert float32(0) == pytest.approx(bfloat16(0))  # float32 weights either way


@pytest.mark.parametrize("limit, expected", [(300, 296), (7, 4), (8, 8), (1, 1)])
def test_the_batch_is_a_multiple_of_8_or_a_power_of_two_below_it(limit, expected):
    search = batch_lib.largest_aligned_batch(lambda b: b <= limit, 32, 4096)
    assert search["largest"] == expected


def test_the_train_split_caps_the_batch_and_says_so():
    choice = batch_lib.choose_batch_size("float32", lambda b: True, "estimate", 32, 1149,
                                         "the train split's 1149 examples per replica")
    assert choice.batch_size == 1144
    assert "the train split's 1149 examples" in choice.reason


def test_nothing_fitting_names_the_keys_to_change():
    with pytest.raises(ValueError, match="trainer.batch_memory_mb or set trainer.batch_size"):
        batch_lib.choose_batch_size("float32", lambda b: False, "estimate <= 1 MB", 32, 4096,
                                    "the train split")


@pytest.mark.parametrize("rule, expected", [
    ("linear", 0.001 * 8), ("sqrt", 0.001 * math.sqrt(8)), ("none", 0.001)])
def test_learning_rate_rules(rule, expected):
    assert batch_lib.scale_learning_rate(0.001, 32, 256, rule) == pytest.approx(expected)


def test_an_unknown_learning_rate_rule_is_named():
    with pytest.raises(ValueError, match="batch_lr_scaling='cubic'"):
        batch_lib.scale_learning_rate(0.001, 32, 256, "cubic")


def test_the_gpu_probe_treats_out_of_memory_and_a_peak_over_the_cap_as_not_fitting():
    peaks = []

    def run_step(batch: int) -> None:
        if batch > 512:
            raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")
        peaks.append(batch * 2**20 * 10)  # 10 MB per sample

    fits = batch_lib.measured_fits(run_step, lambda: {"peak": peaks[-1], "current": 0},
                                   peaks.clear, 0, tf.errors.ResourceExhaustedError)
    assert batch_lib.choose_batch_size("mixed_float16", fits, "GPU", 32, 4096,
                                       "").batch_size == 512
    capped = batch_lib.measured_fits(run_step, lambda: {"peak": peaks[-1], "current": 0},
                                     peaks.clear, 2000, tf.errors.ResourceExhaustedError)
    assert batch_lib.choose_batch_size("mixed_float16", capped, "GPU", 32, 4096,
                                       "").batch_size == 200


def test_a_trainer_run_with_batch_size_auto_records_the_batch_and_why(tmp_path):
    from tfx.components.trainer.fn_args_utils import FnArgs

    uri = write_digits_examples(str(tmp_path / "digits"), 200)
    args = fn_args_dict(uri, str(tmp_path / "out"), epochs=1, batch_size="auto",
                        batch_memory_mb=4, learning_rate=0.001, base_batch_size=32)
    summary = module.train_and_export(FnArgs(**args)).summary.to_dict()
    batch = summary["batch_size"]
    assert batch % 8 == 0 and 8 <= batch <= 160
    assert summary["global_batch_size"] == batch
    assert f"batch_size auto under float32: {batch}" in summary["batch_size_reason"]
    assert "trainer.batch_memory_mb 4 MB" in summary["batch_size_reason"]
    assert summary["learning_rate"] == pytest.approx(0.001 * batch / 32)


def test_the_config_takes_auto_and_yaml_on_off_and_names_bad_values():
    from pipelines.config import ConfigError, load_config

    config = load_config("configs/local.yaml", ["trainer.batch_size=auto",
                                                "trainer.autotune=off",
                                                "trainer.batch_lr_scaling=sqrt"])
    assert config.trainer.batch_size == "auto" and config.trainer.autotune == "off"
    assert config.trainer_custom_config()["trainer"]["batch_lr_scaling"] == "sqrt"
    assert load_config("configs/local.yaml").trainer.autotune == "on"  # `autotune: on`
    with pytest.raises(ConfigError, match=r"trainer.batch_size.*from --set "
                                          r"trainer.batch_size=big"):
        load_config("configs/local.yaml", ["trainer.batch_size=big"])
    with pytest.raises(ConfigError, match="trainer.batch_lr_scaling"):
        load_config("configs/local.yaml", ["trainer.batch_lr_scaling=cubic"])

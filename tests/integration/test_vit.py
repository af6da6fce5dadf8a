"""The ViT trains under mixed_bfloat16 and mixed_float16 and exports, and every TF Lite
variant of it passes the parity gate.

Each case is the Trainer's own `train_and_export` (lint, loss scaling under float16, the
float32 rebuild for serving) on real 8x8 digits at the ViT's 16x16 minimum, then the TF Lite
component's `export_tflite_models` on that SavedModel: fp32, fp16, dynamic_int8 and int8,
each converted, compared with the SavedModel on the eval split and published only if its
gate passes.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from components.tflite.component import export_tflite_models, tflite_source_dir
from components.tflite.convert import VARIANTS
from components.trainer import module
from tests.trainer_testdata import fn_args_dict, make_fn_args, write_digits_examples


@pytest.fixture(scope="module")
def examples_uri(tmp_path_factory) -> str:
    return write_digits_examples(str(tmp_path_factory.mktemp("digits")), 500)


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_the_vit_trains_in_mixed_precision_and_every_tflite_variant_passes(
        examples_uri, tmp_path, precision, restore_dtype_policy):
    fields = fn_args_dict(examples_uri, str(tmp_path / "out"), model="vit", input_size="auto",
                          epochs=8, precision=precision, xla="off", autotune="off",
                          learning_rate=0.003)
    result = module.train_and_export(make_fn_args(fields, light=True))
    summary = result.summary
    assert (summary.model, summary.precision, summary.input_size) == ("vit", precision,
                                                                     [16, 16])
    assert summary.lint == "passed"
    assert all(np.isfinite(summary.history["loss"]))
    if precision == "mixed_float16":
        assert summary.loss_scale["final"] > 0  # dynamic loss scaling ran
    assert summary.final_metric >= 0.6
    publish = tmp_path / "publish"
    report = export_tflite_models(
        tflite_source_dir(os.path.dirname(result.serving_model_dir)), examples_uri,
        str(tmp_path / "tflite"), str(publish), list(VARIANTS), representative_samples=100)
    for variant in VARIANTS:
        assert report[variant]["published"], (variant, report[variant])
        assert (publish / f"{variant}.tflite").stat().st_size > 0

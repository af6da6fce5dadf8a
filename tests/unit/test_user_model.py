"""A user's model file: staged by content hash, imported once per content, registered,
named in the Trainer's custom_config; recurrent layers kept in float32 when asked."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest

from components.trainer import precision
from models import registry, user_module

REPO = Path(__file__).resolve().parents[2]

EXAMPLE = REPO / "examples" / "my_model.py"
LSTM_FILE = REPO / "tests" / "data" / "user_models" / "lstm_rows.py"


def test_staged_copy_is_named_by_content_and_changes_with_it(tmp_path):
    source = tmp_path / "my_model.py"
    source.write_text(EXAMPLE.read_text())
    first = user_module.stage_module_file(str(source), str(tmp_path / "root"))
    again = user_module.stage_module_file(str(source), str(tmp_path / "root"))
    assert first == again
    assert first.path == f"{tmp_path}/root/user_models/{first.sha256[:16]}/my_model.py"
    assert open(first.path).read() == source.read_text()

    source.write_text(EXAMPLE.read_text().replace("units=32", "units=48"))
    changed = user_module.stage_module_file(str(source), str(tmp_path / "root"))
    assert changed.sha256 != first.sha256 and changed.path != first.path
    assert open(first.path).read() == EXAMPLE.read_text()  # the old copy stays for old runs


def test_trainer_custom_config_names_the_staged_file_and_hash(tmp_path):
    """What TFX's cache compares: the Trainer's custom_config differs exactly when the
    file's content does."""
    from pipelines.config import load_config
    from pipelines.pipeline import trainer_custom_config

    source = tmp_path / "my_model.py"
    source.write_text(EXAMPLE.read_text())
    config = load_config(None, [f"model.module_file={source}"])
    first = trainer_custom_config(config, str(tmp_path / "root"))
    assert first == trainer_custom_config(config, str(tmp_path / "root"))
    assert first["model"]["module_source"] == str(source)
    assert first["model"]["module_file"].startswith(f"{tmp_path}/root/user_models/")
    source.write_text(EXAMPLE.read_text() + "\n# tuned\n")
    second = trainer_custom_config(config, str(tmp_path / "root"))
    assert second["model"]["module_sha256"] != first["model"]["module_sha256"]
    assert second["model"]["module_file"] != first["model"]["module_file"]


def test_registered_user_model_builds_with_params_like_any_model(tmp_path):
    staged = user_module.stage_module_file(str(EXAMPLE), str(tmp_path))
    name = user_module.register_user_model(staged.path, "build_model", "classification",
                                           staged.sha256)
    assert name == user_module.register_user_model(staged.path, "build_model",
                                                   "classification", staged.sha256)
    model = registry.build_model(name, (8, 8, 1), 10, units=4)
    assert registry.model_task(name) == "classification"
    assert model.get_layer("learned_scale") is not None
    assert model.layers[-2].units == 10 and model.get_layer(index=5).units == 4
    assert model(np.zeros((2, 8, 8, 1), "float32")).shape == (2, 10)


def test_staged_file_changed_after_staging_is_refused(tmp_path):
    staged = user_module.stage_module_file(str(EXAMPLE), str(tmp_path))
    with open(staged.path, "a") as f:
        f.write("\n# edited in place\n")
    with pytest.raises(user_module.UserModelError, match="the file changed after staging"):
        user_module.load_module(staged.path, staged.sha256)


def test_lstm_under_mixed_float16_is_named_in_a_warning(restore_dtype_policy):
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    builder = user_module.load_builder(str(LSTM_FILE))
    model = builder((8, 8, 1), 10)
    layers = precision.find_recurrent_layers(model)
    warning = precision.recurrent_precision_warning(layers, "mixed_float16", "policy")
    assert "'rows_lstm' (LSTM)" in warning
    assert "trainer.precision: mixed_bfloat16" in warning
    assert "trainer.recurrent_precision: float32" in warning
    assert precision.recurrent_precision_warning(layers, "mixed_bfloat16", "policy") is None


def test_recurrent_precision_float32_trains_the_lstm_in_float32(restore_dtype_policy):
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    model = user_module.load_builder(str(LSTM_FILE))((8, 8, 1), 10, units=8)
    policies = precision.apply_recurrent_precision(model, "mixed_float16", "float32")
    lstm = model.get_layer("rows_lstm")
    assert policies == {"rows_lstm": "float32"}
    assert lstm.compute_dtype == "float32" and lstm.cell.compute_dtype == "float32"
    assert model.get_layer(index=3).compute_dtype == "float16"  # the Dense after it
    model.compile("adam", "sparse_categorical_crossentropy")
    x = np.random.default_rng(0).uniform(size=(16, 8, 8, 1)).astype("float32")
    history = model.fit(x, np.arange(16) % 10, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert lstm.compute_dtype == "float32"


def test_unknown_recurrent_precision_is_named():
    model = keras.Sequential([keras.Input((4, 2)), keras.layers.GRU(2)])
    with pytest.raises(ValueError, match="recurrent_precision='half'"):
        precision.apply_recurrent_precision(model, "mixed_float16", "half")

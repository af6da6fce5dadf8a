"""Config: YAML + --set overrides, typed, and every mistake named."""

import pytest

from pipelines.config import Config, ConfigError, load_config, names_for_data, parse_override


def test_defaults_match_the_shipped_local_yaml():
    # configs/local.yaml documents every key; it must say what the code does.
    assert load_config("configs/local.yaml") == Config()


def test_overrides_are_typed_from_yaml():
    config = load_config("configs/local.yaml", [
        "trainer.epochs=3", "model.input_size=[8, 8]", "trainer.precision=mixed_float16",
        "pipeline.enable_cache=false",
    ])
    assert config.trainer.epochs == 3
    assert config.model.input_size == [8, 8]
    assert config.trainer.precision == "mixed_float16"
    assert config.pipeline.enable_cache is False


@pytest.mark.parametrize("override, named", [
    ("trainer.epoch=3", "unknown config key 'trainer.epoch'"),
    ("nosuchsection.x=1", "unknown config key 'nosuchsection'"),
    ("trainer.precision=float8", "'trainer.precision'"),
    ("trainer.epochs=0", "'trainer.epochs'"),
    ("data.splits={train: 0.5, eval: 0.2}", "'data.splits'"),
    ("model.name=vgg99", "unknown model 'vgg99'"),
    ("data.ingest_engine=spark", "'data.ingest_engine'"),
])
def test_bad_keys_and_values_are_named(override, named):
    with pytest.raises(ConfigError, match="") as caught:
        load_config("configs/local.yaml", [override])
    assert named in str(caught.value)
    assert "\n" not in str(caught.value)


def test_override_without_equals_sign_is_explained():
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_override("trainer.epochs")


def test_missing_and_malformed_config_files_are_named(tmp_path):
    with pytest.raises(ConfigError, match="config file not found: .*nope.yaml"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer: [unclosed\n")
    with pytest.raises(ConfigError, match=f"cannot read config file {bad}"):
        load_config(bad)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(scalar)


def test_trainer_custom_config_is_plain_json():
    import json

    custom = Config().trainer_custom_config()
    assert json.loads(json.dumps(custom)) == custom
    assert set(custom) == {"data", "model", "trainer", "export"}


@pytest.mark.parametrize("override, named", [
    ("trainer.epochs=true", "'trainer.epochs': Input should be a valid integer"),
    ("trainer.batch_size=\"32\"", "'trainer.batch_size'"),
    ("data.source=", "--set data.source= has no value"),
    ('data.source=""', "an empty value would ingest the current folder"),
    ("pusher.model_name=  ", "has no value; give one"),
    ('pipeline.name=""', "'pipeline.name': String should match pattern"),
    ("data.image_size=[100000, 64]", "image_size sides must be at most 8192"),
    ("model.params.dropout=0.3", "belong to one model's builder: set model.name too"),
    ("model.params.weights=imagenet", "set model.name to one of convnext_tiny"),
    ("model.params.weights=weights.bin", "must be none, imagenet or the path of a Keras"),
    ("model.input_size=[64]", "input_size must be [height, width] or auto"),
    ("model.name=resnet9000", "unknown model 'resnet9000'; available: auto,"),
])
def test_strict_values_empty_source_and_model_params_fail_at_load(override, named):
    # Each of these used to pass the config and fail (or silently do the wrong thing)
    # later: epochs=true trained 1 epoch, an empty source ingested the current folder.
    with pytest.raises(ConfigError) as caught:
        load_config("configs/local.yaml", [override])
    assert named in str(caught.value) and f"--set {override}" in str(caught.value)


@pytest.mark.parametrize("override, named", [
    ("model.params.dropuot=0.3", "Unknown parameter(s) for model 'seed_cnn'"),
    ("model.params.dropout=high", "'dropout' of model 'seed_cnn' must be a float"),
    ("model.params.weights=imagenet", "set model.name to one of convnext_tiny"),
])
def test_a_named_model_s_params_are_checked_at_load(override, named):
    with pytest.raises(ConfigError) as caught:
        load_config("configs/local.yaml", ["model.name=seed_cnn", override])
    assert named in str(caught.value) and f"--set {override}" in str(caught.value)


def test_module_file_params_are_not_judged_by_the_builtin_model_they_replace():
    # `units` is not a seed_cnn parameter, but with a module file seed_cnn does not train:
    # the module's builder is what the pre-Ingest model check calls with these params.
    config = load_config("configs/local.yaml", [
        "model.params.units=16", "model.module_file=tests/data/user_models/lstm_rows.py"])
    assert config.model.params == {"units": 16}


def test_non_utf8_config_file_is_one_line_naming_it(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("trainer:\n  epochs: 3  # caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (f"cannot read config file {path}: not UTF-8 text "
                                 "(byte 0xe9 at offset 27)")


@pytest.mark.parametrize("source, names", [
    ("builtin:digits", ("mptfx-digits", "digits")),
    ("synthetic:volumes", ("mptfx-volumes", "volumes")),
    ("/data/flowers", ("flowers", "flowers")),
    ("/data/flowers/", ("flowers", "flowers")),
    ("relative/My Photos (2024)", ("My-Photos-2024", "My-Photos-2024")),
    ("/drops/drop-{SPAN}", ("drop", "drop")),
    ("/data/" + "x" * 80, ("x" * 63, "x" * 63)),
    ("/", None),
])
def test_names_for_data_are_valid_experiment_model_and_label_names(source, names):
    assert names_for_data(source) == names
    if names:
        Config.model_validate({"pipeline": {"name": names[0]},
                               "pusher": {"model_name": names[1]}})  # valid everywhere


def test_a_run_on_a_folder_is_named_after_it_unless_the_config_names_it():
    flowers = load_config("configs/local.yaml", data="/data/flowers")
    assert (flowers.pipeline.name, flowers.pusher.model_name) == ("flowers", "flowers")
    assert flowers.named_after == "/data/flowers"
    source = load_config("configs/local.yaml", ["data.source=/data/cats"])
    assert (source.pipeline.name, source.pusher.model_name) == ("cats", "cats")
    given = load_config("configs/local.yaml", ["pusher.model_name=petals"], data="/data/flowers")
    assert (given.pipeline.name, given.pusher.model_name) == ("flowers", "petals")
    both = load_config("configs/local.yaml", ["pipeline.name=p", "pusher.model_name=m"],
                       data="/data/flowers")
    assert (both.pipeline.name, both.pusher.model_name, both.named_after) == ("p", "m", None)
    assert load_config("configs/local.yaml").pusher.model_name == "digits"
    with pytest.raises(ConfigError, match="cannot name the pipeline after the data folder /"):
        load_config("configs/local.yaml", data="/")


def test_an_empty_config_path_is_an_error_not_the_default():
    for empty in ("", "  "):
        with pytest.raises(ConfigError, match="^--config is empty"):
            load_config(empty)


def test_setting_one_key_of_a_default_pool_keeps_the_rest_of_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/local.yaml: the built-in defaults only
    config = load_config(None, ["kubernetes.pools.gpu.node_selector={pool: a100}",
                                "kubernetes.pools.spot.gpus=2"])
    gpu = config.kubernetes.pools["gpu"]
    assert gpu.node_selector == {"pool": "a100"}
    assert gpu.gpus == 1 and gpu.accelerator == "nvidia-l4"
    assert config.kubernetes.pools["spot"].gpus == 2
    assert config.kubernetes.pools["cpu"].gpus == 0


"""The Trainer's config schema (components/trainer/config.py): one table of keys and defaults
for `--set` and for run_fn's custom_config, every key documented in configs/local.yaml, and
training_summary.json's keys unchanged by the typed summary."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel, Field

from components.trainer import config as trainer_config
from components.trainer.config import TrainerConfig, TrainerSection
from pipelines.config import Config, ConfigError, load_config
from tests.trainer_testdata import fn_args_dict, make_fn_args, write_digits_examples

REPO = Path(__file__).resolve().parents[2]
# The keys of training_summary.json before it became a dataclass, in their order
# (docs/INTERFACES.md); a classifier's headline metric is val_accuracy.
SUMMARY_KEYS = [
    "precision", "precision_reason", "strategy", "replicas", "xla", "epochs", "batch_size",
    "global_batch_size", "learning_rate", "images_per_sec", "input_size", "channels",
    "label_names", "history", "model", "task", "input_shape", "xla_reason",
    "grad_accum_steps", "effective_batch_size", "loss_scale", "skipped_steps", "lint",
    "recurrent_precision", "recurrent_layers", "model_file", "model_file_staged",
    "model_file_sha256", "warm_started_from", "initial_weights_checksum",
    "final_weights_checksum", "resumed_at_epoch", "train_examples", "eval_examples",
    "train_seconds", "images_per_sec_per_epoch", "workers", "task_name", "autotune",
    "batch_size_reason", "autotune_probe_seconds", "model_reason", "input_size_reason",
    "start_weights", "lr_schedule", "label_smoothing", "fine_tune", "early_stopping",
    "distill", "input_bound", "val_accuracy",
]


def test_the_pipelines_custom_config_is_valid_for_run_fn_unchanged():
    """What the pipeline compiles (a JSON string for the Kubernetes runner and KFP) is what
    run_fn's schema reads back, key for key."""
    config = load_config(REPO / "configs" / "local.yaml",
                         ["export.serving_precision=mixed", "trainer.batch_size=auto"])
    custom = config.trainer_custom_config()
    resolved = TrainerConfig.from_custom_config(json.loads(json.dumps(custom)))
    assert resolved.model_dump(exclude={"model": {"module_sha256", "module_source"}}) == custom
    assert resolved.export.serving_precision == "mixed"
    assert resolved.trainer.batch_size == "auto"
    assert custom["data"] == {"channels": "auto"}  # the one data key the Trainer reads


def test_missing_sections_and_keys_take_the_schemas_defaults():
    resolved = TrainerConfig.from_custom_config({"trainer": {"epochs": 3}, "data": {}})
    assert resolved.trainer.epochs == 3
    assert resolved.trainer.cache_max_mb == trainer_config.DEFAULT_CACHE_MAX_MB
    assert resolved.model_dump() == TrainerConfig.from_custom_config(
        {"trainer": {"epochs": 3}}).model_dump()
    assert TrainerConfig.from_custom_config(None) == TrainerConfig()


@pytest.mark.parametrize("custom, named", [
    ({"export": {"serving_precision": "float16"}},
     "'export.serving_precision': Input should be 'float32' or 'mixed' (received 'float16')"),
    ({"data": {"channels": "4"}}, "'data.channels'"),
    ({"data": {"channels": 3}}, "'data.channels'"),  # strict: the config's "3", not 3
    ({"trainer": {"batch_size": 0}}, "'trainer.batch_size'"),
    ({"trainer": {"loss_scale": {"initial": 0}}}, "'trainer.loss_scale.initial'"),
    ({"trainer": {"epoch": 3}}, "unknown config key 'trainer.epoch'"),
    ({"model": {"input_size": [8]}}, "input_size must be [height, width]"),
    ({"trainer": []}, "'trainer'"),
])
def test_a_refused_value_is_one_line_naming_the_key(custom, named):
    with pytest.raises(ValueError) as error:
        TrainerConfig.from_custom_config(custom)
    assert named in str(error.value)
    assert str(error.value).startswith("Trainer custom_config: ")
    assert "\n" not in str(error.value)


def test_staged_model_keys_reach_the_trainer_but_are_not_user_keys():
    staged = TrainerConfig.from_custom_config({"model": {"module_sha256": "ab" * 32}})
    assert staged.model.module_sha256 == "ab" * 32
    with pytest.raises(ConfigError, match="unknown config key 'model.module_sha256'"):
        load_config(None, ["model.module_sha256=abc"])


def _schema_keys(section: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in section.model_fields.items():
        keys.append(f"{prefix}{name}")
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            keys += _schema_keys(field.annotation, f"{prefix}{name}.")
    return keys


def test_every_trainer_schema_key_is_in_configs_local_yaml():
    documented = yaml.safe_load((REPO / "configs" / "local.yaml").read_text())
    # The user's sections; the staged model keys are the pipeline builder's, not a user's.
    sections = {"data": trainer_config.DataSection, "model": trainer_config.ModelSection,
                "trainer": TrainerSection, "export": trainer_config.ExportSection}
    missing = []
    for section, schema in sections.items():
        for key in _schema_keys(schema):
            node = documented.get(section) or {}
            for part in key.split("."):
                node = node.get(part, KeyError) if isinstance(node, dict) else KeyError
            if node is KeyError:
                missing.append(f"{section}.{key}")
    assert missing == []


def test_config_composes_the_trainers_sections():
    """One class per section: `--set` and run_fn validate with the same one."""
    assert Config.model_fields["trainer"].annotation is TrainerSection
    assert Config.model_fields["export"].annotation is trainer_config.ExportSection
    assert Config.model_fields["model"].annotation is trainer_config.ModelSection
    assert issubclass(Config.model_fields["data"].annotation, trainer_config.DataSection)


# --- run_fn ---------------------------------------------------------------------------


class _TrainerSectionWithNewKey(TrainerSection):
    mixup_alpha: int = Field(7, ge=0)


class _TrainerConfigWithNewKey(TrainerConfig):
    trainer: _TrainerSectionWithNewKey = Field(default_factory=_TrainerSectionWithNewKey)


@pytest.fixture(scope="module")
def examples_uri(tmp_path_factory) -> str:
    return write_digits_examples(str(tmp_path_factory.mktemp("digits")), 100)


def test_a_key_added_to_the_schema_reaches_run_fn_with_its_default(
    examples_uri, tmp_path, monkeypatch
):
    """Adding a key is one edit: the schema. run_fn resolves it with its default (no second
    default table), and the summary keeps its contract keys."""
    from components.trainer import module

    with pytest.raises(ValueError, match="unknown config key 'trainer.mixup_alpha'"):
        TrainerConfig.from_custom_config({"trainer": {"mixup_alpha": 2}})
    assert _TrainerConfigWithNewKey.from_custom_config(
        {"trainer": {"mixup_alpha": 2}}).trainer.mixup_alpha == 2

    monkeypatch.setattr(module, "TrainerConfig", _TrainerConfigWithNewKey)
    fields = fn_args_dict(examples_uri, str(tmp_path), epochs=1, autotune="off")
    assert "mixup_alpha" not in fields["custom_config"]["trainer"]
    result = module.train_and_export(make_fn_args(fields))

    assert result.config.trainer.mixup_alpha == 7
    assert result.config.trainer.epochs == 1 and result.config.trainer.autotune == "off"
    with open(os.path.join(fields["model_run_dir"], module.SUMMARY_FILE)) as f:
        written = json.load(f)
    assert list(written) == SUMMARY_KEYS
    assert written == json.loads(json.dumps(result.summary.to_dict()))
    assert written["epochs"] == 1 and len(written["history"]["loss"]) == 1

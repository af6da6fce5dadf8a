"""The Trainer's configuration schema: the sections `run_fn` reads from `custom_config`.

The pipeline's `Config` (pipelines/config.py) composes these sections, and `run_fn`
validates its `custom_config` with the same classes, so a key has one default and one
check whether it comes from `--set` or reaches TFX as JSON. A key added here reaches
`run_fn` with its default; `configs/local.yaml` lists every one of them.

    config = TrainerConfig.from_custom_config({"trainer": {"epochs": 3}})
    config.trainer.epochs       # 3
    config.export.serving_precision  # "float32", the default

Importing this module is cheap (no TensorFlow): the CLI loads it for every command.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator

from components.core.sections import StrictSection, describe_validation_error

# Decoded examples are kept in memory when they take at most this much (trainer.cache_max_mb).
DEFAULT_CACHE_MAX_MB = 1024
AUTO = "auto"
# trainer.distill.teacher: the champion of the teacher's model name.
CHAMPION = "champion"
SERVING_PRECISIONS = ("float32", "mixed")


class DataSection(StrictSection):
    """The part of `data` the Trainer reads; the pipeline's data section adds the Ingest's."""

    channels: Literal["auto", "1", "3"] = "auto"


class ModelSection(StrictSection):
    # "auto": chosen from the images the Ingest stored (models/choice.py): unet3d for volumes,
    # seed_cnn for images under 32 px, photo_cnn for photos.
    name: str = AUTO
    # "auto": each side the images' median, rounded to what the model accepts and capped
    # (models.registry.InputSizes); [H, W]: the Trainer resizes every image to it.
    input_size: list[int] | Literal["auto"] = AUTO
    # Your own model: a Python file (local path, gs:// or s3://) defining `builder`
    # (input_shape, num_classes, **params) -> keras.Model; replaces `name` when set.
    module_file: str = ""
    builder: str = Field("build_model", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    task: Literal["classification", "segmentation"] = "classification"
    # After module_file: the check below reads it (pydantic validates fields in this order).
    params: dict[str, Any] = Field(default_factory=dict)

    def resolved_task(self, data_kind: str = "images") -> str:
        """The task of the model that trains: `task` for a module file, else the registry's;
        for `auto`, the data's (`data_kind` "volumes": segmentation, else classification)."""
        if self.module_file:
            return self.task
        if self.name == AUTO:
            return "segmentation" if data_kind == "volumes" else "classification"
        from models.registry import model_task  # deferred: imports TensorFlow

        return model_task(self.name)

    def weights(self) -> str:
        """`params.weights`: "none", "imagenet" or a weights file's path."""
        return str(self.params.get("weights") or "none")

    @field_validator("input_size")
    @classmethod
    def _two_positive_ints(cls, size: list[int] | str) -> list[int] | str:
        if size != AUTO and (len(size) != 2 or min(size) < 1):
            raise ValueError(f"input_size must be [height, width] or auto. Received: {size}")
        return size

    @field_validator("name")
    @classmethod
    def _registered(cls, name: str) -> str:
        from models.registry import available_models  # deferred: imports TensorFlow

        if name != AUTO and name not in available_models():
            raise ValueError(f"unknown model {name!r}; available: auto, "
                             f"{', '.join(available_models())}")
        return name

    @field_validator("params")
    @classmethod
    def _accepted_by_builder(cls, params: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        # Checked here, not only in the Trainer, so a typo fails before the Ingest runs. A
        # module file replaces `name`: its builder's parameters are checked by the pre-Ingest
        # model check, which imports the file.
        from models.registry import WEIGHTS_PARAM, check_params  # deferred: imports TensorFlow

        name = info.data.get("name")
        module_file = info.data.get("module_file")
        if WEIGHTS_PARAM in params:
            params = {**params, WEIGHTS_PARAM: _weights_value(params[WEIGHTS_PARAM], name,
                                                              module_file)}
        chosen = {k: v for k, v in params.items() if (k, v) != (WEIGHTS_PARAM, "none")}
        if name == AUTO and chosen and not module_file:
            raise ValueError(f"model.params {sorted(chosen)} belong to one model's builder: "
                             "set model.name too (auto chooses the model from the data)")
        if name and name != AUTO and not module_file:
            check_params(name, params)
        return params


def _weights_value(value: Any, name: str | None, module_file: str | None) -> str:
    """`model.params.weights`: none, imagenet (a model with a pretrained backbone), or an
    existing Keras weights file (`.weights.h5`, or Keras Applications' `.h5`), made absolute
    so that the Trainer reads the same file whatever its working directory."""
    import os

    from models.registry import IMAGENET, NO_WEIGHTS, available_models, model_backbone

    if value in (NO_WEIGHTS, IMAGENET):
        if value == IMAGENET and (module_file or name == AUTO
                                  or (name in available_models() and not model_backbone(name))):
            pretrained = [n for n in available_models() if model_backbone(n)]
            raise ValueError("model.params.weights imagenet needs a model with a pretrained "
                             f"backbone: set model.name to one of {', '.join(pretrained)}")
        return value
    if not isinstance(value, str) or not value.endswith(".h5"):
        raise ValueError("model.params.weights must be none, imagenet or the path of a Keras "
                         "weights file (*.weights.h5 as model.save_weights writes it, or a "
                         f"Keras Applications *_notop.h5 file). Received: {value!r}")
    if "://" in value:
        return value  # gs://, s3://: read by the Trainer (tf.io.gfile)
    path = os.path.abspath(os.path.expanduser(value))
    if not os.path.isfile(path):
        raise ValueError(f"model.params.weights: no such file {path}")
    return path


class StagedModelSection(ModelSection):
    """`model` as the Trainer receives it: the pipeline builder stages a module file in the
    pipeline root and names the copy's hash and where it came from (not user keys)."""

    module_sha256: str = ""
    module_source: str = ""


class LossScaleSection(StrictSection):
    # Under mixed_float16 only. Dynamic: halve and skip the step on inf/NaN gradients,
    # double after `growth_steps` finite steps. Fixed (dynamic: false): always `initial`.
    dynamic: bool = True
    initial: float = Field(32768.0, gt=0)
    growth_steps: int = Field(2000, ge=1)


class FineTuneSection(StrictSection):
    """Transfer learning as in Keras' guide: train the new head on a frozen backbone, then
    unfreeze (part of) the backbone and train on at a lower learning rate."""

    # auto: the recipe when the model starts from pretrained weights (model.params.weights:
    # imagenet or a file), a third of the epochs (at least 1) frozen; off otherwise.
    # 0 = off (every layer trains from the first epoch). N >= 1: the first N epochs train the
    # head only; the backbone is frozen, its BatchNormalization layers in inference mode.
    # N = trainer.epochs: the backbone never unfreezes (feature extraction).
    frozen_epochs: Annotated[int, Field(ge=0)] | Literal["auto"] = AUTO
    # After the frozen epochs: "all" of the backbone, its last K blocks (a ResNet's
    # convN_blockM, a MobileNet's expanded_conv_N, ...; else one weighted layer per block),
    # or auto: the top quarter of its blocks (at least 1).
    unfreeze: Annotated[int, Field(ge=1)] | Literal["all", "auto"] = AUTO
    # The learning rate after unfreezing: the schedule's rate x this.
    learning_rate_factor: float = Field(0.1, gt=0, le=1)
    # false (Keras' advice): BatchNormalization layers stay frozen, in inference mode, after
    # unfreezing too; true: they train (and use batch statistics) once unfrozen.
    train_batchnorm: bool = False


class EarlyStoppingSection(StrictSection):
    """Keras' EarlyStopping on the eval loss, restoring the best epoch's weights."""

    # 0 = off. N: stop after N epochs without a lower eval loss; the weights of the epoch
    # with the lowest eval loss are the ones exported.
    patience: int = Field(0, ge=0)
    # A lower eval loss counts only when it is lower by more than this.
    min_delta: float = Field(0.0, ge=0)


class DistillSection(StrictSection):
    """Knowledge distillation (Hinton et al. 2015, as in Keras' "Knowledge Distillation"
    example): the model learns from a frozen teacher's softened predictions as well as
    from the labels (components/trainer/distill.py)."""

    # "" = off. champion: the champion of teacher_model_name (the stable version in its
    # serving folder, else its MLflow alias); or the path of a SavedModel mptfx exported
    # (a served version folder, a Model artifact's Format-Serving) or of a Keras weights
    # file mptfx wrote (Format-Keras/model.weights.h5, its model.json beside it).
    teacher: str = ""
    # Whose champion teaches; "" = pusher.model_name. When the student would be published
    # under the teacher's name, it is published as <name>-student in pipeline
    # <pipeline.name>-student instead (pipelines/config.py), so the teacher keeps serving.
    teacher_model_name: str = Field("", pattern=r"^$|^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}"
                                    r"[A-Za-z0-9])?$")
    # The softmax temperature T of both models' predictions (log-probabilities / T); the
    # distillation term is scaled by T^2 so its gradients keep their size as T changes.
    temperature: float = Field(4.0, gt=0)
    # The weight of the true labels' loss; 1 - alpha weighs the teacher's.
    alpha: float = Field(0.1, ge=0, le=1)
    # The teacher's compute precision: auto = as trainer.precision auto (measured with
    # trainer.autotune on); a saved graph keeps the precision it was exported in.
    precision: Literal["auto", "float32", "mixed_float16", "mixed_bfloat16"] = AUTO

    @property
    def enabled(self) -> bool:
        """Whether the run distills (a teacher is named)."""
        return bool(self.teacher)

    @field_validator("teacher")
    @classmethod
    def _absolute_path(cls, teacher: str) -> str:
        # A path is made absolute so that the Trainer reads the same file whatever its
        # working directory; whether it exists is checked before the Ingest.
        import os

        if teacher in ("", CHAMPION) or "://" in teacher:
            return teacher
        return os.path.abspath(os.path.expanduser(teacher))


class TrainerSection(StrictSection):
    epochs: int = Field(15, ge=1)
    # Per replica; "auto" = the largest that fits (see batch_memory_mb, batch_lr_scaling).
    batch_size: Annotated[int, Field(ge=1)] | Literal["auto"] = 32
    learning_rate: float = Field(1e-3, gt=0)
    precision: Literal["auto", "float32", "mixed_float16", "mixed_bfloat16"] = "auto"
    prefer_bfloat16: bool = False
    strategy: Literal["auto", "one_device", "mirrored", "multi_worker"] = "auto"
    xla: Literal["auto", "on", "off"] = "auto"
    scale_learning_rate: bool = False
    seed: int = 42
    loss_scale: LossScaleSection = Field(default_factory=LossScaleSection)
    # N > 1: apply the mean gradient of N batches once every N batches (an N x larger batch).
    grad_accum_steps: int = Field(1, ge=1)
    # Stop with a diagnostic when the loss is NaN/inf for this many consecutive steps.
    divergence_patience: int = Field(5, ge=1)
    # Start from the base model's Keras weights (the Trainer's base_model input), if any.
    warm_start: bool = False
    # BackupAndRestore checkpoints; "" = <pipeline root>/Trainer/backup.
    backup_dir: str = ""
    # Decode the examples once and keep them in memory when they take at most this many MB
    # (float32 after resizing); 0 = read and decode the files every epoch.
    cache_max_mb: int = Field(DEFAULT_CACHE_MAX_MB, ge=0)
    # Training images only: none; flip (random horizontal flip); crop_flip (random-resized-
    # crop, area 8-100 %, then a flip: the ResNet-50 recipe for photos); auto = crop_flip for
    # colour images unless the model is seed_cnn, else none.
    augment: Literal["auto", "none", "flip", "crop_flip"] = "auto"
    # Under mixed_float16: "float32" keeps LSTM/GRU/SimpleRNN layers in float32 (a per-layer
    # policy); "policy" leaves them in float16 (with a warning naming them).
    recurrent_precision: Literal["policy", "float32"] = "policy"
    # on: when more than one precision/XLA cell is plausible here, time a few steps of each
    # on the real model and train with the fastest safe one (cached per device, model,
    # input, batch and strategy); off: the static rules.
    autotune: Literal["on", "off"] = "on"
    # Where measured decisions are cached; "" = <workspace>/autotune.
    autotune_cache_dir: str = ""
    # batch_size auto: the CPU's cap on a step's estimated training memory, MB (on a GPU a
    # cap on the allocator's peak; 0 = until out of memory).
    batch_memory_mb: int = Field(1024, ge=0)
    # batch_size auto: learning_rate is for this batch; scaled linearly, by the square root
    # or not at all for the batch chosen.
    base_batch_size: int = Field(32, ge=1)
    batch_lr_scaling: Literal["linear", "sqrt", "none"] = "linear"
    # Freeze the backbone for the first epochs, then unfreeze it (see FineTuneSection).
    fine_tune: FineTuneSection = Field(default_factory=FineTuneSection)
    # The learning rate over the run: constant, or cosine decay to 0 at the last step (per
    # step), both after a linear warm-up of warmup_epochs.
    lr_schedule: Literal["constant", "cosine"] = "cosine"
    # Linear warm-up from 0 to the learning rate, in epochs (fractions allowed); auto: 10 %
    # of the epochs (at most 5) with cosine or when batch_size auto scaled the learning rate
    # up, else 0.
    warmup_epochs: Annotated[float, Field(ge=0)] | Literal["auto"] = AUTO
    # Cross-entropy against (1 - s) x one-hot + s / classes (classification only).
    label_smoothing: float = Field(0.1, ge=0, lt=1)
    # Stop when the eval loss stops improving; the best epoch's weights are exported.
    early_stopping: EarlyStoppingSection = Field(default_factory=EarlyStoppingSection)
    # Learn from a teacher model's predictions too (see DistillSection).
    distill: DistillSection = Field(default_factory=DistillSection)

    @field_validator("fine_tune")
    @classmethod
    def _frozen_within_epochs(cls, fine_tune: FineTuneSection,
                              info: ValidationInfo) -> FineTuneSection:
        epochs = info.data.get("epochs")
        if epochs is not None and fine_tune.frozen_epochs != AUTO and \
                fine_tune.frozen_epochs > epochs:
            raise ValueError(f"frozen_epochs ({fine_tune.frozen_epochs}) must be at most "
                             f"trainer.epochs ({epochs})")
        return fine_tune

    @field_validator("autotune", mode="before")
    @classmethod
    def _yaml_on_off(cls, value: Any) -> Any:
        # YAML 1.1 reads a bare on/off as a boolean.
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


class ExportSection(StrictSection):
    # float32: the serving SavedModel is a float32 rebuild of the trained model (any CPU
    # serves it). mixed: it keeps the training policy's graph (float16/bfloat16 compute,
    # float32 outputs) for GPU serving, and a float32 rebuild beside it (Format-Float32)
    # is what TF Lite converts.
    serving_precision: Literal["float32", "mixed"] = "float32"


class TrainerConfig(StrictSection):
    """Everything `run_fn` reads: the `custom_config` the pipeline compiles, typed."""

    data: DataSection = Field(default_factory=DataSection)
    model: StagedModelSection = Field(default_factory=StagedModelSection)
    trainer: TrainerSection = Field(default_factory=TrainerSection)
    export: ExportSection = Field(default_factory=ExportSection)

    @classmethod
    def from_custom_config(cls, custom_config: Mapping[str, Any] | None) -> TrainerConfig:
        """Validates `fn_args.custom_config` (a missing section or key takes its default).

        Raises:
            ValueError: one line naming the refused key and the value received.
        """
        try:
            return cls.model_validate(dict(custom_config or {}))
        except ValidationError as error:
            raise ValueError(f"Trainer custom_config: {describe_validation_error(error)}") \
                from None


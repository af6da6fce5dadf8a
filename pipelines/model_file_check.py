"""The check of the configured model file before anything runs (`mptfx run`, `mptfx bench`).

The checking itself is the Trainer's (components/trainer/model_check.py `check_model_file`);
this module reads what it needs from the whole `Config`, which only pipelines/ knows.

    notes = check_configured_model(load_config(overrides=["model.module_file=my_model.py"]))
"""

from __future__ import annotations

from components.trainer.model_check import AUTO_CHECK_SIZE, check_model_file
from models.registry import SEGMENTATION
from pipelines.config import Config


def check_configured_model(config: Config) -> list[str]:
    """`check_model_file` for a pipeline config's `model.module_file` (no-op without one).

    The policy is what the Trainer resolves from `trainer.precision` on this machine; the
    input is `model.input_size` (32x32 for "auto", which the data decides; 16x16 for a
    segmentation model) with `data.channels` (1 for "auto", the Ingest decides), and for
    segmentation a cube of the slice height in depth, as synthetic volumes are.

    Raises:
        UserModelError: as `check_model_file`.
    """
    from components.trainer.precision import describe_devices, resolve_precision_policy

    model = config.model
    if not model.module_file:
        return []
    policy, _ = resolve_precision_policy(
        config.trainer.precision, describe_devices(), config.trainer.prefer_bfloat16
    )
    size = model.input_size
    if size == "auto":
        size = AUTO_CHECK_SIZE if model.task != SEGMENTATION else (16, 16)
    height, width = (int(v) for v in size)
    channels = 1 if config.data.channels == "auto" else int(config.data.channels)
    shape = (height, width, channels)
    if model.task == SEGMENTATION:
        shape = (height, height, width, channels)
    return check_model_file(model.module_file, model.builder, model.task, model.params, shape,
                            policy, config.trainer.recurrent_precision)

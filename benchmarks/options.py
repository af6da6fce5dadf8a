"""The options of one `mptfx bench` run, as benchmarks/commands.py parses them."""

from __future__ import annotations

import dataclasses

from benchmarks.plan import FULL, QUICK, Preset


@dataclasses.dataclass(frozen=True)
class BenchOptions:
    """The command line of `mptfx bench`, parsed (see benchmarks/commands.py)."""

    workspace: str
    quick: bool
    sections: tuple[str, ...]
    models: tuple[str, ...] | None = None
    precisions: tuple[str, ...] = ("float32", "mixed_float16", "mixed_bfloat16")
    xla: tuple[bool, ...] = (False, True)
    batch_size: int | None = None
    input_shape: tuple[int, ...] | None = None
    windows: int | None = None
    window_seconds: float | None = None
    warmup_seconds: float | None = None
    memory_cap_mb: float = 2048.0
    max_batch: int | None = None
    command: str = "mptfx bench"
    # --model-file: a user's model file (models/user_module.py), benchmarked instead of
    # (or, with --models, beside) the registered models.
    model_file: str = ""
    model_builder: str = "build_model"
    model_task: str = "classification"

    @property
    def preset(self) -> Preset:
        """QUICK or FULL with the timing overrides applied."""
        preset = QUICK if self.quick else FULL
        return dataclasses.replace(
            preset,
            windows=self.windows or preset.windows,
            window_seconds=self.window_seconds or preset.window_seconds,
            warmup_seconds=(
                preset.warmup_seconds if self.warmup_seconds is None else self.warmup_seconds
            ),
            max_batch=self.max_batch or preset.max_batch,
        )

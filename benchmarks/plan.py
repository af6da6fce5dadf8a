"""What `mptfx bench` measures and for how long: the quick and full presets, per-model sizes.

Sizes depend on the device the run finds: on a CPU the large models run at reduced sizes so
that every cell of the matrix finishes (float16 convolutions are emulated there and run
~100x slower than float32); on a GPU they run at their usual sizes.

Example:

    preset = QUICK
    setup = model_setup("resnet50", device="GPU", quick=True)   # 224x224x3, batch 64
"""

from __future__ import annotations

import dataclasses

SECTIONS = (
    "throughput",
    "auto_check",
    "largest_batch",
    "input_pipeline",
    "data_scale",
    "photo_quality",
    "predict",
    "system_metrics",
    "distillation",
)
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
REFERENCE_PRECISION = "float32"
# The dtype a policy computes in: its matmul ceiling is the one MFU is measured against.
COMPUTE_DTYPES = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}
# The seed model is measured at the seed article's size: the MFU target applies to it.
SEED_MODEL = "seed_cnn"
# The largest-batch search skips a precision that trains this much slower than float32:
# its probes would take minutes each (float16 on a CPU without float16 arithmetic).
MIN_SPEEDUP_FOR_BATCH_SEARCH = 0.1
# distillation: the students' and the ResNet-50 teacher's epochs on the digits.
DISTILL_EPOCHS = 15
DISTILL_TEACHER_EPOCHS = 15


# Typical --quick durations on the 2-core CI machine under load: what the sections before
# one leave it of the time budget.
SECTION_SECONDS = {
    "auto_check": 40.0,
    "largest_batch": 120.0,
    "input_pipeline": 60.0,
    "data_scale": 300.0,
    "photo_quality": 300.0,
    "predict": 60.0,
    "system_metrics": 180.0,
    "distillation": 660.0,  # the 64x64 ResNet-50 teacher (about 8 min), one student pair
}


@dataclasses.dataclass(frozen=True)
class Preset:
    """How long and how much each section measures."""

    windows: int
    window_seconds: float
    warmup_seconds: float
    cell_budget_seconds: float  # fewer windows (>= 2) beyond this
    cell_timeout_seconds: float  # the cell is killed
    ceiling_repeats: int
    largest_batch_models: tuple[str, ...] | None  # None: every model in the run
    largest_batch_resolution: float
    probe_timeout_seconds: float
    max_batch: int
    input_epochs: int
    overhead_epochs: int
    overhead_rounds: int
    publication_epochs: int
    latency_runs: int
    ingest_replicate: int
    # data_scale: photos in the base set (the memory check also ingests 10x as many) and
    # seconds each timed round of the Trainer-input comparison lasts at most.
    data_scale_photos: int
    data_scale_input_seconds: float
    # photo_quality: training photos per class (8 classes; issue 34's comparison: 250).
    photo_quality_per_class: int
    # distillation: the seeds of the student pairs (alone, distilled) and the epochs of the
    # students and of the ResNet-50 teacher.
    distill_seeds: tuple[int, ...]
    distill_epochs: int
    distill_teacher_epochs: int
    pipeline_timeout_seconds: float
    profile_steps: int
    # Seconds the run aims to end within (0: no aim). Every selected section runs; the
    # optional work inside the throughput matrix and the batch search (other models'
    # cells, further precisions) is left out when it would leave the sections after it
    # less than their SECTION_SECONDS. A quiet 2-core machine stays within `make bench`'s
    # 15 minutes; a busy one takes longer but still ends every section.
    time_budget_seconds: float


QUICK = Preset(
    windows=3,
    window_seconds=1.0,
    warmup_seconds=1.0,
    cell_budget_seconds=20.0,
    cell_timeout_seconds=150.0,
    ceiling_repeats=3,
    largest_batch_models=(SEED_MODEL,),
    largest_batch_resolution=1 / 4,
    probe_timeout_seconds=90.0,
    max_batch=4096,
    input_epochs=3,
    overhead_epochs=4,
    overhead_rounds=3,
    publication_epochs=2,
    latency_runs=200,
    ingest_replicate=4,
    data_scale_photos=200,
    data_scale_input_seconds=4.0,
    photo_quality_per_class=100,
    distill_seeds=(1,),
    distill_epochs=DISTILL_EPOCHS,
    distill_teacher_epochs=DISTILL_TEACHER_EPOCHS,
    pipeline_timeout_seconds=600.0,
    profile_steps=10,
    time_budget_seconds=13 * 60,
)
FULL = Preset(
    windows=7,
    window_seconds=3.0,
    warmup_seconds=3.0,
    cell_budget_seconds=120.0,
    cell_timeout_seconds=900.0,
    ceiling_repeats=5,
    largest_batch_models=None,
    largest_batch_resolution=1 / 16,
    probe_timeout_seconds=600.0,
    max_batch=8192,
    input_epochs=5,
    overhead_epochs=8,
    overhead_rounds=5,
    publication_epochs=5,
    latency_runs=1000,
    ingest_replicate=10,
    data_scale_photos=2000,
    data_scale_input_seconds=15.0,
    photo_quality_per_class=250,
    distill_seeds=(1, 2, 3),
    distill_epochs=DISTILL_EPOCHS,
    distill_teacher_epochs=DISTILL_TEACHER_EPOCHS,
    pipeline_timeout_seconds=1800.0,
    profile_steps=20,
    time_budget_seconds=0,
)


@dataclasses.dataclass(frozen=True)
class CellSpec:
    """What one throughput cell trains and how long it times it: the parameters of the
    `train_cell` task (benchmarks/sections/throughput.py), measured by
    benchmarks/measures/training.py's `run_cell`.

    Attributes:
        model: registry name.
        precision: Keras dtype policy: float32, mixed_float16 or mixed_bfloat16.
        xla: compile the train step with XLA (`jit_compile=True`).
        batch_size: samples per step.
        input_shape: one sample's shape, e.g. (64, 64, 1) or (32, 32, 32, 1).
        num_classes: classes of the synthetic labels.
        warmup_seconds: untimed steps after the first call, at least one.
        window_seconds: target length of one timed window (whole steps, at least one).
        windows: number of timed windows; the median is reported.
        time_budget_seconds: fewer windows (never fewer than two) when the full count
            would take longer than this.
    """

    model: str
    precision: str
    xla: bool
    batch_size: int
    input_shape: tuple[int, ...]
    num_classes: int = 10
    warmup_seconds: float = 1.0
    window_seconds: float = 1.0
    windows: int = 5
    time_budget_seconds: float = 120.0


@dataclasses.dataclass(frozen=True)
class ModelSetup:
    """Per-sample input shape, batch size and class count a model is benchmarked at."""

    input_shape: tuple[int, ...]
    batch_size: int
    num_classes: int = 10

    @property
    def unit(self) -> str:
        """What one sample is: volumes for 3D inputs (D, H, W, C), else images."""
        return "volumes" if len(self.input_shape) == 4 else "images"


# (model, device, quick) -> setup; device "CPU" or "GPU". Unlisted models get _DEFAULT.
# CPU sizes are small because every cell must finish: float16 convolutions are emulated on
# a CPU (about 100x slower than float32).
_SETUPS: dict[tuple[str, str, bool], ModelSetup] = {
    ("resnet50", "CPU", True): ModelSetup((32, 32, 3), 8),
    ("resnet50", "CPU", False): ModelSetup((64, 64, 3), 16),
    ("resnet50", "GPU", True): ModelSetup((224, 224, 3), 64),
    ("resnet50", "GPU", False): ModelSetup((224, 224, 3), 64),
    # Binary segmentation: two classes, one sigmoid output channel.
    ("unet3d", "CPU", True): ModelSetup((32, 32, 32, 1), 2, 2),
    ("unet3d", "CPU", False): ModelSetup((64, 64, 64, 1), 2, 2),
    ("unet3d", "GPU", True): ModelSetup((128, 128, 128, 1), 2, 2),
    ("unet3d", "GPU", False): ModelSetup((128, 128, 128, 1), 2, 2),
}
_DEFAULT = {"CPU": ModelSetup((32, 32, 3), 8), "GPU": ModelSetup((224, 224, 3), 64)}


def model_setup(
    name: str,
    device: str,
    quick: bool,
    batch_size: int | None = None,
    input_shape: tuple[int, ...] | None = None,
) -> ModelSetup:
    """The setup of `name` on `device`, with the command line's overrides applied."""
    if name == SEED_MODEL:
        setup = ModelSetup((64, 64, 1), 32)
    else:
        setup = _SETUPS.get((name, device, quick), _DEFAULT[device])
    return dataclasses.replace(
        setup,
        batch_size=batch_size or setup.batch_size,
        input_shape=tuple(input_shape) if input_shape else setup.input_shape,
    )


def cell_skip_reason(
    model: str, precision: str, xla: bool, device: str, quick: bool,
    seed_speedups: dict[tuple[str, bool], float] | None = None,
) -> str | None:
    """Why `--quick` leaves a throughput cell out, or None when it is measured.

    The seed model's cells are always measured. On a CPU, `--quick` measures the other
    models only where the seed model showed a cell is worth it, in this same run:
    - no XLA: XLA compiles a large model's train step for minutes here (ResNet-50: over two
      minutes) and the seed model's XLA cells already show what XLA does on this CPU;
    - no precision that trained the seed model at under `MIN_SPEEDUP_FOR_BATCH_SEARCH` of
      float32 (float16 without float16 hardware: ~100x slower, minutes per cell).

    Args:
        seed_speedups: (precision, xla) -> the seed model's speedup in this run.
    """
    if not quick or device != "CPU" or model == SEED_MODEL:
        return None
    if xla:
        return "--quick on CPU: XLA compiles this model for minutes"
    speedup = (seed_speedups or {}).get((precision, False))
    if speedup is not None and speedup < MIN_SPEEDUP_FOR_BATCH_SEARCH:
        return f"--quick on CPU: {SEED_MODEL} ran {speedup:.2f}× float32 with it"
    return None

"""`data_scale`: the photo-scale data path beside a plain tf.data reference, with targets.

On synthetic JPEG photos (224x224 crops of scikit-learn's sample photographs,
benchmarks/measures/data_scale.py), each in a fresh worker process: mptfx's ingest and the plain
one (read, decode to validate, write the bytes) on `MEMORY_FACTOR` x N photos (issue 23's
20,000 in the full preset) on all cores and on one, and the bytes each writes; their peak
RSS at N and at `MEMORY_FACTOR` x N photos; then the Trainer's input
(`make_dataset` over the Ingest's shards) against the plain input (read_file ->
decode_jpeg -> resize -> batch) at 224x224, and from that the cores that would feed one
A100 training ResNet-50. Beside them, tf.data's read -> decode_jpeg alone, a map call per
photo as the TensorFlow guides write it, on all cores and on one: how that form scales on the
machine (the Ingest decodes 16 photos per map call).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.sections.base import Section, number, targets_table
from benchmarks.sections.context import Context
from benchmarks.sections.tasks import Task, arguments

MEMORY_FACTOR = 10
CLASSES = 3
SEED = 0
INPUT_SIZE = [224, 224]
BATCH_SIZE = 64
WARMUP_BATCHES = 5
MAX_BATCHES = 500
ROUNDS = 2
# NVIDIA Deep Learning Examples, TensorFlow/Classification/ConvNets/resnet50v1.5/README.md,
# "Training performance: NVIDIA DGX A100 (8x A100 40GB)": 1 GPU, batch 256, mixed
# precision + XLA (TensorFlow 20.06-tf1-py3 NGC container).
A100_IMAGES_PER_SEC = 2375.0
A100_SOURCE = ("NVIDIA Deep Learning Examples, ResNet-50 v1.5 for TensorFlow: 1× A100 40GB "
               "(DGX A100), batch 256, mixed precision + XLA, 2,375 img/s")
# Targets (mptfx issue 23).
MIN_CORE_SPEEDUP = 1.7  # on 2 cores
MAX_BYTES_RATIO = 1.05
MAX_RSS_GROWTH = 0.25  # peak RSS at 10N <= 1.25x at N
MIN_INPUT_RATIO = 0.9
MIN_INGEST_RATIO = 0.8
# The ingest runs: key -> (photos x1 or x MEMORY_FACTOR, method, cores; 0: all). Speed, core
# scaling and bytes are read at MEMORY_FACTOR x N photos, where a process's fixed costs
# (imports, tracing, Pillow's plugins: ~0.3 s) no longer weigh; N is the RSS baseline.
RUNS = {
    "mptfx": (1, "mptfx", 0),
    "plain": (1, "plain", 0),
    "mptfx_large": (MEMORY_FACTOR, "mptfx", 0),
    "plain_large": (MEMORY_FACTOR, "plain", 0),
    "mptfx_large_1core": (MEMORY_FACTOR, "mptfx", 1),
    "plain_large_1core": (MEMORY_FACTOR, "plain", 1),
    # tf.data's decode alone, a map call per photo: how that form scales on this machine.
    "decode_large": (MEMORY_FACTOR, "decode", 0),
    "decode_large_1core": (MEMORY_FACTOR, "decode", 1),
}
# The runs the core-scaling ratios come from alternate this many times (all cores, 1 core,
# ...) and each gives its median: a single run on these VMs moved by 20 % either way.
SCALING_RUNS = ("mptfx_large", "mptfx_large_1core", "decode_large", "decode_large_1core")
SCALING_ROUNDS = 3


@dataclasses.dataclass(frozen=True)
class PhotoSetParams:
    """Where the photo folders go, one per count."""

    folder: str
    counts: list[int]
    classes: int
    seed: int


@dataclasses.dataclass(frozen=True)
class PhotoIngestParams:
    """One ingest of `photo_dir` into `out_dir` by `method` on `cores` CPUs (0: all)."""

    photo_dir: str
    out_dir: str
    method: str
    cores: int


@dataclasses.dataclass(frozen=True)
class PhotoInputParams:
    """The Trainer's input over the Ingest's `examples_dir` against the plain input over
    `photo_dir`, each round at most `max_batches` or `seconds`."""

    examples_dir: str
    photo_dir: str
    input_size: list[int]
    batch_size: int
    warmup_batches: int
    max_batches: int
    seconds: float
    rounds: int


def measure_photos(params: PhotoSetParams) -> dict[str, Any]:
    from benchmarks.measures.data_scale import photo_sets

    return photo_sets(**arguments(params))


def measure_ingest(params: PhotoIngestParams) -> dict[str, Any]:
    from benchmarks.measures.data_scale import restrict_cores

    restrict_cores(params.cores)  # before TensorFlow sizes its thread pools
    from benchmarks.measures.data_scale import ingest_photos

    return ingest_photos(params.photo_dir, params.out_dir, params.method)


def measure_input(params: PhotoInputParams) -> dict[str, Any]:
    from benchmarks.measures.data_scale import input_rates

    return input_rates(**arguments(params))


PHOTO_SET = Task("data_scale_photos", PhotoSetParams, measure_photos)
PHOTO_INGEST = Task("data_scale_ingest", PhotoIngestParams, measure_ingest)
PHOTO_INPUT = Task("data_scale_input", PhotoInputParams, measure_input)


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median speed (a failed one if any failed), with every run's img/s."""
    failed = [run for run in runs if "images_per_sec" not in run]
    if failed:
        return failed[0]
    ordered = sorted(runs, key=lambda run: run["images_per_sec"])
    median = dict(ordered[(len(ordered) - 1) // 2])
    if len(runs) > 1:
        median["rounds"] = [round(run["images_per_sec"], 1) for run in runs]
    return median


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top is not None and bottom else None


def _rate(entry: dict[str, Any] | None, key: str = "images_per_sec") -> float | None:
    return (entry or {}).get(key)


def summarise(photos: int, ingests: dict[str, dict[str, Any]],
              input_rates: dict[str, Any]) -> dict[str, Any]:
    """The section's entry: the raw measurements (a failed one as {"status", "error"})
    and the numbers the targets are read from."""
    mptfx, plain = ingests.get("mptfx") or {}, ingests.get("plain") or {}
    large = ingests.get("mptfx_large") or {}
    plain_large = ingests.get("plain_large") or {}
    cores = mptfx.get("cores") or input_rates.get("cores")
    derived: dict[str, Any] = {
        "cores": cores,
        "ingest_ratio": _ratio(_rate(large), _rate(plain_large)),
        "mptfx_core_speedup": _ratio(_rate(large), _rate(ingests.get("mptfx_large_1core"))),
        "plain_core_speedup": _ratio(_rate(plain_large),
                                     _rate(ingests.get("plain_large_1core"))),
        "decode_core_speedup": _ratio(_rate(ingests.get("decode_large")),
                                      _rate(ingests.get("decode_large_1core"))),
        "mptfx_bytes_ratio": _ratio(large.get("bytes_written"), large.get("photo_bytes")),
        "plain_bytes_ratio": _ratio(plain_large.get("bytes_written"),
                                    plain_large.get("photo_bytes")),
        "mptfx_rss_growth": _growth(mptfx, large),
        "plain_rss_growth": _growth(plain, plain_large),
        "input_ratio": _ratio(_rate(input_rates, "mptfx_images_per_sec"),
                              _rate(input_rates, "plain_images_per_sec")),
    }
    input_cores = input_rates.get("cores")
    for method in ("mptfx", "plain"):
        per_core = _ratio(_rate(input_rates, f"{method}_images_per_sec"), input_cores)
        derived[f"{method}_input_per_core"] = per_core
        derived[f"{method}_cores_per_a100"] = _ratio(A100_IMAGES_PER_SEC, per_core)
    return {"status": "ok", "photos": photos, "memory_photos": MEMORY_FACTOR * photos,
            "ingest": ingests, "input": input_rates, **derived}


def _growth(small: dict[str, Any], large: dict[str, Any]) -> float | None:
    ratio = _ratio(large.get("peak_rss_mb"), small.get("peak_rss_mb"))
    return None if ratio is None else ratio - 1.0


def _verdict(value: float | None, passes: bool) -> str:
    return "not measured" if value is None else ("PASS" if passes else "FAIL")


def targets(entry: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(what, measured, target, verdict) for each target of the section."""
    speedup, cores = entry.get("mptfx_core_speedup"), entry.get("cores") or 0
    bytes_ratio, growth = entry.get("mptfx_bytes_ratio"), entry.get("mptfx_rss_growth")
    input_ratio = entry.get("input_ratio")
    ingest_ratio = entry.get("ingest_ratio")
    at = f", {entry.get('memory_photos') or 0:,} photos"
    return [
        (f"Ingest images/s ÷ plain tf.data's{at}", number(ingest_ratio, 2),
         f"≥ {MIN_INGEST_RATIO}",
         _verdict(ingest_ratio, ingest_ratio is not None and ingest_ratio >= MIN_INGEST_RATIO)),
        (f"Ingest uses every core (all ÷ 1 core){at}", _times(speedup),
         f"≥ {MIN_CORE_SPEEDUP}× on ≥ 2 cores",
         "n/a (1 core)" if cores < 2 else
         _verdict(speedup, speedup is not None and speedup >= MIN_CORE_SPEEDUP)),
        ("Ingest bytes written ÷ photo bytes", number(bytes_ratio, 3),
         f"≤ {MAX_BYTES_RATIO}",
         _verdict(bytes_ratio, bytes_ratio is not None and bytes_ratio <= MAX_BYTES_RATIO)),
        (f"Ingest peak RSS growth, N → {MEMORY_FACTOR}N photos", _percent(growth),
         f"≤ {MAX_RSS_GROWTH:.0%}",
         _verdict(growth, growth is not None and growth <= MAX_RSS_GROWTH)),
        ("Trainer input ÷ plain tf.data input", number(input_ratio, 2),
         f"≥ {MIN_INPUT_RATIO}",
         _verdict(input_ratio, input_ratio is not None and input_ratio >= MIN_INPUT_RATIO)),
    ]


def _times(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1%}"


class DataScale(Section):
    name = "data_scale"
    tasks = (PHOTO_SET, PHOTO_INGEST, PHOTO_INPUT)

    def run(self, ctx: Context) -> None:
        photos = ctx.preset.data_scale_photos
        folder = ctx.bench_dir / "data-scale"
        load_start = ctx.load()
        ctx.say(f"  data scale: {photos} and {MEMORY_FACTOR * photos} synthetic JPEG photos, "
                "mptfx vs plain tf.data ...")
        params = PhotoSetParams(str(folder), [photos, MEMORY_FACTOR * photos], CLASSES, SEED)
        outcome = ctx.task(PHOTO_SET, params, "data-scale-photos", timeout=1200)
        if not outcome.ok:
            ctx.store(self.name, {"status": outcome.status, "error": outcome.error})
            return
        roots = [photo_set["root"] for photo_set in outcome.result["sets"]]
        ingests: dict[str, dict[str, Any]] = {}
        rounds = {key: SCALING_ROUNDS if key in SCALING_RUNS else 1 for key in RUNS}
        for round_index in range(max(rounds.values())):
            for key, (factor, method, cores) in RUNS.items():
                if round_index >= rounds[key]:
                    continue
                params = PhotoIngestParams(roots[0 if factor == 1 else 1],
                                           str(folder / f"ingest-{key}"), method, cores)
                outcome = ctx.task(PHOTO_INGEST, params, f"data-scale-ingest-{key}",
                                   timeout=1200)
                result = (outcome.result if outcome.ok
                          else {"status": outcome.status, "error": outcome.error})
                ingests.setdefault(key, {"runs": []})["runs"].append(result)
                if outcome.ok:
                    ctx.say(f"    ingest {key}: {result['images']} photos, "
                            f"{result['images_per_sec']:.0f} img/s on {result['cores']} "
                            f"cores, peak RSS {result['peak_rss_mb']:.0f} MB")
        ingests = {key: _median_run(entry["runs"]) for key, entry in ingests.items()}
        input_rates: dict[str, Any] = {"status": "skipped", "error": "the mptfx ingest failed"}
        if ingests["mptfx"].get("examples_dir"):
            params = PhotoInputParams(
                ingests["mptfx"]["examples_dir"], roots[0], INPUT_SIZE, BATCH_SIZE,
                WARMUP_BATCHES, MAX_BATCHES, ctx.preset.data_scale_input_seconds, ROUNDS)
            outcome = ctx.task(PHOTO_INPUT, params, "data-scale-input", timeout=900)
            input_rates = (outcome.result if outcome.ok
                           else {"status": outcome.status, "error": outcome.error})
        entry = summarise(photos, ingests, input_rates)
        entry["load_average"] = [load_start, ctx.load()]
        for what, measured, target, verdict in targets(entry):
            ctx.say(f"    {what}: {measured} (target {target}): {verdict}")
        ctx.store(self.name, entry)

    def table(self, results: dict[str, Any]) -> list[str]:
        entry = results.get(self.name) or {}
        if not entry:
            return []
        if entry.get("status") != "ok":
            return [f"Data scale: {entry.get('status')}: {entry.get('error')}", ""]
        return _table(entry)

    def verdicts(self, results: dict[str, Any]) -> list[str]:
        entry = results.get(self.name) or {}
        if entry.get("status") != "ok":
            return []
        lines = [f"Data scale: {what} {measured} (target {target}): {verdict}."
                 for what, measured, target, verdict in targets(entry)]
        ceiling = entry.get("decode_core_speedup")
        if ceiling is not None and (entry.get("cores") or 0) >= 2:
            lines.append(f"Data scale: tf.data's read → decode_jpeg alone, a map call per "
                         f"photo, writing nothing, scales {ceiling:.2f}× from 1 core to "
                         f"{entry.get('cores')} on this machine; the Ingest, a batch of photos "
                         f"per map call, scales {_times(entry.get('mptfx_core_speedup'))}.")
        mptfx, plain = entry.get("mptfx_cores_per_a100"), entry.get("plain_cores_per_a100")
        if mptfx is not None:
            lines.append(f"Data scale: feeding one A100 training ResNet-50 (AMP + XLA, "
                         f"{A100_IMAGES_PER_SEC:,.0f} img/s) takes about {mptfx:.1f} of these "
                         f"cores with the Trainer's input, {number(plain, 1)} with plain "
                         "tf.data.")
        return lines


def _cell(entry: dict[str, Any] | None, key: str, digits: int = 0) -> str:
    if entry and entry.get("status") not in (None, "ok"):
        return entry["status"]
    return number((entry or {}).get(key), digits)


def _table(entry: dict[str, Any]) -> list[str]:
    ingest, rates = entry["ingest"], entry.get("input") or {}
    large = ingest.get("mptfx_large") or {}
    n, big = entry["photos"], entry["memory_photos"]
    load = entry.get("load_average") or [None, None]
    lines = [
        f"### Data scale ({big:,} synthetic 224×224 JPEG photos, "
        f"{number(large.get('photo_bytes', 0) / 2**20, 1)} MB, and the first {n:,} of them; "
        f"{entry.get('cores')} cores; "
        f"load average {number(load[0], 2)} → {number(load[1], 2)})",
        "",
        "| measure | mptfx | plain tf.data | mptfx ÷ plain |",
        "|---|---:|---:|---:|",
        f"| ingest img/s, {big:,} photos, all cores | "
        f"{_cell(ingest.get('mptfx_large'), 'images_per_sec')} | "
        f"{_cell(ingest.get('plain_large'), 'images_per_sec')} | "
        f"{number(entry.get('ingest_ratio'), 2)} |",
        f"| ingest img/s, {big:,} photos, 1 core | "
        f"{_cell(ingest.get('mptfx_large_1core'), 'images_per_sec')} | "
        f"{_cell(ingest.get('plain_large_1core'), 'images_per_sec')} | |",
        f"| ingest speedup, all cores ÷ 1 | {_times(entry.get('mptfx_core_speedup'))} | "
        f"{_times(entry.get('plain_core_speedup'))} | |",
        f"| tf.data read → decode_jpeg alone, a map call per photo, img/s all cores / "
        f"1 core (speedup) | | "
        f"{_cell(ingest.get('decode_large'), 'images_per_sec')} / "
        f"{_cell(ingest.get('decode_large_1core'), 'images_per_sec')} "
        f"({_times(entry.get('decode_core_speedup'))}) | |",
        f"| ingest img/s, {n:,} photos, all cores | "
        f"{_cell(ingest.get('mptfx'), 'images_per_sec')} | "
        f"{_cell(ingest.get('plain'), 'images_per_sec')} | "
        f"{number(_ratio(_rate(ingest.get('mptfx')), _rate(ingest.get('plain'))), 2)} |",
        f"| bytes written ÷ photo bytes | {number(entry.get('mptfx_bytes_ratio'), 3)} | "
        f"{number(entry.get('plain_bytes_ratio'), 3)} | |",
        f"| ingest peak RSS MB, {n:,} photos | {_cell(ingest.get('mptfx'), 'peak_rss_mb')} | "
        f"{_cell(ingest.get('plain'), 'peak_rss_mb')} | |",
        f"| ingest peak RSS MB, {big:,} photos | "
        f"{_cell(ingest.get('mptfx_large'), 'peak_rss_mb')} | "
        f"{_cell(ingest.get('plain_large'), 'peak_rss_mb')} | |",
        f"| peak RSS growth, {n:,} → {big:,} | {_percent(entry.get('mptfx_rss_growth'))} | "
        f"{_percent(entry.get('plain_rss_growth'))} | |",
        f"| Trainer input img/s, 224×224, batch {rates.get('batch_size', BATCH_SIZE)} | "
        f"{_cell(rates, 'mptfx_images_per_sec')} | {_cell(rates, 'plain_images_per_sec')} | "
        f"{number(entry.get('input_ratio'), 2)} |",
        f"| input img/s per core | {number(entry.get('mptfx_input_per_core'))} | "
        f"{number(entry.get('plain_input_per_core'))} | |",
        f"| cores to feed one A100 (ResNet-50, AMP + XLA) | "
        f"{number(entry.get('mptfx_cores_per_a100'), 1)} | "
        f"{number(entry.get('plain_cores_per_a100'), 1)} | |",
        "",
        f"mptfx: the Ingest's `ingest()` (shards: {large.get('shards', '–')}, re-encoded: "
        f"{large.get('reencoded', '–')}) and the Trainer's `make_dataset` over its train "
        "split (decoding every batch, no cache); plain: read_file → decode_jpeg (to "
        "validate) → the bytes into one GZIP TFRecord, and read_file → decode_jpeg → "
        "resize → batch. Each ingest in its own process (peak RSS: its `ru_maxrss`); the "
        f"runs the speed-ups come from alternate, median of {SCALING_ROUNDS}; the inputs "
        f"alternate, best of {ROUNDS} rounds. A100 figure: {A100_SOURCE}.",
        "",
    ]
    return lines + targets_table(targets(entry))


SECTION = DataScale()

"""`predict`: `mptfx predict` beside a plain `model.predict` over tf.data, with targets.

On `PHOTOS` synthetic 224×224 JPEG photos (benchmarks/measures/data_scale.py `synthesise_photos`,
in a folder of its own), in one worker process (benchmarks/measures/predict.py): the seed CNN fitted
one epoch on them and published as a TF Serving version, then the command's own path
(listing, the Trainer's decoder in tf.data, the SavedModel, CSV rows to a file) against
the Keras model's `predict` over the tf.data pipeline the TensorFlow guides write,
alternating; and each file's class against what `serving_default` answers for it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.sections.base import Section, number, status_line, targets_table
from benchmarks.sections.context import Context
from benchmarks.sections.tasks import Task

PHOTOS = 2000
CLASSES = 3
SEED = 0
INPUT_SIZE = [64, 64]
BATCH_SIZE = 64
ROUNDS = 5
# Targets (mptfx issue 34).
MIN_RATIO = 0.8
MIN_AGREEMENT = 1.0


@dataclasses.dataclass(frozen=True)
class PredictParams:
    """Where the photos and the published model go, and how the two sides are timed."""

    folder: str
    photos: int
    classes: int
    seed: int
    input_size: list[int]
    batch_size: int
    rounds: int


def measure_predict(params: PredictParams) -> dict[str, Any]:
    import os

    from benchmarks.measures.data_scale import synthesise_photos
    from benchmarks.measures.predict import predict_vs_plain

    photos = synthesise_photos(os.path.join(params.folder, f"photos-{params.photos}"),
                               params.photos, params.classes, params.seed)
    result = predict_vs_plain(photos["root"], os.path.join(params.folder, "out"),
                              params.input_size, params.batch_size, params.rounds)
    return {"status": "ok", "photo_bytes": photos["bytes"], **result}


PREDICT = Task("predict", PredictParams, measure_predict)


def targets(entry: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(what, measured, target, verdict) for each target of the section."""
    ratio, agreement = entry.get("ratio"), entry.get("agreement")
    photos = entry.get("photos") or 0
    agreeing = None if agreement is None else round(agreement * photos)
    return [
        ("`mptfx predict` img/s ÷ plain `model.predict` over tf.data", number(ratio, 2),
         f"≥ {MIN_RATIO}", "not measured" if ratio is None else
         ("PASS" if ratio >= MIN_RATIO else "FAIL")),
        ("photos given `serving_default`'s class", "–" if agreeing is None else
         f"{agreeing:,} of {photos:,}", "every one", "not measured" if agreement is None else
         ("PASS" if agreement >= MIN_AGREEMENT else "FAIL")),
    ]


class Predict(Section):
    name = "predict"
    tasks = (PREDICT,)

    def run(self, ctx: Context) -> None:
        ctx.say(f"  predict: {PHOTOS} synthetic JPEG photos, mptfx predict vs plain "
                "model.predict ...")
        load_start = ctx.load()
        params = PredictParams(str(ctx.bench_dir / "predict"), PHOTOS, CLASSES, SEED,
                               INPUT_SIZE, BATCH_SIZE, ROUNDS)
        outcome = ctx.task(PREDICT, params, "predict", timeout=900)
        entry = (outcome.result if outcome.ok
                 else {"status": outcome.status, "error": outcome.error})
        entry["load_average"] = [load_start, ctx.load()]
        if outcome.ok:
            for what, measured, target, verdict in targets(entry):
                ctx.say(f"    {what}: {measured} (target {target}): {verdict}")
        ctx.store(self.name, entry)

    def table(self, results: dict[str, Any]) -> list[str]:
        entry = results.get(self.name) or {}
        if entry.get("status") != "ok":
            return status_line("Predict", entry)
        load = entry.get("load_average") or [None, None]
        rounds = entry.get("rounds") or {}
        lines = [
            f"### Predict ({entry['photos']:,} synthetic 224×224 JPEG photos, "
            f"{number(entry.get('photo_bytes', 0) / 2**20, 1)} MB; {entry['model']} at "
            f"{'×'.join(map(str, entry['input_size']))}, batch {entry['batch_size']}; "
            f"{entry.get('cores')} cores; load average {number(load[0], 2)} → "
            f"{number(load[1], 2)})",
            "",
            "| measure | mptfx predict | plain model.predict | ÷ plain |",
            "|---|---:|---:|---:|",
            f"| img/s, median of {len(rounds.get('ours') or [])} alternating rounds | "
            f"{number(entry.get('ours_images_per_sec'))} | "
            f"{number(entry.get('plain_images_per_sec'))} | {number(entry.get('ratio'), 2)} |",
            f"| img/s of each round | {', '.join(map(str, rounds.get('ours') or []))} | "
            f"{', '.join(map(str, rounds.get('plain') or []))} | |",
            "",
            "mptfx predict: the command's path (folder listing, the Trainer's decoder and "
            "resize in tf.data on every core, the published SavedModel's "
            "`predict_normalized`, one CSV row per photo written to a file); plain: the "
            "Keras model's `predict` over read_file → decode_jpeg → resize → /255 → batch → "
            "prefetch (AUTOTUNE), holding every answer in memory. The model is fitted one "
            "epoch on the photos first; agreement is each photo's class against "
            "`serving_default` fed the photo's file in a tf.Example.",
            "",
        ]
        return lines + targets_table(targets(entry))

    def verdicts(self, results: dict[str, Any]) -> list[str]:
        entry = results.get(self.name) or {}
        if entry.get("status") != "ok":
            return []
        return [f"Predict: {what} {measured} (target {target}): {verdict}."
                for what, measured, target, verdict in targets(entry)]


SECTION = Predict()

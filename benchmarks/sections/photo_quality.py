"""`photo_quality`: the model the default `mptfx run --data <photos>` makes, beside the
TensorFlow "Image classification" tutorial's script on the same folder.

An 8-class folder of 224x224 JPEG crops of real photographs where detail decides the class
(benchmarks/measures/photo_quality.py), and a held-out test folder cut the same way. Each in a
fresh worker process: the tutorial's script as the tutorial writes it
(benchmarks/measures/tutorial_classification.py: 180 px, three Conv-Pool blocks, augmentation,
Dropout, 15 epochs), and `mptfx run --data <folder>` with no `--set`. Both are scored on the
test folder; the target (issue 34): mptfx's default model is at least as accurate. Wall
time is reported beside it: mptfx's covers its eleven components, the tutorial's its
training alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.sections.base import Section, number, short
from benchmarks.sections.context import Context
from benchmarks.sections.tasks import Task, arguments

TRAIN_SEED, TEST_SEED = 0, 1
TEST_SHARE = 0.5  # test photos per class = this x the training photos per class


@dataclasses.dataclass(frozen=True)
class PhotoQualitySetParams:
    """The training folder and the held-out test folder, `per_class` and
    `test_per_class` photos per class."""

    folder: str
    per_class: int
    test_per_class: int


@dataclasses.dataclass(frozen=True)
class TutorialParams:
    """The tutorial's script on `data_dir`, scored on `test_dir`."""

    data_dir: str
    test_dir: str


@dataclasses.dataclass(frozen=True)
class MptfxRunParams:
    """`mptfx run --data data_dir --workspace workspace`, scored on `test_dir`."""

    data_dir: str
    test_dir: str
    workspace: str


def measure_sets(params: PhotoQualitySetParams) -> dict[str, Any]:
    import os

    from benchmarks.measures.photo_quality import make_strip_photos

    return {"train": make_strip_photos(os.path.join(params.folder, "photos"),
                                       params.per_class, TRAIN_SEED),
            "test": make_strip_photos(os.path.join(params.folder, "test"),
                                      params.test_per_class, TEST_SEED)}


def measure_tutorial(params: TutorialParams) -> dict[str, Any]:
    from benchmarks.measures.tutorial_classification import train_tutorial_model

    return train_tutorial_model(**arguments(params))


def measure_mptfx(params: MptfxRunParams) -> dict[str, Any]:
    from benchmarks.measures.photo_quality import run_mptfx

    return run_mptfx(**arguments(params))


QUALITY_SETS = Task("photo_quality_sets", PhotoQualitySetParams, measure_sets)
TUTORIAL = Task("photo_quality_tutorial", TutorialParams, measure_tutorial)
MPTFX_RUN = Task("photo_quality_mptfx", MptfxRunParams, measure_mptfx)


def verdict(entry: dict[str, Any]) -> tuple[str, str]:
    """(the sentence, PASS/FAIL/not measured) of the target: mptfx's default model at
    least as accurate on the test folder as the tutorial's."""
    mptfx, tutorial = entry.get("mptfx") or {}, entry.get("tutorial") or {}
    ours, theirs = mptfx.get("test_accuracy"), tutorial.get("test_accuracy")
    if ours is None or theirs is None:
        return "not measured", "not measured"
    outcome = "PASS" if ours >= theirs else "FAIL"
    return (f"held-out accuracy {ours:.4f} (mptfx default) vs {theirs:.4f} (tutorial)",
            outcome)


class PhotoQuality(Section):
    name = "photo_quality"
    tasks = (QUALITY_SETS, TUTORIAL, MPTFX_RUN)

    def run(self, ctx: Context) -> None:
        per_class = ctx.preset.photo_quality_per_class
        folder = ctx.bench_dir / "photo-quality"
        ctx.say(f"  photo quality: {8 * per_class} photos in 8 classes, the default mptfx run "
                "vs the TensorFlow tutorial's script ...")
        sets = ctx.task(QUALITY_SETS, PhotoQualitySetParams(
            str(folder), per_class, max(1, int(per_class * TEST_SHARE))), "photo-quality-sets",
            timeout=900)
        if not sets.ok:
            ctx.store(self.name, {"status": sets.status, "error": sets.error})
            return
        train, test = sets.result["train"]["root"], sets.result["test"]["root"]
        load_start = ctx.load()
        entry: dict[str, Any] = {"status": "ok", "photos": sets.result["train"]["photos"],
                                 "test_photos": sets.result["test"]["photos"]}
        for key, task, params in (
                ("tutorial", TUTORIAL, TutorialParams(train, test)),
                ("mptfx", MPTFX_RUN, MptfxRunParams(train, test, str(folder / "workspace")))):
            outcome = ctx.task(task, params, f"photo-quality-{key}",
                               timeout=ctx.preset.pipeline_timeout_seconds)
            entry[key] = (outcome.result if outcome.ok
                          else {"status": outcome.status, "error": outcome.error})
            if outcome.ok:
                ctx.say(f"    {key}: test accuracy {outcome.result['test_accuracy']:.4f} in "
                        f"{outcome.result['seconds']:.0f} s")
        entry["load_average"] = [load_start, ctx.load()]
        sentence, outcome = verdict(entry)
        ctx.say(f"    {sentence}: {outcome}")
        ctx.store(self.name, entry)

    def table(self, results: dict[str, Any]) -> list[str]:
        entry = results.get(self.name) or {}
        if not entry:
            return []
        if entry.get("status") != "ok":
            return [f"Photo quality: {entry.get('status')}: {entry.get('error')}", ""]
        mptfx, tutorial = entry.get("mptfx") or {}, entry.get("tutorial") or {}
        load = entry.get("load_average") or [None, None]
        lines = [
            f"### Photo quality ({entry['photos']:,} JPEG photos of 224×224 in 8 classes, "
            f"crops of real photographs; {entry['test_photos']:,} held-out test photos; load "
            f"average {number(load[0], 2)} → {number(load[1], 2)})",
            "",
            "| how | model | input | held-out accuracy | own eval split | wall s |",
            "|---|---|---|---:|---:|---:|",
            _row("`" + short(mptfx.get("command"), 80) + "` (no --set)", mptfx,
                 mptfx.get("model"), mptfx.get("input_size"), "eval_accuracy"),
            _row("TensorFlow tutorial's script, as is", tutorial,
                 "3× Conv-Pool, Dropout, Dense", tutorial.get("input_size"), "val_accuracy"),
            "",
        ]
        if mptfx.get("model_reason"):
            lines += [f"mptfx chose {mptfx.get('model')} ({mptfx['model_reason']}) at "
                      f"{_size(mptfx.get('input_size'))} ({mptfx.get('input_size_reason')}), "
                      f"{mptfx.get('precision')}, {mptfx.get('epochs')} epochs. Its wall "
                      "time covers all eleven components (Ingest, validation, autotune, "
                      "training, TFMA, the infra check, the push, four TF Lite variants); "
                      "the tutorial's, loading and training.", ""]
        return lines

    def verdicts(self, results: dict[str, Any]) -> list[str]:
        entry = results.get(self.name) or {}
        if entry.get("status") != "ok":
            return []
        sentence, outcome = verdict(entry)
        return [f"Photo quality: {sentence} (target: at least the tutorial's): {outcome}."]


def _size(size: list[int] | None) -> str:
    return "×".join(str(v) for v in size) if size else "–"


def _row(how: str, result: dict[str, Any], model: str | None, size: list[int] | None,
         own_key: str) -> str:
    if result.get("status") not in (None, "ok"):
        return f"| {how} | {result['status']}: {short(result.get('error'), 80)} | | | | |"
    return (f"| {how} | {model or '–'} | {_size(size)} | "
            f"{number(result.get('test_accuracy'), 4)} | {number(result.get(own_key), 4)} | "
            f"{number(result.get('seconds'))} |")


SECTION = PhotoQuality()

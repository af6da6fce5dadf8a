"""`distillation`: a small student trained alone and distilled from a ResNet-50 champion
on the digits, same epochs and seeds (benchmarks/measures/distillation.py).

A ResNet-50 is trained at 64x64 and pushed as the champion (`mptfx run --set
model.name=resnet50 --set model.input_size=[64,64]`),
then, for each seed of the preset, `seed_cnn` (under a hundredth of its parameters) is
trained twice: alone, published as `digits-alone`, and with `trainer.distill.teacher:
champion`, published as `digits-student`. The target (issue 37): the distilled students'
mean eval accuracy is at least the students' alone, measured side by side; the table gives
each seed's accuracy, the spread and the wall times.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from benchmarks.measures.distillation import TEACHER_SIZE
from benchmarks.sections.base import Section, number, short
from benchmarks.sections.context import Context
from benchmarks.sections.tasks import Task, arguments

TEACHER_MODEL = "resnet50"
STUDENT_MODEL = "seed_cnn"
KINDS = ("alone", "distilled")


@dataclasses.dataclass(frozen=True)
class TeacherParams:
    """The champion: `model` trained `epochs` epochs with `seed` in `workspace`."""

    workspace: str
    model: str
    epochs: int
    seed: int


@dataclasses.dataclass(frozen=True)
class StudentParams:
    """One student: alone or `distilled` from the champion in `workspace`."""

    workspace: str
    model: str
    epochs: int
    seed: int
    distilled: bool


def measure_teacher(params: TeacherParams) -> dict[str, Any]:
    from benchmarks.measures.distillation import train_teacher

    return train_teacher(**arguments(params))


def measure_student(params: StudentParams) -> dict[str, Any]:
    from benchmarks.measures.distillation import train_student

    return train_student(**arguments(params))


TEACHER = Task("distillation_teacher", TeacherParams, measure_teacher)
STUDENT = Task("distillation_student", StudentParams, measure_student)


def accuracies(entry: dict[str, Any], kind: str) -> list[float]:
    """The eval accuracies of `kind`'s students, one per seed that completed."""
    return [run["eval_accuracy"] for run in entry.get(kind) or []
            if run.get("eval_accuracy") is not None]


def verdict(entry: dict[str, Any]) -> tuple[str, str]:
    """(the sentence, PASS/FAIL/not measured): the distilled mean at least the alone mean,
    over the same seeds."""
    alone, distilled = accuracies(entry, "alone"), accuracies(entry, "distilled")
    if not alone or len(alone) != len(distilled):
        return "not measured", "not measured"
    ours, theirs = statistics.mean(distilled), statistics.mean(alone)
    outcome = "PASS" if ours >= theirs else "FAIL"
    return (f"distilled {STUDENT_MODEL} {ours:.4f} vs alone {theirs:.4f} (mean eval accuracy "
            f"over {len(alone)} seed(s))", outcome)


class Distillation(Section):
    name = "distillation"
    tasks = (TEACHER, STUDENT)

    def run(self, ctx: Context) -> None:
        preset = ctx.preset
        workspace = str(ctx.bench_dir / "distillation")
        ctx.say(f"  distillation: a {TEACHER_MODEL} champion on the digits at "
                f"{TEACHER_SIZE}x{TEACHER_SIZE}, then "
                f"{STUDENT_MODEL} alone and distilled, {preset.distill_epochs} epochs, seeds "
                f"{', '.join(map(str, preset.distill_seeds))} ...")
        load_start = ctx.load()
        timeout = ctx.preset.pipeline_timeout_seconds
        teacher = ctx.task(TEACHER, TeacherParams(workspace, TEACHER_MODEL,
                                                  preset.distill_teacher_epochs,
                                                  preset.distill_seeds[0]),
                           "distillation-teacher", timeout=timeout)
        if not teacher.ok:
            ctx.store(self.name, {"status": teacher.status, "error": teacher.error})
            return
        ctx.say(f"    teacher: eval accuracy {teacher.result['eval_accuracy']:.4f} in "
                f"{teacher.result['seconds']:.0f} s")
        entry: dict[str, Any] = {"status": "ok", "teacher": teacher.result,
                                 "epochs": preset.distill_epochs,
                                 "seeds": list(preset.distill_seeds), "alone": [],
                                 "distilled": []}
        for seed in preset.distill_seeds:
            for kind in KINDS:
                outcome = ctx.task(STUDENT, StudentParams(
                    workspace, STUDENT_MODEL, preset.distill_epochs, seed,
                    kind == "distilled"), f"distillation-{kind}-{seed}", timeout=timeout)
                run = (outcome.result if outcome.ok
                       else {"status": outcome.status, "error": outcome.error})
                entry[kind].append({"seed": seed, **run})
                if outcome.ok:
                    ctx.say(f"    seed {seed} {kind}: eval accuracy "
                            f"{run['eval_accuracy']:.4f} in {run['seconds']:.0f} s")
        entry["load_average"] = [load_start, ctx.load()]
        sentence, outcome = verdict(entry)
        ctx.say(f"    {sentence}: {outcome}")
        ctx.store(self.name, entry)

    def table(self, results: dict[str, Any]) -> list[str]:
        entry = results.get(self.name) or {}
        if not entry:
            return []
        if entry.get("status") != "ok":
            return [f"Distillation: {entry.get('status')}: {entry.get('error')}", ""]
        teacher = entry.get("teacher") or {}
        load = entry.get("load_average") or [None, None]
        distilled = next((run.get("distill") for run in entry.get("distilled") or []
                          if run.get("distill")), None) or {}
        lines = [
            f"### Distillation (the digits: a {TEACHER_MODEL} champion at "
            f"{TEACHER_SIZE}×{TEACHER_SIZE}, {STUDENT_MODEL} "
            f"alone vs distilled, {entry['epochs']} epochs, seeds "
            f"{', '.join(map(str, entry['seeds']))}; load average {number(load[0], 2)} → "
            f"{number(load[1], 2)})",
            "",
            "| model | how | parameters | eval accuracy (mean) | min–max | per seed | "
            "Trainer s (mean) | wall s (mean) |",
            "|---|---|---:|---:|---:|---|---:|---:|",
            _row(TEACHER_MODEL, "the champion (`--set model.name=resnet50 --set "
                 f"model.input_size=[{TEACHER_SIZE},{TEACHER_SIZE}]`)", [teacher],
                 distilled.get("teacher_parameters")),
            _row(STUDENT_MODEL, "alone (`digits-alone`)", entry.get("alone") or [],
                 distilled.get("student_parameters")),
            _row(STUDENT_MODEL, "distilled (`trainer.distill.teacher=champion`, T 4, "
                 "alpha 0.1)", entry.get("distilled") or [],
                 distilled.get("student_parameters")),
            "",
        ]
        failed = [f"{kind} seed {run['seed']}: {short(run.get('error'), 80)}"
                  for kind in KINDS for run in entry.get(kind) or [] if run.get("error")]
        return lines + ([f"Not measured: {'; '.join(failed)}", ""] if failed else [])

    def verdicts(self, results: dict[str, Any]) -> list[str]:
        entry = results.get(self.name) or {}
        if entry.get("status") != "ok":
            return []
        sentence, outcome = verdict(entry)
        return [f"Distillation: {sentence} (target: at least alone): {outcome}."]


def _row(model: str, how: str, runs: list[dict[str, Any]], parameters: int | None) -> str:
    scored = [run for run in runs if run.get("eval_accuracy") is not None]
    values = [run["eval_accuracy"] for run in scored]
    if not values:
        return f"| {model} | {how} | {number(parameters)} | – | – | – | – | – |"
    spread = f"{min(values):.4f}–{max(values):.4f}" if len(values) > 1 else "–"
    per_seed = ", ".join(f"{value:.4f}" for value in values)
    trainer = [run["trainer_seconds"] for run in scored if run.get("trainer_seconds")]
    return (f"| {model} | {how} | {number(parameters)} | {statistics.mean(values):.4f} | "
            f"{spread} | {per_seed} | "
            f"{number(statistics.mean(trainer) if trainer else None, 1)} | "
            f"{number(statistics.mean(run['seconds'] for run in scored), 1)} |")


SECTION = Distillation()

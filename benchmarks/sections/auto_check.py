"""`auto_check`: does the Trainer's measured `auto` pick the fastest throughput cell?

Per model, the `auto_choice` task runs the Trainer's own autotune at the bench's input and
batch (benchmarks/measures/autocheck.py); `auto_check_rows` sets its choice against the fastest cell
of the throughput matrix measured in this run. The verdict on `auto` is drawn from those
rows only, so it says what the table says: the choice the Trainer measured (not the static
rule the host section reports), and the same ratio.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.measures.autocheck import auto_check_rows
from benchmarks.sections.base import Section
from benchmarks.sections.context import Context
from benchmarks.sections.tasks import Task, arguments


@dataclasses.dataclass(frozen=True)
class AutoParams:
    """The model autotune builds, at the input shape, batch and classes of the bench."""

    model_name: str
    input_shape: list[int]
    batch_size: int
    num_classes: int


def measure(params: AutoParams) -> dict[str, Any]:
    from benchmarks.measures.autocheck import auto_choice

    return auto_choice(**arguments(params))


AUTO_CHOICE = Task("auto_choice", AutoParams, measure)


class AutoCheck(Section):
    name = "auto_check"
    tasks = (AUTO_CHOICE,)

    def run(self, ctx: Context) -> None:
        ctx.say("  auto check: what the Trainer's auto chooses per model, vs the fastest cell")
        choices: dict[str, dict[str, Any]] = {}
        for model in _models_to_check(ctx):
            setup = ctx.setup(model)
            params = AutoParams(model_name=model, input_shape=list(setup.input_shape),
                                batch_size=setup.batch_size, num_classes=setup.num_classes)
            outcome = ctx.task(AUTO_CHOICE, params, f"auto-{model}",
                               timeout=ctx.preset.cell_timeout_seconds)
            choices[model] = outcome.result if outcome.ok else {
                "auto": None, "status": outcome.status, "error": outcome.error}
        rows = auto_check_rows(ctx.results.get("throughput", []), choices)
        ctx.results["auto_check"] = rows
        ctx.results["auto_choices"] = choices
        for row in rows:
            ratio = "n/a" if row["ratio"] is None else f"{row['ratio']:.2f}x"
            ctx.say(f"    {row['model']}: auto {row['auto']} ({row['auto_status']}), "
                    f"fastest {row['fastest']}, ratio {ratio}")
        ctx.save()

    def table(self, results: dict[str, Any]) -> list[str]:
        rows = results.get("auto_check") or []
        if not rows:
            return []
        lines = ["### auto check (the Trainer's measured auto vs the fastest cell in this run)",
                 "", "| model | auto chose | how | fastest measured | auto / fastest |",
                 "|---|---|---|---|---:|"]
        for row in rows:
            ratio = "n/a" if row.get("ratio") is None else f"{row['ratio']:.2f}×"
            lines.append(f"| {row['model']} | {row.get('auto')} | {row.get('auto_status')} | "
                         f"{row.get('fastest')} | {ratio} |")
        return lines + [""]

    def verdicts(self, results: dict[str, Any]) -> list[str]:
        return [auto_verdict(row) for row in results.get("auto_check") or []]


def _models_to_check(ctx: Context) -> list[str]:
    """The models the throughput matrix measured (with nothing to compare with, the probe
    would only cost time), or every model when the matrix was not run."""
    rows = ctx.results.get("throughput")
    if rows is None:
        return list(ctx.models)
    measured = {row["model"] for row in rows if row["status"] == "ok"}
    return [model for model in ctx.models if model in measured]


def auto_verdict(row: dict[str, Any]) -> str:
    """Where the Trainer's measured `auto` stands against the fastest cell, as one line."""
    model, chose, status = row["model"], row.get("auto"), row.get("auto_status")
    if not chose:
        return f"{model}: `auto`'s choice could not be measured ({status}: {row.get('error')})."
    line = f"{model}: `auto` ({status}) chooses {chose}"
    if row.get("fastest") is None:
        return line + "; no throughput cell of this model was measured to compare it with."
    if row.get("ratio") is None:
        return line + f"; that cell was not in the throughput matrix (fastest: {row['fastest']})."
    if chose == row["fastest"]:
        return line + ": the fastest cell."
    return line + f", which runs at {row['ratio']:.2f}× the fastest cell ({row['fastest']})."


SECTION = AutoCheck()

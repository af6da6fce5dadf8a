"""What `mptfx bench --sections distillation` measures: does a small student learn more
from a served champion than from the labels alone?

Every run is `mptfx run` on the built-in digits as a user types it, in one workspace, each
in its own process:

    the teacher    --set model.name=resnet50 --set model.input_size=[64,64]
                                                                   champion of digits
    alone          --set model.name=seed_cnn --set pipeline.name=mptfx-digits-alone
                   --set pusher.model_name=digits-alone
    distilled      --set model.name=seed_cnn --set trainer.distill.teacher=champion
                   (published as digits-student, pipeline mptfx-digits-student)

Both students get the same epochs and seed (`trainer.seed`, which also fixes their initial
weights and the data order), one pair per seed. A student's accuracy is the Evaluator's
(TFMA) on the eval split, the split the teacher was evaluated on.

    teacher = train_teacher("/tmp/ws", "resnet50", epochs=15, seed=1)   # at 64x64
    alone = train_student("/tmp/ws", "seed_cnn", epochs=15, seed=1, distilled=False)
"""

from __future__ import annotations

from typing import Any

from benchmarks.measures.mptfx_runs import run_json

# The teacher's input size: ResNet-50's five stride-2 stages end at 2x2 from 64 px. From
# random weights on the 1,434 digits it scored 0.9642 at 16x16 (its auto size), 0.9780 at
# 32x32 and 0.9890 at 64x64 (docs/guide/distillation.md): below the student alone, a
# teacher has nothing to teach.
TEACHER_SIZE = 64

ALONE = ["--set", "pipeline.name=mptfx-digits-alone", "--set", "pusher.model_name=digits-alone"]
DISTILLED = ["--set", "trainer.distill.teacher=champion"]


def run_digits(workspace: str, args: list[str]) -> dict[str, Any]:
    """`mptfx run --workspace workspace --json ARGS` on the digits: what it trained and
    how it scored, with its wall time."""
    summary, seconds, command = run_json(["--workspace", workspace, *args])
    trainer, evaluation = summary.get("trainer") or {}, summary.get("eval") or {}
    return {
        "seconds": seconds,
        "trainer_seconds": (summary.get("components", {}).get("Trainer") or {}).get("seconds"),
        "train_seconds": trainer.get("train_seconds"),
        "eval_accuracy": evaluation.get("accuracy"),
        "val_accuracy": trainer.get("val_accuracy"),
        "blessed": evaluation.get("blessed"),
        "pushed": (summary.get("pushed") or {}).get("pushed"),
        "model": trainer.get("model"),
        "input_size": trainer.get("input_size"),
        "precision": trainer.get("precision"),
        "epochs": trainer.get("epochs"),
        "distill": trainer.get("distill"),
        "command": command,
    }


def train_teacher(workspace: str, model: str, epochs: int, seed: int) -> dict[str, Any]:
    """The champion: `model` trained on the digits at TEACHER_SIZE and pushed as `digits`."""
    result = run_digits(workspace, ["--set", f"model.name={model}",
                                    "--set", f"model.input_size=[{TEACHER_SIZE},{TEACHER_SIZE}]",
                                    "--set", f"trainer.epochs={epochs}",
                                    "--set", f"trainer.seed={seed}"])
    if not result["pushed"]:
        raise RuntimeError(f"the teacher {model} was not pushed (eval accuracy "
                           f"{result['eval_accuracy']}): no champion to distill from")
    return result


def train_student(workspace: str, model: str, epochs: int, seed: int,
                  distilled: bool) -> dict[str, Any]:
    """The student trained alone or from the champion, same epochs and seed."""
    return run_digits(workspace, ["--set", f"model.name={model}",
                                  "--set", f"trainer.epochs={epochs}",
                                  "--set", f"trainer.seed={seed}",
                                  *(DISTILLED if distilled else ALONE)])

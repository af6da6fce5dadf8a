"""End to end: a candidate that trains, evaluates and is blessed, but fails in serving, is
never pushed. Two real runs in one workspace: the suite's local run (tests/conftest.py,
copied) pushed version 1; then `mptfx run` of
tests/data/user_models/fails_on_blank_images.py (its contrast layer asserts that an image
has ink; the SavedModel's warm-up records are blank images, as TF Serving's
`--enable_model_warmup` replays them) is trained, blessed by the Evaluator and refused by the
InfraValidator: exit 1, one line naming the cause, the serving folder unchanged byte for
byte, and summary.json's `infra` section saying why.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import set_args
from tests.folders import tree_hash
from tests.workspaces import relocated_copy

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FAILS_IN_SERVING = REPO / "tests" / "data" / "user_models" / "fails_on_blank_images.py"
# 15 steps: a constant rate without label smoothing (the recipe's cosine decay and smoothing
# are for a whole training budget) reliably clears the 0.3 bar.
TINY = ["data.builtin_per_class=20", "trainer.epochs=3", "evaluator.min_accuracy=0.3",
        "tflite.variants=[fp32]", "model.input_size=[8,8]", "tracking.register_model=false",
        "trainer.lr_schedule=constant", "trainer.label_smoothing=0"]


@pytest.fixture(scope="module")
def refused(mptfx, local_run, local_run_workspace, tmp_path_factory):
    _, first = local_run  # the suite's local run pushed version 1 (tests/conftest.py)
    assert first.infra.blessed is True and first.pushed.version == "1"
    workspace = relocated_copy(local_run_workspace, tmp_path_factory.mktemp("infra") / "ws")
    serving = workspace / "serving"
    before = tree_hash(serving)
    # max_regression 1: the Evaluator blesses it against version 1, so only the
    # InfraValidator stands between it and the push.
    second = mptfx("run", "--workspace", str(workspace), "--json", *set_args(
        *TINY, f"model.module_file={FAILS_IN_SERVING}", "evaluator.max_regression=1.0",
        "trainer.epochs=15"))
    return {"workspace": workspace, "serving": serving, "before": before, "first": first,
            "second": second}


def test_a_candidate_failing_in_serving_is_exit_1_with_one_line_naming_the_cause(refused):
    second = refused["second"]
    assert second.returncode == 1, second.stderr[-3000:]
    errors = [line for line in second.stderr.splitlines() if line.startswith("mptfx: error:")]
    assert len(errors) == 1, second.stderr[-3000:]
    [line] = errors
    assert line.startswith("mptfx: error: InfraValidator: not pushed: warm-up request 1 "
                           "(serving_default) failed while loading: InvalidArgumentError: "
                           "assertion failed: [StretchContrast: a blank image has no contrast")
    assert "(full log: " in line and "Traceback" not in second.stderr


def test_the_serving_folder_is_unchanged_and_nothing_was_pushed(refused):
    assert tree_hash(refused["serving"]) == refused["before"]
    summary = refused["second"].summary
    assert summary.eval.blessed is True  # the Evaluator let it through
    assert summary.pushed.to_dict() == {"pushed": False}
    assert "not pushed" in summary.tflite["skipped"]


def test_summary_json_says_why_in_its_infra_section(refused):
    summary = refused["second"].summary
    assert summary.status == "failed" and summary.failed_component == "InfraValidator"
    infra = summary.infra
    assert infra.checked is True and infra.blessed is False
    assert infra.reason.startswith("warm-up request 1 (serving_default) failed while loading")
    assert summary.error == f"InfraValidator: not pushed: {infra.reason}"
    assert infra.server == "model process" and infra.requests == 0
    assert Path(infra.blessing_uri, "INFRA_NOT_BLESSED").exists()
    # Every component ran: the refusal is the InfraValidator's verdict, not a crash.
    assert {name: c.status for name, c in summary.components.items()}["InfraValidator"] \
        == "completed"
    on_disk = Path(summary.summary_path).read_text()
    assert '"infra"' in on_disk and infra.reason in on_disk

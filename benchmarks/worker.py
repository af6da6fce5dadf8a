"""Entry point of a benchmark task process: `python -m benchmarks.worker TASK PARAMS RESULT`.

Reads the JSON parameters from PARAMS, rebuilds TASK's parameters dataclass from them,
calls its measure (the tasks are the sections', benchmarks/sections/) and writes its JSON
result to RESULT (`{"error": ...}` when it raised; the traceback goes to the task's log).
launch.run_task starts it; nothing else should.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Mapping
from typing import Any

from benchmarks.sections.tasks import Task, from_json
from components.core.text import one_line


def _register_user_model(user_model: dict[str, str] | None) -> str | None:
    """`mptfx bench --model-file`: registers the file's builder in this task's process
    (the name is the same in every task: it derives from the file's content)."""
    if not user_model:
        return None
    from models.user_module import register_user_model

    return register_user_model(user_model["module_file"], user_model["builder"],
                               user_model["task"])


def _write_json(path: str, content: dict[str, Any]) -> None:
    staging = f"{path}.partial"
    with open(staging, "w") as f:
        json.dump(content, f, indent=2, default=str)
    os.replace(staging, path)


def main(argv: list[str], tasks: Mapping[str, Task] | None = None) -> int:
    """Runs one task of `tasks` (default: mptfx bench's); returns the process exit code
    (0 ok, 1 the task raised)."""
    if tasks is None:
        from benchmarks.sections import TASKS as tasks
    name, params_path, result_path = argv
    with open(params_path) as f:
        values = json.load(f)
    try:
        user_model = _register_user_model(values.pop("user_model", None))
        task = tasks[name]
        result = task.measure(from_json(task.params, values))
        if user_model:
            result["user_model"] = user_model
    except Exception as error:  # reported to the parent as a failed task, traceback in the log
        traceback.print_exc()
        _write_json(result_path, {"error": f"{type(error).__name__}: {one_line(str(error))}"})
        return 1
    _write_json(result_path, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The shape of the shipped code: no module over 400 lines, and one home for the first line
of an error (components/core/text.py `one_line`), so that no message is cut differently."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("pipelines", "components", "models", "benchmarks")  # what the wheel installs
MAX_LINES = 400
ERROR_LINE_HOME = REPO / "components" / "core" / "text.py"


def _modules() -> list[Path]:
    return sorted(path for package in SHIPPED for path in (REPO / package).rglob("*.py"))


def test_no_module_is_over_400_lines():
    long = {str(path.relative_to(REPO)): count for path in _modules()
            if (count := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def _first_line_idioms(tree: ast.AST) -> list[int]:
    """Lines that take the first line of a text themselves: `x.splitlines()[0]` or `[:1]`,
    `x.split("\\n")[0]`, `x.partition("\\n")[0]`."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call)):
            continue
        call = node.value
        if not isinstance(call.func, ast.Attribute):
            continue
        index = node.slice
        first = (isinstance(index, ast.Constant) and index.value == 0) or (
            isinstance(index, ast.Slice) and index.lower is None
            and isinstance(index.upper, ast.Constant) and index.upper.value == 1)
        newline = bool(call.args) and isinstance(call.args[0], ast.Constant) and \
            call.args[0].value == "\n"
        if first and (call.func.attr == "splitlines" or
                      (call.func.attr in ("split", "partition") and newline)):
            found.append(node.lineno)
    return found


def test_the_first_line_of_an_error_is_taken_in_one_place():
    copies = {}
    for path in _modules():
        if path == ERROR_LINE_HOME:
            continue
        lines = _first_line_idioms(ast.parse(path.read_text()))
        if lines:
            copies[str(path.relative_to(REPO))] = lines
    assert copies == {}, "use components.core.text.one_line"


def test_the_check_finds_the_idioms_it_forbids():
    sample = ast.parse("a = str(e).splitlines()[0]\nb = t.split('\\n')[0]\n"
                       "c = t.partition('\\n')[0]\nd = t.splitlines()[:1]\ne = t.split(',')[0]\n")
    assert _first_line_idioms(sample) == [1, 2, 3, 4]

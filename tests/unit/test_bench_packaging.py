"""mptfx bench is installed; the developer lab (tools/lab) is not: what setuptools packages
(pyproject.toml) and what the image copies (.dockerignore) leave tools/ out, and no
installed package holds a lab module. (The wheel itself: tests/integration.)"""

from __future__ import annotations

from pathlib import Path

import tomli
from setuptools import find_packages

REPO = Path(__file__).resolve().parents[2]


def test_setuptools_packages_the_bench_and_not_the_lab():
    with open(REPO / "pyproject.toml", "rb") as f:
        find = tomli.load(f)["tool"]["setuptools"]["packages"]["find"]
    packages = find_packages(str(REPO), include=find["include"], exclude=find.get("exclude", ()))
    assert {"benchmarks", "benchmarks.sections", "benchmarks.measures", "pipelines"} <= set(
        packages)
    assert not [name for name in packages if name.split(".")[0] == "tools"], packages


def test_the_image_copies_no_tools():
    kept = [line[1:].strip() for line in (REPO / ".dockerignore").read_text().splitlines()
            if line.startswith("!")]
    assert "benchmarks/" in kept
    assert not [path for path in kept if path.startswith("tools")], kept


def test_no_installed_package_holds_a_lab_module():
    # The lab's own instruments (its worker and __main__ are entry points onto the bench's).
    lab = {path.stem for path in (REPO / "tools" / "lab").rglob("*.py")} - {
        "__init__", "__main__", "worker"}
    assert {"ceiling", "kernels", "profile", "flops", "stock_tfx", "mfu"} <= lab
    bench = {path.stem for path in (REPO / "benchmarks").rglob("*.py")}
    assert not bench & lab, sorted(bench & lab)

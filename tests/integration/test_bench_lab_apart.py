"""The product and the lab apart: the wheel `pip` builds from this checkout holds mptfx
bench and none of the developer instruments of tools/lab (issue 24)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAB_MODULES = {path.stem for path in (REPO / "tools" / "lab").rglob("*.py")} - {
    "__init__", "__main__", "worker"}  # entry points onto the bench's own


def test_the_wheel_holds_the_bench_and_no_lab_module(tmp_path):
    source = tmp_path / "src"  # a copy: the build writes build/ and *.egg-info beside it
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".venv*", "workspace", "build")
    shutil.copytree(REPO, source, ignore=ignore)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist"), str(source)], check=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("mptfx-*.whl")
    names = zipfile.ZipFile(wheel).namelist()

    assert "benchmarks/runner.py" in names and "benchmarks/sections/auto_check.py" in names
    assert not [name for name in names if name.startswith("tools/")]
    modules = {Path(name).stem for name in names if name.startswith("benchmarks/")}
    assert {"ceiling", "flops", "kernels", "profile", "stock_tfx", "mfu"} <= LAB_MODULES
    assert not modules & LAB_MODULES, sorted(modules & LAB_MODULES)

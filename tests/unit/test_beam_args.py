"""The local Beam arguments skip TFX's per-component sdist build (pipelines/pipeline.py).

TFX's own `make_beam_dependency_flags` decides whether a Beam component builds a TFX
source package for remote workers; this asserts, with TFX's real function, that our local
arguments make it keep them as they are (no build), while arguments without a dependency
flag would have it build one."""

from __future__ import annotations

import time

from tfx.utils import dependency_utils

from pipelines.pipeline import LOCAL_BEAM_ARGS


def test_local_beam_args_skip_the_ephemeral_tfx_package(monkeypatch):
    built = []
    real_build = dependency_utils.build_ephemeral_package
    monkeypatch.setattr(dependency_utils, "build_ephemeral_package",
                        lambda: built.append(real_build) or "/tmp/never-built.tar.gz")
    started = time.perf_counter()
    assert dependency_utils.make_beam_dependency_flags(list(LOCAL_BEAM_ARGS)) == LOCAL_BEAM_ARGS
    assert built == [] and time.perf_counter() - started < 5
    # Without the flag TFX would build (here: count) one package per Beam component.
    without = [arg for arg in LOCAL_BEAM_ARGS if not arg.startswith("--requirements_file")]
    assert dependency_utils.make_beam_dependency_flags(without)[-1].startswith("--extra_package")
    assert len(built) == 1

"""An OS error names where it happened: the step, the path, and for a full disk the space
left. (A run on a really full disk: e2e/test_bad_input.py.)"""

from __future__ import annotations

import errno
import os
import shutil

from pipelines.os_errors import (
    Stage,
    disk_full_cause,
    disk_full_error,
    format_bytes,
    space_left,
)


def _raised_from(cause: BaseException, wrapper: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as inner:
            raise wrapper from inner
    except BaseException as outer:
        return outer


def test_a_full_disk_is_found_however_a_library_wrapped_it():
    no_space = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    beam = _raised_from(no_space, RuntimeError(
        "OSError: [Errno 28] No space left on device [while running 'WriteStatsOutput']"))
    assert disk_full_cause(beam) is beam  # its text already says so
    quiet = _raised_from(no_space, RuntimeError("Write failed"))
    assert disk_full_cause(quiet) is no_space
    mlmd = RuntimeError("Error when executing query: database or disk is full query: UPDATE")
    assert disk_full_cause(mlmd) is mlmd
    assert disk_full_cause(OSError(errno.EDQUOT, "Disk quota exceeded")) is not None
    assert disk_full_cause(PermissionError(errno.EACCES, "Permission denied", "/x")) is None
    assert disk_full_cause(_raised_from(ValueError("bad"), RuntimeError("failed"))) is None


def test_the_line_names_the_step_the_path_and_the_space_left_now(tmp_path):
    stage = Stage()
    stage.enter("Ingest", tmp_path / "tfx" / "digits" / "Ingest")  # not made yet
    error = disk_full_error(RuntimeError("No space left on device"), stage, tmp_path,
                            tmp_path / "pipeline.log")
    free = format_bytes(shutil.disk_usage(tmp_path).free)
    assert str(error).startswith(
        f"no space left on device: Ingest could not write {tmp_path}/tfx/digits/Ingest "
        f"({free.split()[0]}")
    assert f"full log: {tmp_path}/pipeline.log" in str(error)
    named = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "summary.json"))
    stage.enter("writing summary.json", None)
    assert f"could not write {tmp_path}/summary.json (" in str(
        disk_full_error(named, stage, tmp_path))
    assert disk_full_error(ValueError("bad"), stage, tmp_path) is None


def test_space_left_names_the_filesystem_holding_the_path():
    assert space_left(os.path.abspath(os.sep) + "no/such/folder").endswith(" on / now")
    assert [format_bytes(n) for n in (512, 4096, 8 * 2**20, 1.25 * 2**30)] == [
        "512 B", "4 KiB", "8.0 MiB", "1.25 GiB"]


def test_an_os_error_outside_a_run_is_one_line_naming_the_command_and_path(mptfx_here,
                                                                            tmp_path):
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    result = mptfx_here("serve", "render", "--workspace", str(tmp_path / "ws"),
                        "--k8s-out", str(not_a_folder / "k8s"), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == (f"mptfx: error: serve render: cannot use {not_a_folder}/k8s: "
                             f"Not a directory\n")

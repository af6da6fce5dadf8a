"""Empty values are errors, never the defaults: `mptfx run --data "$DATA_DIR"` with the
variable unset must not train on the digits and, with a production config, publish a digits
model as the next version of the user's; `--config ""` must not run without the user's config,
nor `--workspace ""` write a workspace into the current folder."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("argv, named", [
    (["run", "--data", ""], "--data is empty"),
    (["run", "--data", "   "], "--data is empty"),
    (["run", "--config", ""], "--config is empty"),
    (["run", "--workspace", ""], "--workspace is empty"),
    (["run", "--workspace="], "--workspace is empty"),
    (["retrain", "--data", ""], "--data is empty"),
    (["run", "--set", "data.source="], "--set data.source= has no value"),
    (["serve", "status", "--workspace", ""], "--workspace is empty"),
    (["k8s", "compile", "--data", ""], "--data is empty"),
])
def test_an_empty_value_exits_2_in_one_line_and_writes_nothing(mptfx_here, tmp_path, argv,
                                                                named):
    result = mptfx_here(*argv, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"mptfx: error: {named}"), line
    assert result.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no workspace, no database, no log

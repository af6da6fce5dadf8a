"""mptfx runs TensorFlow with its oneDNN kernels on every x86 CPU (components/__init__.py),
not only where TensorFlow turns them on by itself (AVX512_VNNI, AVX512_BF16, AMX), and a
user's `TF_ENABLE_ONEDNN_OPTS=0` keeps TensorFlow's Eigen kernels. Each case is a fresh
Python process, as TensorFlow reads the setting once, at its first op."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

# TensorFlow's own answer, after an op has run; the import order is a user's: TensorFlow
# first, then mptfx.
PROBE = """
import tensorflow as tf
import components.trainer.config
tf.constant(1.0) + 1.0
from tensorflow.python.util import _pywrap_util_port
print(_pywrap_util_port.IsMklEnabled())
"""


@pytest.mark.parametrize(("setting", "enabled"), [(None, "True"), ("0", "False"),
                                                  ("1", "True")])
def test_onednn_is_on_unless_the_user_turned_it_off(setting, enabled):
    env = {key: value for key, value in os.environ.items() if key != "TF_ENABLE_ONEDNN_OPTS"}
    if setting is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = setting
    probe = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert probe.stdout.split()[-1] == enabled

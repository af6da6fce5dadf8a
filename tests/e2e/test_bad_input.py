"""Bad input gets one clear line naming the folder, file or key, and a documented exit code."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from components.ingest.builtin_digits import export_digits

EXIT_PIPELINE_FAILED, EXIT_USAGE = 1, 2


def _error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("mptfx: error:")]
    assert len(lines) == 1, stderr[-2000:]
    assert "Traceback" not in stderr
    return lines[0]


def test_missing_data_dir(mptfx, tmp_path):
    result = mptfx("run", "--workspace", str(tmp_path / "ws"), "--data", str(tmp_path / "nope"))
    assert result.returncode == EXIT_USAGE
    assert str(tmp_path / "nope") in _error_line(result.stderr)


def test_empty_data_dir(mptfx, tmp_path):
    (tmp_path / "empty").mkdir()
    result = mptfx("run", "--workspace", str(tmp_path / "ws"), "--data", str(tmp_path / "empty"))
    assert result.returncode == EXIT_USAGE
    assert str(tmp_path / "empty") in _error_line(result.stderr)


def test_single_class_dataset(mptfx, tmp_path):
    only = tmp_path / "data" / "cats"
    only.mkdir(parents=True)
    for index in range(5):
        Image.new("L", (8, 8), color=index * 40).save(only / f"{index}.png")
    result = mptfx("run", "--workspace", str(tmp_path / "ws"), "--data", str(tmp_path / "data"))
    assert result.returncode == EXIT_USAGE
    line = _error_line(result.stderr)
    assert "cats" in line and "2" in line


@pytest.mark.parametrize("override, named", [
    ("trainer.epoch=3", "trainer.epoch"),
    ("trainer.precision=float8", "trainer.precision"),
])
def test_unknown_config_key_or_bad_value(mptfx, tmp_path, override, named):
    result = mptfx("run", "--workspace", str(tmp_path / "ws"), "--set", override)
    assert result.returncode == EXIT_USAGE
    assert named in _error_line(result.stderr)
    assert not (tmp_path / "ws" / "tfx").exists()  # nothing started


def test_missing_config_file(mptfx, tmp_path):
    result = mptfx("run", "--config", str(tmp_path / "absent.yaml"))
    assert result.returncode == EXIT_USAGE
    assert "absent.yaml" in _error_line(result.stderr)


def test_too_many_corrupt_files_fail_the_ingest_naming_them(mptfx, tmp_path):
    data = export_digits(tmp_path / "digits", per_class=3)
    for index in range(3):
        (data / "7" / f"broken_{index}.png").write_bytes(b"not a png at all")
    result = mptfx("run", "--workspace", str(tmp_path / "ws"), "--data", str(data), "--json")
    assert result.returncode == EXIT_PIPELINE_FAILED
    line = _error_line(result.stderr)
    assert "Ingest" in line and "broken_0.png" in line and "max_bad_fraction" in line
    summary = result.summary
    assert summary.status == "failed" and summary.failed_component == "Ingest"
    assert summary.components["Ingest"].status == "failed"
    assert "Trainer" not in summary.components
    # Nothing was lost: the user's files are all still there.
    assert len(list(Path(data).glob("*/*"))) == 33



def _unprivileged(*args: str):
    """`mptfx ARGS` without the capabilities that let root ignore file permissions (dropped
    by util-linux's setpriv), so a chmod'ed folder refuses it as it refuses any user."""
    import os
    import subprocess
    import sys

    prefix = (["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]
              if os.geteuid() == 0 else [])
    return subprocess.run([*prefix, sys.executable, "-m", "pipelines.cli", *args],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=600)


def test_unreadable_data_root_is_exit_2_naming_it(tmp_path):
    data = export_digits(tmp_path / "digits", per_class=2)
    data.chmod(0)
    try:
        result = _unprivileged("run", "--workspace", str(tmp_path / "ws"), "--data", str(data))
    finally:
        data.chmod(0o755)
    assert result.returncode == EXIT_USAGE
    line = _error_line(result.stderr)
    assert str(data) in line and "ermission denied" in line
    assert len(list(data.glob("*/*.png"))) == 20  # nothing lost


def test_unwritable_workspace_is_exit_2_naming_it(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    workspace.chmod(0o555)
    try:
        result = _unprivileged("run", "--workspace", str(workspace))
    finally:
        workspace.chmod(0o755)
    assert result.returncode == EXIT_USAGE
    assert _error_line(result.stderr) == (
        f"mptfx: error: workspace {workspace} is not writable: Permission denied")


def test_imagenet_weights_without_a_network_stop_before_the_ingest(mptfx, tmp_path,
                                                                  monkeypatch):
    """`model.params.weights=imagenet` on a machine that has neither the file nor a network:
    exit 2 before anything runs, one line naming the URL and where to place the file. The
    network is made unreachable for Keras' download (urllib honours https_proxy), so the
    result is the same on a machine that has one."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    monkeypatch.setenv("https_proxy", "http://127.0.0.1:9")
    workspace = tmp_path / "ws"
    result = mptfx("run", "--workspace", str(workspace),
                   "--set", "model.name=mobilenet_v3_small",
                   "--set", "model.params.weights=imagenet")
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("mptfx: error:")]
    assert len(errors) == 1, result.stderr[-2000:]
    assert ("model.params.weights imagenet: cannot download https://storage.googleapis.com/"
            "tensorflow/keras-applications/mobilenet_v3/") in errors[0]
    cached = tmp_path / "keras" / "models" / \
        "weights_mobilenet_v3_small_224_1.0_float_no_top_v2.h5"
    assert f"place that file at {cached}" in errors[0]
    assert not (workspace / "tfx").exists() and not list(workspace.rglob("Ingest"))


def test_a_missing_teacher_stops_before_the_ingest(mptfx, tmp_path):
    workspace, gone = tmp_path / "ws", tmp_path / "gone" / "model.weights.h5"
    result = mptfx("run", "--workspace", str(workspace),
                   "--set", f"trainer.distill.teacher={gone}")
    assert result.returncode == EXIT_USAGE, result.stderr[-2000:]
    assert _error_line(result.stderr) == (
        f"mptfx: error: trainer.distill.teacher: no such file or folder {gone}")
    assert not list(workspace.rglob("Ingest"))


def test_a_teacher_of_other_classes_stops_before_the_ingest(mptfx, tmp_path):
    """A real two-class teacher (a seed_cnn's float32 weights and the description mptfx
    writes beside them) for the ten digits: exit 2 naming both class lists."""
    import keras

    from components.trainer.teacher import describe_model, write_model_description
    from models import build_model

    keras.mixed_precision.set_dtype_policy("float32")
    model = build_model("seed_cnn", (16, 16, 1), 2)
    serving = tmp_path / "teacher" / "Format-Serving"
    weights = tmp_path / "teacher" / "Format-Keras" / "model.weights.h5"
    weights.parent.mkdir(parents=True)
    model.save_weights(str(weights))
    write_model_description(str(serving), describe_model(
        "seed_cnn", {}, (16, 16, 1), ["cat", "dog"], "float32", str(weights), {}))
    workspace = tmp_path / "ws"
    result = mptfx("run", "--workspace", str(workspace),
                   "--set", f"trainer.distill.teacher={weights}")
    assert result.returncode == EXIT_USAGE, result.stderr[-2000:]
    line = _error_line(result.stderr)
    assert line.startswith(f"mptfx: error: trainer.distill.teacher {weights} predicts other "
                           "classes than the data")
    assert "the teacher's [cat, dog], the data's [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" in line
    assert not list(workspace.rglob("Ingest"))
def _on_a_small_disk(mount: Path, size: str, *args: str):
    """`mptfx ARGS` with a real filesystem of `size` (tmpfs) mounted at `mount`, in a mount
    namespace of its own (util-linux's unshare; as a user, inside a user namespace): the
    mount is seen by that process only and goes when it exits."""
    import os
    import subprocess
    import sys

    mount.mkdir()
    namespace = ["unshare", "--mount"] if os.geteuid() == 0 else [
        "unshare", "--user", "--map-root-user", "--mount"]
    probe = subprocess.run([*namespace, "mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                            str(mount)], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        reason = f"cannot mount a small filesystem here: {probe.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    script = 'mount -t tmpfs -o "size=$1" tmpfs "$2" && shift 2 && exec "$@"'
    return subprocess.run([*namespace, "sh", "-c", script, "sh", size, str(mount),
                           sys.executable, "-m", "pipelines.cli", *args],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=600)


def test_a_full_workspace_disk_names_the_component_the_path_and_the_space_left(tmp_path):
    """A workspace on a 256 KiB filesystem: ML Metadata and the Ingest's examples do not fit
    (MLflow's store is elsewhere, so what fills the disk is the pipeline's own output)."""
    data = export_digits(tmp_path / "digits")
    images = sorted(data.glob("*/*.png"))
    disk = tmp_path / "disk"
    result = _on_a_small_disk(disk, "256k", "run", "--workspace", str(disk / "ws"),
                              "--data", str(data),
                              "--set", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}")
    assert result.returncode == EXIT_USAGE, result.stderr[-2000:]
    line = _error_line(result.stderr)
    assert line.startswith("mptfx: error: no space left on device: Ingest could not write "
                           f"{disk}/ws/tfx/digits/Ingest ("), line
    assert f"free of 256 KiB on {disk} now" in line
    assert f"full log: {disk}/ws/runs/" in line
    assert sorted(data.glob("*/*.png")) == images  # the data is untouched

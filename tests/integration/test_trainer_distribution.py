"""The Trainer under tf.distribute, gradient accumulation, and resuming after a kill.

Real TensorFlow in real processes: MirroredStrategy over two logical CPU devices (with a
distillation teacher under mixed precision too), two MultiWorkerMirroredStrategy workers
talking gRPC on 127.0.0.1, and a training process killed with SIGKILL after its first
epoch. Worker processes run
`tests/trainer_testdata.py SPEC.json` (the Trainer's `train_and_export`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from components.trainer import module
from components.trainer.config import LossScaleSection
from tests.ports import free_port
from tests.trainer_testdata import fn_args_dict, make_fn_args, write_digits_examples

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parents[1] / "trainer_testdata.py"


@pytest.fixture(scope="module")
def examples_uri(tmp_path_factory) -> str:
    return write_digits_examples(str(tmp_path_factory.mktemp("digits")), 320)


def _start_worker(spec: dict, folder: Path, name: str, env: dict | None = None):
    spec_path = folder / f"{name}.json"
    spec_path.write_text(json.dumps(spec))
    log = open(folder / f"{name}.log", "w")  # noqa: SIM115  (closed by the caller's wait)
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", **(env or {}))
    environment.pop("TF_CONFIG", None)
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(spec_path)],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=environment,
    )


def _wait(process: subprocess.Popen, folder: Path, name: str, timeout: int = 600) -> int:
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(f"{name} timed out:\n{_log_tail(folder, name)}") from None


def _log_tail(folder: Path, name: str, whole: bool = False) -> str:
    text = (folder / f"{name}.log").read_text()
    return text if whole else text[-3000:]


def _weights(path: str) -> list[np.ndarray]:
    with np.load(path) as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


def test_mirrored_on_two_logical_cpus_matches_one_device_at_the_same_global_batch(
    examples_uri, tmp_path
):
    # Same data order and initial weights; dropout off so both see the same network.
    common = dict(epochs=2, precision="float32", params={"dropout": 0.0})
    one_device = fn_args_dict(examples_uri, str(tmp_path / "one"), strategy="one_device",
                              batch_size=64, **common)
    mirrored = fn_args_dict(examples_uri, str(tmp_path / "mirrored"), strategy="mirrored",
                            batch_size=32, **common)
    spec = {"runs": [one_device, mirrored], "logical_cpus": 2,
            "weights_out": str(tmp_path / "weights_{run}.npz"),
            "result_out": str(tmp_path / "results.json")}
    process = _start_worker(spec, tmp_path, "mirrored")
    assert _wait(process, tmp_path, "mirrored") == 0, _log_tail(tmp_path, "mirrored")

    single, multi = (r["summary"] for r in json.loads((tmp_path / "results.json").read_text()))
    assert (single["strategy"], single["replicas"], single["global_batch_size"]) == (
        "one_device", 1, 64)
    assert (multi["strategy"], multi["replicas"], multi["global_batch_size"]) == (
        "mirrored", 2, 64)
    np.testing.assert_allclose(multi["history"]["loss"], single["history"]["loss"], rtol=1e-4)
    np.testing.assert_allclose(
        multi["history"]["val_loss"], single["history"]["val_loss"], rtol=1e-4
    )
    for a, b in zip(_weights(str(tmp_path / "weights_0.npz")),
                    _weights(str(tmp_path / "weights_1.npz")), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.fixture(scope="module")
def sharded_uri(tmp_path_factory) -> str:
    # Shards of 16 KB: each split has several files, so each worker reads its own.
    return write_digits_examples(str(tmp_path_factory.mktemp("sharded")), 320,
                                 shard_mb=16 / 1024)


def test_two_workers_train_in_sync_and_only_the_chief_exports(sharded_uri, tmp_path):
    workers = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    fields = fn_args_dict(sharded_uri, str(tmp_path / "out"), strategy="auto", epochs=2,
                          batch_size=16)
    processes = []
    for index in range(2):
        spec = {"runs": [fields],
                "tf_config": {"cluster": {"worker": workers},
                              "task": {"type": "worker", "index": index}},
                "weights_out": str(tmp_path / f"worker{index}_{{run}}.npz"),
                "result_out": str(tmp_path / f"worker{index}.json")}
        processes.append(_start_worker(spec, tmp_path, f"worker{index}"))
    for index, process in enumerate(processes):
        name = f"worker{index}"
        assert _wait(process, tmp_path, name) == 0, _log_tail(tmp_path, name)

    chief, other = (json.loads((tmp_path / f"worker{i}.json").read_text())[0] for i in (0, 1))
    assert chief["chief"] is True and other["chief"] is False
    for index in (0, 1):  # each worker read only its own shards
        assert f"sharded by FILE: worker {index} reads" in _log_tail(tmp_path, f"worker{index}",
                                                                     whole=True)
    assert chief["summary"]["strategy"] == "multi_worker"
    assert chief["summary"]["replicas"] == 2 and chief["summary"]["global_batch_size"] == 32
    # Trained to completion, in sync: the same final weights on both workers.
    assert len(chief["summary"]["history"]["loss"]) == 2
    for a, b in zip(_weights(str(tmp_path / "worker0_0.npz")),
                    _weights(str(tmp_path / "worker1_0.npz")), strict=True):
        np.testing.assert_array_equal(a, b)
    # Only the chief's outputs remain: the serving model, Keras weights and summary.
    serving = Path(fields["serving_model_dir"])
    assert chief["serving_model_dir"] == str(serving)
    assert (serving / "saved_model.pb").exists()
    assert (serving.parent / "Format-Keras" / "model.weights.h5").exists()
    assert (Path(fields["model_run_dir"]) / module.SUMMARY_FILE).exists()
    assert other["serving_model_dir"] != str(serving)
    assert not Path(other["serving_model_dir"]).parent.exists()  # scratch deleted
    served = tf.saved_model.load(str(serving))
    probabilities = served.signatures["predict_images"](images=tf.zeros([2, 8, 8, 1], tf.uint8))
    assert probabilities["probabilities"].shape == (2, 10)


def test_a_training_killed_after_epoch_1_resumes_at_epoch_2(examples_uri, tmp_path):
    fields = fn_args_dict(examples_uri, str(tmp_path / "out"), epochs=3)
    killed = _start_worker({"runs": [fields], "kill_after_epoch": 1}, tmp_path, "killed")
    assert _wait(killed, tmp_path, "killed") == -signal.SIGKILL, _log_tail(tmp_path, "killed")
    assert not (Path(fields["model_run_dir"]) / module.SUMMARY_FILE).exists()
    (metadata,) = (tmp_path / "backup").glob("*/chief-0/training_metadata.json")
    assert json.loads(metadata.read_text())["epoch"] == 1  # the backup of epoch 1 survived

    spec = {"runs": [fields], "result_out": str(tmp_path / "resumed.json")}
    resumed = _start_worker(spec, tmp_path, "resumed")
    assert _wait(resumed, tmp_path, "resumed") == 0, _log_tail(tmp_path, "resumed")
    log = _log_tail(tmp_path, "resumed", whole=True)  # the export's lines follow the epochs
    assert "Epoch 1/3" not in log and "Epoch 2/3" in log  # Keras' own progress lines
    summary = json.loads((tmp_path / "resumed.json").read_text())[0]["summary"]
    assert summary["resumed_at_epoch"] == 2
    # The history still covers every epoch, the first one from before the kill.
    assert len(summary["history"]["loss"]) == 3
    assert summary["history"]["loss"][2] < summary["history"]["loss"][0]
    # A finished training leaves no backup behind.
    assert not list((tmp_path / "backup").glob("*/*/latest.weights.h5"))


# The dtype's machine epsilon: float16 keeps 11 bits of significand, bfloat16 8.
DTYPE_EPSILON = {"mixed_float16": float(np.finfo(np.float16).eps), "mixed_bfloat16": 2.0 ** -7}
# The losses pass through two networks computed in the low dtype (the teacher's prediction and
# the student's), each rounding at every layer, so they may stray by a few epsilons, not one.
# Measured: within 1 epsilon on an EPYC with AVX512_BF16 (native bfloat16 dot products with
# float32 sums), 1.5 epsilons (distillation_loss 1.8402 vs 1.8618) on an AVX2-only EPYC, where
# TensorFlow emulates bfloat16 and rounds each op's output. A loss scale left in, a
# temperature applied twice or a replica counted twice is off by far more than 4.
LOSS_EPSILONS = 4


def test_distillation_loss_under_mixed_precision_and_mirrored_matches_float32(
    examples_uri, tmp_path
):
    """One train step of a distilled student from the same weights on the same real batch,
    teacher and student in the cell's precision: under mixed_float16 (loss-scaled) and
    mixed_bfloat16 with MirroredStrategy over two logical CPUs, the distillation loss, the
    whole loss match the float32 step within 4 of the dtype's epsilons (relative) and the
    unscaled gradient norm within one; float32 over two replicas matches one device."""
    # A teacher that has learnt something: its predictions are far from uniform.
    teacher_args = fn_args_dict(examples_uri, str(tmp_path / "teacher"), input_size=(16, 16),
                                epochs=8, learning_rate=0.003, autotune="off")
    teacher = module.train_and_export(make_fn_args(teacher_args, light=True))
    cells = [["float32", "one_device"], ["float32", "mirrored"],
             ["mixed_float16", "mirrored"], ["mixed_bfloat16", "mirrored"]]
    spec = {"logical_cpus": 2, "result_out": str(tmp_path / "steps.json"),
            "distillation_steps": {"examples_uri": examples_uri, "cells": cells,
                                   "teacher": teacher.serving_model_dir}}
    process = _start_worker(spec, tmp_path, "distill")
    assert _wait(process, tmp_path, "distill") == 0, _log_tail(tmp_path, "distill")

    rows = {(r["policy"], r["strategy"]): r
            for r in json.loads((tmp_path / "steps.json").read_text())}
    reference, mirrored = rows["float32", "one_device"], rows["float32", "mirrored"]
    assert teacher.summary.final_metric > 0.5
    assert mirrored["replicas"] == 2 and reference["distillation_loss"] > 0.05
    for key in ("distillation_loss", "loss"):  # the replicas' terms add up to one device's
        assert mirrored[key] == pytest.approx(reference[key], rel=1e-5)
    for policy, epsilon in DTYPE_EPSILON.items():
        row = rows[policy, "mirrored"]
        assert row["teacher_precision"] == policy and row["step_skipped"] == 0.0
        for key in ("distillation_loss", "loss"):
            assert row[key] == pytest.approx(reference[key], rel=LOSS_EPSILONS * epsilon), \
                (policy, key)
        # Each replica's norm of its own half-batch (training_model.py), as in float32.
        assert row["gradient_norm"] == pytest.approx(mirrored["gradient_norm"], rel=epsilon)


def _seed_cnn(grad_accum_steps: int) -> keras.Model:
    keras.utils.set_random_seed(0)
    # Dropout would draw different masks for the two batchings: leave it out.
    model = module.build_training_model("seed_cnn", {"dropout": 0.0}, (8, 8, 1), 10, "float32")
    module.compile_training_model(
        model, "classification", 1e-3, "float32", LossScaleSection(), grad_accum_steps,
        xla=False,
    )
    return model


def test_gradient_accumulation_of_4_batches_of_16_equals_one_batch_of_64(restore_dtype_policy):
    keras.mixed_precision.set_dtype_policy("float32")
    rng = np.random.default_rng(0)
    images = rng.random((64, 8, 8, 1), dtype=np.float32)
    labels = rng.integers(0, 10, 64)
    large = _seed_cnn(grad_accum_steps=1)
    accumulated = _seed_cnn(grad_accum_steps=4)
    accumulated.set_weights(large.get_weights())
    start = large.get_weights()
    large.fit(images, labels, batch_size=64, epochs=1, shuffle=False, verbose=0)
    accumulated.fit(images[:48], labels[:48], batch_size=16, epochs=1, shuffle=False, verbose=0)
    # Three batches in: accumulated, not applied, so the weights have not moved.
    for before, now in zip(start, accumulated.get_weights(), strict=True):
        np.testing.assert_array_equal(before, now)
    accumulated.fit(images[48:], labels[48:], batch_size=16, epochs=1, shuffle=False, verbose=0)

    moved = [np.abs(a - b).max() for a, b in zip(start, large.get_weights(), strict=True)]
    assert max(moved) > 1e-4  # the update happened
    for expected, got in zip(large.get_weights(), accumulated.get_weights(), strict=True):
        np.testing.assert_allclose(got, expected, atol=1e-6)

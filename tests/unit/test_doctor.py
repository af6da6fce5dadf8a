"""`mptfx doctor` (pipelines/doctor.py): the report on this CPU machine for real, and the
GPU paths on machines described through `Facts` (devices as `DeviceDescription`s, the way
test_precision.py describes them; build info, loadable libraries and XLA results as
TensorFlow reports them)."""

from __future__ import annotations

import dataclasses
import io
import os

import pytest

from components.trainer.precision import DeviceDescription
from pipelines import doctor
from pipelines.doctor import LIBDEVICE, Facts

CPU = DeviceDescription("CPU", "/physical_device:CPU:0")
A100 = DeviceDescription("GPU", "/physical_device:GPU:0", (8, 0))
BUILD = {"is_cuda_build": True, "cuda_version": "12.3", "cudnn_version": "8",
         "cuda_compute_capabilities": ["sm_50", "sm_60", "sm_70", "sm_80", "compute_90"]}
GPU_AUTO = {"precision": "mixed_float16", "precision_reason": "GPU: compute capability 8.0",
            "xla": True, "xla_reason": "GPU: XLA on",
            "autotune_candidates": ["mixed_float16 xla off", "mixed_float16 xla on",
                                    "mixed_bfloat16 xla off", "mixed_bfloat16 xla on"]}


@pytest.fixture
def nvcc_wheel(tmp_path) -> str:
    """A folder laid out like site-packages/nvidia/cuda_nvcc."""
    os.makedirs(tmp_path / os.path.dirname(LIBDEVICE))
    (tmp_path / LIBDEVICE).write_bytes(b"BC")
    return str(tmp_path)


def _gpu_facts(nvcc_wheel: str, **changes) -> Facts:
    facts = Facts(
        devices=[CPU, A100], build=BUILD, found={"cuda": "12.3", "cudnn": "8.9.7"},
        xla={"/device:CPU:0": None, "/device:GPU:0": None},
        xla_flags=f"--xla_gpu_cuda_data_dir={nvcc_wheel}", libdevice_candidates=[nvcc_wheel],
        nvidia_device_files=True, auto=GPU_AUTO,
    )
    return dataclasses.replace(facts, **changes)


def _problems(facts: Facts) -> list[doctor.Finding]:
    return [f for f in doctor.diagnose(facts) if f.problem]


def test_this_machine_gets_a_clear_report():
    out = io.StringIO()
    code = doctor.run_doctor(out=out)
    report = out.getvalue()
    assert "CPU /physical_device:CPU:0" in report
    assert "XLA compiles on /device:CPU:0" in report
    assert "TensorFlow built with CUDA 12" in report
    assert "auto      precision" in report
    problems = report.count("PROBLEM")
    assert code == (1 if problems else 0)
    assert report.rstrip().endswith(f"{problems} problem(s) to fix" if problems
                                    else "nothing to fix")


def test_a_healthy_gpu_machine_has_nothing_to_fix(nvcc_wheel):
    facts = _gpu_facts(nvcc_wheel)
    out = io.StringIO()
    assert doctor.run_doctor(out=out, facts=facts) == 0
    report = out.getvalue()
    assert "GPU /physical_device:GPU:0, compute capability 8.0" in report
    assert "found CUDA 12.3, cuDNN 8.9.7" in report
    assert f"{nvcc_wheel}/{LIBDEVICE} (XLA_FLAGS --xla_gpu_cuda_data_dir)" in report
    assert "measures mixed_float16 xla off vs mixed_float16 xla on vs" in report


def test_xla_without_libdevice_names_the_nvcc_wheel_fix(nvcc_wheel):
    facts = _gpu_facts(
        nvcc_wheel, xla_flags="", libdevice_candidates=[],
        xla={"/device:CPU:0": None, "/device:GPU:0": "INTERNAL: libdevice not found at "
             "./libdevice.10.bc"})
    problems = _problems(facts)
    assert [p.topic for p in problems] == ["xla", "libdevice"]
    assert "XLA cannot compile on /device:GPU:0: INTERNAL: libdevice not found" in \
        problems[0].detail
    assert all("--xla_gpu_cuda_data_dir=<site-packages>/nvidia/cuda_nvcc" in p.fix
               for p in problems)
    out = io.StringIO()
    assert doctor.run_doctor(out=out, facts=facts) == 1
    assert out.getvalue().rstrip().endswith("2 problem(s) to fix")


def test_xla_flags_naming_a_folder_without_libdevice_is_a_problem(nvcc_wheel, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    problems = _problems(_gpu_facts(nvcc_wheel, xla_flags=f"--xla_gpu_cuda_data_dir={empty}"))
    assert len(problems) == 1 and str(empty) in problems[0].detail


def test_a_gpu_tensorflow_cannot_see_is_named_with_the_cuda_fix(nvcc_wheel):
    problems = _problems(_gpu_facts(nvcc_wheel, devices=[CPU], found={"cuda": None,
                                                                      "cudnn": None},
                                    xla={"/device:CPU:0": None}))
    assert len(problems) == 1
    assert "TensorFlow sees none" in problems[0].detail
    assert "tensorflow[and-cuda]" in problems[0].fix and "CUDA 12.3" in problems[0].fix


def test_a_cuda_major_version_mismatch_and_an_unsupported_gpu_are_named(nvcc_wheel):
    kepler = DeviceDescription("GPU", "/physical_device:GPU:0", (3, 7))
    problems = _problems(_gpu_facts(nvcc_wheel, devices=[CPU, kepler],
                                    found={"cuda": "11.8", "cudnn": "8.6.0"}))
    details = " | ".join(p.detail for p in problems)
    assert "CUDA 11.8 found, TensorFlow needs CUDA 12.3" in details
    assert "compute capability 3.7; this TensorFlow has no kernels for it" in details

"""`mptfx doctor`: what this machine can train with, and what to fix when it cannot.

    mptfx doctor [--json]

Reports the devices TensorFlow sees (with compute capability), the CUDA and cuDNN versions
TensorFlow was built with and the ones it finds, whether XLA compiles on each device (it
compiles a tiny function there), where libdevice is (XLA needs it to compile for NVIDIA
GPUs; with pip-installed CUDA wheels it is in the nvcc wheel, which `XLA_FLAGS=
--xla_gpu_cuda_data_dir` must point at), and what `auto` would choose and why. Exit 0
when nothing needs fixing, 1 naming each problem and its fix.

`gather_facts()` is the one place that asks the machine; `diagnose(facts)` only reads the
`Facts`, so tests describe GPU machines by building their own.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import glob
import importlib.util
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TextIO

from components.core.text import one_line

LIBDEVICE = "nvvm/libdevice/libdevice.10.bc"
_DATA_DIR_FLAG = re.compile(r"--xla_gpu_cuda_data_dir=(\S+)")
_NVCC_WHEEL_FIX = ("pip install nvidia-cuda-nvcc-cu12 and set XLA_FLAGS="
                   "--xla_gpu_cuda_data_dir=<site-packages>/nvidia/cuda_nvcc")


@dataclasses.dataclass(frozen=True)
class Facts:
    """What `diagnose` reads.

    Attributes:
        devices: `precision.describe_devices()`.
        build: `tf.sysconfig.get_build_info()` (cuda_version, cudnn_version,
            cuda_compute_capabilities, is_cuda_build).
        found: CUDA/cuDNN versions the process can load ({"cuda": "12.3", "cudnn":
            "8.9.7"}; None when not found).
        xla: device name -> None when the tiny XLA function compiled and ran there, else
            the error's first line.
        xla_flags: the XLA_FLAGS environment variable ("" when unset).
        libdevice_candidates: folders that hold `LIBDEVICE` (nvcc wheel, CUDA toolkit).
        nvidia_device_files: /dev/nvidia[0-9]* present (a GPU the driver exposes).
        auto: what `auto` resolves to: {"precision", "precision_reason", "xla",
            "xla_reason", "autotune_candidates": [...]}.
    """

    devices: Sequence[Any]
    build: Mapping[str, Any]
    found: Mapping[str, str | None]
    xla: Mapping[str, str | None]
    xla_flags: str
    libdevice_candidates: Sequence[str]
    nvidia_device_files: bool
    auto: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Finding:
    """One line of the report; a `problem` makes the exit code 1 and carries its `fix`."""

    topic: str
    detail: str
    problem: bool = False
    fix: str = ""


def libdevice_dir(xla_flags: str, candidates: Sequence[str]) -> tuple[str | None, str]:
    """The folder XLA would take libdevice from, and where that answer came from."""
    match = _DATA_DIR_FLAG.search(xla_flags or "")
    if match:
        return match.group(1), "XLA_FLAGS --xla_gpu_cuda_data_dir"
    if candidates:
        return candidates[0], "found (not named in XLA_FLAGS)"
    return None, "not found"


def diagnose(facts: Facts) -> list[Finding]:
    """The report's findings, in reading order: devices, CUDA/cuDNN, XLA, libdevice, auto."""
    findings = []
    gpus = [d for d in facts.devices if d.kind == "GPU"]
    for device in facts.devices:
        capability = (f", compute capability {device.compute_capability[0]}."
                      f"{device.compute_capability[1]}" if device.compute_capability else "")
        features = (f", {'/'.join(sorted(f.upper() for f in device.cpu_features))}"
                    if device.cpu_features else "")
        findings.append(Finding("device", f"{device.kind} {device.name}{capability}{features}"))
    built_cuda = facts.build.get("cuda_version") if facts.build.get("is_cuda_build") else None
    kernels = ", ".join(facts.build.get("cuda_compute_capabilities") or [])
    found_cuda, found_cudnn = facts.found.get("cuda"), facts.found.get("cudnn")
    findings.append(Finding("cuda", (
        f"TensorFlow built with CUDA {built_cuda}, cuDNN {facts.build.get('cudnn_version')}"
        f" (kernels for {kernels}); found CUDA {found_cuda or 'none'}, "
        f"cuDNN {found_cudnn or 'none'}"
    ) if built_cuda else "TensorFlow built without CUDA (CPU only)"))
    if not gpus and facts.nvidia_device_files:
        findings.append(Finding(
            "gpu", "the NVIDIA driver exposes a GPU (/dev/nvidia*) but TensorFlow sees none",
            problem=True,
            fix=("install the CUDA libraries TensorFlow was built with: pip install "
                 f"'tensorflow[and-cuda]' (CUDA {built_cuda or '12'}), then run mptfx doctor")))
    if gpus and built_cuda and facts.found.get("cuda") and not str(
            facts.found["cuda"]).startswith(str(built_cuda).split(".")[0]):
        findings.append(Finding(
            "cuda", f"CUDA {facts.found['cuda']} found, TensorFlow needs CUDA {built_cuda}",
            problem=True, fix=f"install CUDA {built_cuda} (pip install 'tensorflow[and-cuda]')"))
    compiled = {_sm(cc) for cc in facts.build.get("cuda_compute_capabilities") or []}
    for device in gpus:
        if device.compute_capability and compiled and _capability_number(
                device.compute_capability) < min(compiled):
            findings.append(Finding(
                "gpu", f"{device.name} has compute capability "
                f"{device.compute_capability[0]}.{device.compute_capability[1]}; this "
                "TensorFlow has no kernels for it", problem=True,
                fix="use a newer GPU or a TensorFlow build for this compute capability"))
    for name, error in facts.xla.items():
        if error is None:
            findings.append(Finding("xla", f"XLA compiles on {name}"))
            continue
        libdevice = "libdevice" in error
        findings.append(Finding(
            "xla", f"XLA cannot compile on {name}: {error}", problem=True,
            fix=(_NVCC_WHEEL_FIX if libdevice else
                 "train with --set trainer.xla=off, or fix the error above")))
    folder, origin = libdevice_dir(facts.xla_flags, facts.libdevice_candidates)
    if folder and os.path.exists(os.path.join(folder, LIBDEVICE)):
        findings.append(Finding("libdevice", f"{os.path.join(folder, LIBDEVICE)} ({origin})"))
    elif folder:
        findings.append(Finding(
            "libdevice", f"{origin} names {folder}, which has no {LIBDEVICE}", problem=True,
            fix=f"point --xla_gpu_cuda_data_dir at a folder with {LIBDEVICE} "
                f"(e.g. <site-packages>/nvidia/cuda_nvcc), or unset it"))
    elif gpus:
        findings.append(Finding("libdevice", f"no {LIBDEVICE}: XLA cannot compile for the GPU",
                                problem=True, fix=_NVCC_WHEEL_FIX))
    else:
        findings.append(Finding("libdevice", "not found (needed only to compile for GPUs)"))
    auto = facts.auto
    candidates = list(auto.get("autotune_candidates") or [])
    measured = (f"; trainer.autotune measures {' vs '.join(candidates)} on the real model "
                "and trains with the fastest" if len(candidates) > 1 else
                "; only one cell is plausible here, so autotune has nothing to measure")
    findings.append(Finding(
        "auto", f"precision {auto.get('precision')} ({auto.get('precision_reason')}); xla "
        f"{'on' if auto.get('xla') else 'off'} ({auto.get('xla_reason')}){measured}"))
    return findings


def _sm(text: str) -> int:
    digits = re.sub(r"\D", "", str(text))
    return int(digits) if digits else 0


def _capability_number(capability: tuple[int, int]) -> int:
    return capability[0] * 10 + capability[1]


def gather_facts() -> Facts:
    """Asks this machine (imports TensorFlow and compiles a tiny XLA function per device)."""
    import tensorflow as tf

    from components.trainer.autotune import candidate_cells
    from components.trainer.precision import static_auto_choice

    devices, policy, policy_reason, xla, xla_reason = static_auto_choice()
    xla_results: dict[str, str | None] = {}
    for logical in tf.config.list_logical_devices():
        if logical.device_type not in ("CPU", "GPU"):
            continue
        try:
            with tf.device(logical.name):
                value = tf.function(lambda x: x * 2.0 + 1.0, jit_compile=True)(tf.ones([4]))
            xla_results[logical.name] = None if float(value[0]) == 3.0 else "wrong result"
        except Exception as error:  # noqa: BLE001 - reported, with the fix, not raised
            xla_results[logical.name] = one_line(error, limit=300)
    return Facts(
        devices=devices,
        build=dict(tf.sysconfig.get_build_info()),
        found=_found_cuda(),
        xla=xla_results,
        xla_flags=os.environ.get("XLA_FLAGS", ""),
        libdevice_candidates=_libdevice_candidates(),
        nvidia_device_files=bool(glob.glob("/dev/nvidia[0-9]*")),
        auto={"precision": policy, "precision_reason": policy_reason, "xla": xla,
              "xla_reason": xla_reason,
              "autotune_candidates": [c.label for c in candidate_cells("auto", "auto",
                                                                         devices)]},
    )


def _found_cuda() -> dict[str, str | None]:
    """The CUDA runtime and cuDNN versions this process can load (None: not loadable)."""
    found: dict[str, str | None] = {"cuda": None, "cudnn": None}
    for library in ("libcudart.so.12", "libcudart.so"):
        try:
            version = ctypes.c_int()
            ctypes.CDLL(library).cudaRuntimeGetVersion(ctypes.byref(version))
            found["cuda"] = f"{version.value // 1000}.{version.value % 1000 // 10}"
            break
        except (OSError, AttributeError):
            continue
    for library in ("libcudnn.so.8", "libcudnn.so.9", "libcudnn.so"):
        try:
            number = ctypes.CDLL(library).cudnnGetVersion()
            major = number // 10000 if number >= 90000 else number // 1000
            rest = number % 10000 if number >= 90000 else number % 1000
            found["cudnn"] = f"{major}.{rest // 100}.{rest % 100}"
            break
        except (OSError, AttributeError):
            continue
    return found


def _libdevice_candidates() -> list[str]:
    """Folders holding libdevice: the NVIDIA nvcc wheel, then a CUDA toolkit."""
    folders = []
    try:
        spec = importlib.util.find_spec("nvidia.cuda_nvcc")
    except ModuleNotFoundError:
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        folders.append(str(location))
    folders += sorted(glob.glob("/usr/local/cuda*"))
    return [f for f in folders if os.path.exists(os.path.join(f, LIBDEVICE))]


@contextlib.contextmanager
def _quiet_native_output() -> Iterator[None]:
    """TensorFlow's C++ start-up lines (XLA service, cuInit) go to descriptors 1 and 2
    whatever TF_CPP_MIN_LOG_LEVEL says; the report itself carries every error they name.
    With `--verbose` they are shown."""
    from pipelines.console import is_verbose

    if is_verbose():
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def render(findings: Sequence[Finding]) -> str:
    """The report: one line per finding, problems marked with their fix, then a verdict."""
    lines = []
    for finding in findings:
        mark = "PROBLEM" if finding.problem else "ok"
        lines.append(f"  {mark:7s} {finding.topic:9s} {finding.detail}")
        if finding.fix:
            lines.append(f"  {'':7s} {'':9s} fix: {finding.fix}")
    problems = sum(f.problem for f in findings)
    lines.append(f"{problems} problem(s) to fix" if problems else "nothing to fix")
    return "\n".join(lines)


def run_doctor(as_json: bool = False, out: TextIO = sys.stdout,
               facts: Facts | None = None) -> int:
    """Prints the report; returns 1 when a problem was found, else 0."""
    if facts is None:
        with _quiet_native_output():
            facts = gather_facts()
    findings = diagnose(facts)
    if as_json:
        print(json.dumps([dataclasses.asdict(f) for f in findings], indent=2), file=out)
    else:
        print("mptfx doctor:\n" + render(findings), file=out)
    return 1 if any(f.problem for f in findings) else 0


def _command_doctor(args: argparse.Namespace) -> int:
    from pipelines.console import quiet_tensorflow

    quiet_tensorflow()  # before TensorFlow is imported
    return run_doctor(args.json)


def register(commands: argparse._SubParsersAction) -> None:
    """Adds `doctor` to the `mptfx` sub-commands."""
    doctor = commands.add_parser(
        "doctor",
        help="devices, CUDA/cuDNN, XLA, libdevice and what auto would choose; exit 1 "
             "naming each problem and its fix",
        description="Checks that this machine can train with mixed precision and XLA.",
    )
    doctor.add_argument("--json", action="store_true", help="print the findings as JSON")
    doctor.set_defaults(handler=_command_doctor)

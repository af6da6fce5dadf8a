"""`host`, first in every run: devices, versions, `auto`'s choice, matmul ceilings.

Its results decide the rest of the run: the device the model sizes are chosen for, the
registered models, and the ceilings MFU is measured against. Without them the run stops.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.options import BenchOptions
from benchmarks.plan import COMPUTE_DTYPES
from benchmarks.sections.base import Section, xla
from benchmarks.sections.context import Context
from benchmarks.sections.tasks import Task, arguments
from components.errors import UsageError


@dataclasses.dataclass(frozen=True)
class HostParams:
    """ceiling_repeats: timed repeats per matmul size; dtypes: the compute dtypes whose
    ceilings the run needs (float32 and those of the selected precisions)."""

    ceiling_repeats: int
    dtypes: tuple[str, ...]


def measure(params: HostParams) -> dict[str, Any]:
    from benchmarks.host import describe_host

    return describe_host(**arguments(params))


HOST = Task("host", HostParams, measure)


def choose_models(options: BenchOptions, registered: list[str],
                  user_model: str | None = None) -> list[str]:
    """--model-file's model (plus any --models), else --models, else every registered one."""
    if user_model:
        return [user_model, *choose_models(options, registered)] if options.models \
            else [user_model]
    if not options.models:
        return registered
    unknown = [name for name in options.models if name not in registered]
    if unknown:
        raise UsageError(f"unknown model(s) {unknown}; registered: {', '.join(registered)}")
    return list(options.models)


class Host(Section):
    name = "host"
    tasks = (HOST,)
    required = True

    def wanted(self, ctx: Context) -> bool:
        return True  # every run: the other sections need what it finds

    def run(self, ctx: Context) -> None:
        ctx.say("  host: devices, auto's choice, matmul ceilings ...")
        dtypes = ["float32"] + [
            COMPUTE_DTYPES[p] for p in ctx.options.precisions if COMPUTE_DTYPES[p] != "float32"
        ]
        params = HostParams(ceiling_repeats=ctx.preset.ceiling_repeats, dtypes=tuple(dtypes))
        outcome = ctx.task(HOST, params, "host", timeout=600)
        if not outcome.ok:
            ctx.say(f"  host failed: {outcome.error}")
            return
        host = outcome.result
        ctx.results["host"] = host
        ctx.device = host["device"]
        ceilings = ", ".join(
            f"{dtype} {c['gflops']:.0f} GFLOP/s ({c['size']}²)"
            for dtype, c in host["ceilings"].items()
        )
        ctx.say(f"  host: {host['cpu']['model_name']} {host['device']}; ceilings: {ceilings}; "
                f"auto: {host['auto']['precision']}, xla {host['auto']['xla']} "
                f"({outcome.seconds:.0f} s)")
        ctx.save()
        ctx.models = choose_models(ctx.options, host["models"], host.get("user_model"))

    def table(self, results: dict[str, Any]) -> list[str]:
        host = results.get("host") or {}
        if not host:
            return []
        cpu = host.get("cpu") or {}
        devices = ", ".join(
            d["name"] + (f" (cc {d['compute_capability'][0]}.{d['compute_capability'][1]})"
                         if d.get("compute_capability") else "")
            for d in host.get("devices", [])
        )
        ceilings = "; ".join(
            f"{dtype} {c['gflops']:.0f} GFLOP/s at {c['size']}²"
            for dtype, c in host.get("ceilings", {}).items()
        )
        return [
            f"Host: {cpu.get('model_name')}, {cpu.get('logical_cpus')} logical CPUs, flags "
            f"{', '.join(cpu.get('flags', [])) or 'none of interest'}; devices: {devices}; "
            f"TensorFlow {host.get('tensorflow')}, Keras {host.get('keras')}.",
            "",
            f"Matmul ceiling (best median over square sizes): {ceilings}.",
            "",
            f"`auto` on this machine: precision {host['auto']['precision']} "
            f"({host['auto']['precision_reason']}), XLA {xla(host['auto']['xla'])} "
            f"({host['auto']['xla_reason']}).",
            "",
        ]


SECTION = Host()

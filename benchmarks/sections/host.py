"""`host`, first in every run: devices, CPU flags, versions, `auto`'s static rule.

Its results decide the rest of the run: the device the model sizes are chosen for and the
registered models. Without them the run stops. (The lab's `mfu` section measures the
matmul ceilings: tools/lab/.)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks.options import BenchOptions
from benchmarks.sections.base import Section, xla
from benchmarks.sections.context import Context
from benchmarks.sections.tasks import Task, arguments
from components.errors import UsageError


@dataclasses.dataclass(frozen=True)
class HostParams:
    """Nothing to choose: the host is described as it is."""


def measure(params: HostParams) -> dict[str, Any]:
    from benchmarks.measures.host import describe_host

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
    selectable = False

    def wanted(self, ctx: Context) -> bool:
        return True  # every run: the other sections need what it finds

    def run(self, ctx: Context) -> None:
        ctx.say("  host: devices, CPU flags, auto's static rule ...")
        outcome = ctx.task(HOST, HostParams(), "host", timeout=600)
        if not outcome.ok:
            ctx.say(f"  host failed: {outcome.error}")
            return
        host = outcome.result
        ctx.results["host"] = host
        ctx.device = host["device"]
        ctx.say(f"  host: {host['cpu']['model_name']} {host['device']}; auto's static rule: "
                f"{host['auto']['precision']}, xla {xla(host['auto']['xla'])} "
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
        return [
            f"Host: {cpu.get('model_name')}, {cpu.get('logical_cpus')} logical CPUs, flags "
            f"{', '.join(cpu.get('flags', [])) or 'none of interest'}; devices: {devices}; "
            f"TensorFlow {host.get('tensorflow')}, Keras {host.get('keras')}.",
            "",
            f"`auto`'s static rule on this machine (where `trainer.autotune: off` stays; "
            f"with autotune on the Trainer measures, see the auto check): precision "
            f"{host['auto']['precision']} ({host['auto']['precision_reason']}), XLA "
            f"{xla(host['auto']['xla'])} ({host['auto']['xla_reason']}).",
            "",
        ]


SECTION = Host()

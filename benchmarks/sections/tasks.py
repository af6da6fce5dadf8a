"""A worker task: its name, its parameters (a frozen dataclass) and its measure.

The runner sends `to_json(params)` to a fresh process (benchmarks/launch.py);
benchmarks/worker.py rebuilds the dataclass with `from_json` and calls the task's
`measure` with it. A parameter is named once, as a field of its dataclass: the measures
pass `arguments(params)` as the keyword arguments of the measuring function, whose
parameters carry the same names.

Example:

    @dataclasses.dataclass(frozen=True)
    class HostParams:
        ceiling_repeats: int

    def measure(params):
        from benchmarks.measures.host import describe_host
        return describe_host(**arguments(params))

    HOST = Task("host", HostParams, measure)
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Task:
    """One kind of worker process.

    Attributes:
        name: the task's name on the worker's command line (unique over all sections).
        params: its frozen parameters dataclass.
        measure: runs in the worker: takes a `params` instance, returns a JSON-able dict.
            It imports what it measures with (TensorFlow) inside, so that the runner,
            which never imports TensorFlow, can import the section.
    """

    name: str
    params: type
    measure: Callable[[Any], dict[str, Any]]


def to_json(params: Any) -> dict[str, Any]:
    """The task's parameters as the JSON object its worker receives."""
    return dataclasses.asdict(params)


def from_json(kind: type, values: Mapping[str, Any]) -> Any:
    """`kind` rebuilt from `to_json`'s object: nested dataclasses rebuilt, JSON lists
    made tuples where the field is a tuple; an unknown or missing key raises TypeError."""
    hints = typing.get_type_hints(kind)
    rebuilt = {}
    for name, value in values.items():
        hint = hints.get(name)
        if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
            value = from_json(hint, value)
        elif isinstance(value, list) and _is_tuple(hint):
            value = _tuples(value)
        rebuilt[name] = value
    return kind(**rebuilt)


def arguments(params: Any) -> dict[str, Any]:
    """The dataclass's fields as keyword arguments (nested dataclasses left as they are)."""
    return {field.name: getattr(params, field.name) for field in dataclasses.fields(params)}


def _is_tuple(hint: Any) -> bool:
    """`tuple[...]`, or a union with one (`tuple[int, ...] | None`)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_is_tuple(member) for member in typing.get_args(hint))
    return origin is tuple


def _tuples(value: Any) -> Any:
    return tuple(_tuples(item) for item in value) if isinstance(value, list) else value

"""A stand-in torch backend: the porting dry-run of a new device, in Python only.

A hardware team bringing torch to a new chip registers its kernels under the
PrivateUse1 dispatch key. This module plays that backend: it renames PrivateUse1
to ``standin`` and registers one boxed fallback for the key through
``torch.library``, so that *every* op torch routes to the new backend lands in it.
The fallback records the op (name and overload) and computes it with torch's CPU
kernels on CPU tensors that back each stand-in tensor, so a probe runs forward and
backward to the end. What it recorded is exactly what a real backend's kernels
would have to cover on that path, including what torch routes only to new
backends (``_convolution`` -> ``convolution_overrideable``).

The device itself (PrivateUse1 renamed, CPU twins of its storages, results made
device tensors again) is tracer/probes/torch_device.py's, the same file ``dltrace
scaffold torch`` copies into a backend skeleton: what the stand-in adds is the one
fallback that records.

Imported only inside torch's environment (tracer/probes/torch.py, for ``--device standin``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from tracer.contract import STANDIN_LIB
from tracer.probes import torch_device

if TYPE_CHECKING:  # the annotations only (op_record and _prune import base when called)
    from tracer.probes.base import OpRecord
    from tracer.trace import Node

NAME = "standin"
_CPU_SCOPE = "standin::cpu"  # profiler scope around the CPU computation (pruned from the op layer)

_lib: torch.library.Library | None = None
_kernels: list[torch.library.Library] = []  # the kernels registered by name (kept alive)


class Recorder:
    """The ops that reached the backend since :meth:`start`, in call order."""

    def __init__(self) -> None:
        self.ops: list[str] = []
        self.active = False

    def start(self) -> None:
        self.ops, self.active = [], True

    def stop(self) -> list[str]:
        self.active = False
        return self.ops


RECORDER = Recorder()


def install() -> torch.device:
    """Register the stand-in backend once per process (PrivateUse1 can be renamed
    only once) and return its device."""
    global _lib
    if _lib is None:
        dev = torch_device.install(NAME)
        _lib = torch.library.Library("_", "IMPL")
        _lib.fallback(_fallback, "PrivateUse1")
        by_name = torch.library.Library("aten", "IMPL")
        for name in torch_device.ONLY_NEW_BACKENDS:  # a fallback never sees these
            op = getattr(torch.ops.aten, name).default
            by_name.impl(name, lambda *a, _op=op, **k: _fallback(_op, *a, **k), "PrivateUse1")
        _kernels.append(by_name)
        return dev
    return torch.device(NAME, 0)


def _fallback(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    """The backend's one kernel: every op without a PrivateUse1 kernel of its own."""
    if RECORDER.active:  # the CPU kernels below never dispatch back here: no nesting
        RECORDER.ops.append(op.name())
    with torch.profiler.record_function(_CPU_SCOPE):
        return torch_device.on_cpu(op, args, kwargs)


def describe() -> dict[str, Any]:
    """What the trace's meta says of the stand-in: never a GPU, a run on this CPU."""
    return {"evidence": "run on the stand-in device",
            "unit": "ops that reached the stand-in backend's dispatch key (PrivateUse1)",
            "backend": f"PrivateUse1 renamed '{NAME}': a Python boxed fallback (torch.library) that records each op "
                       "reaching the backend and computes it with torch's CPU kernels",
            "registered_by_name": [f"aten::{n}" for n in torch_device.ONLY_NEW_BACKENDS],
            "reached": {}}


def op_record(events: Any, reached: list[str]) -> OpRecord:
    """The op layer of a stand-in step: torch.profiler's op hierarchy down to the ops
    that reached the backend, which are its leaves (lib ``STANDIN_LIB``), named with
    their overload as the backend got them (``reached``, in call order: the profiler
    names ``aten::empty`` what the backend got as ``aten::empty.memory_format``); the
    CPU computation under them (the ``standin::cpu`` scope) is the stand-in's, not torch's."""
    from tracer.probes import base

    evs = [base.OpEvent(e.name, e.time_range.start, e.time_range.end,
                        "aten" if e.name.startswith("aten::") else "torch", "", e.thread)
           for e in events if e.device_type.name == "CPU"]
    return base.OpRecord(_prune(base.nest(evs, scale_ns=1000.0), list(reached)), "torch.profiler (stand-in backend)")


def _overload(name: str, count: int, left: list[str]) -> str:
    """The overload the backend got for a profiler node of ``count`` calls named
    ``name``: the first record left with that base name (the records are consumed)."""
    got = next((r for r in left if r.split(".", 1)[0] == name), name)
    for _ in range(count):
        if got in left:
            left.remove(got)
    return got


def _prune(nodes: list[Node], left: list[str]) -> list[Node]:
    """Drop the stand-in's own CPU work; mark and name the ops that reached it."""
    from tracer.probes import base

    out = []
    for n in nodes:
        if n.frame.name == _CPU_SCOPE:
            continue
        name, lib = n.frame.name, n.frame.lib
        if any(c.frame.name == _CPU_SCOPE for c in n.children):
            name, lib = _overload(name, n.count, left), STANDIN_LIB
        out.append(base.op_node(name, n.frame.module, lib, n.count, n.time_ns, _prune(n.children, left)))
    return out

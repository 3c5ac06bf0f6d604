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

Why no C++: torch 2.13 lets a Python process stand in for a backend
(``torch.utils.backend_registration._setup_privateuseone_for_python_backend``:
device guard, hooks and device module) and makes empty PrivateUse1 tensors
(``torch._C._acc.create_empty_tensor``); their sizes, strides and storage are set
by torch's own ``set_`` kernel for meta tensors (redispatched: it only sets metadata
and the storage's size, allocating nothing).
Each stand-in storage has a CPU twin of the same size; a stand-in tensor's values
are its twin seen through the stand-in tensor's own sizes, strides and offset, so
views (including those torch makes itself) line up.

Imported only inside torch's environment (tracer/probes/torch.py, for ``--device standin``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from tracer.contract import STANDIN_LIB

if TYPE_CHECKING:  # the annotations only (op_record and _prune import base when called)
    from tracer.probes.base import OpRecord
    from tracer.trace import Node

NAME = "standin"
_META_KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
#: stand-in storage (its StorageImpl's address) -> (a weak reference to it, the CPU
#: storage that holds its bytes). Keyed by storage, not tensor: torch's own view
#: kernels (detach, alias) make new tensors on the same storage without asking the
#: backend. An address freed and reused gets its new twin when the backend makes the
#: new storage; the twins of storages that died are dropped as new ones are made.
_STORAGES: dict[int, tuple[Any, torch.UntypedStorage]] = {}
_sweep_at = [256]  # sweep the dead twins when this many are kept
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
        from torch.utils import backend_registration

        setup = getattr(backend_registration, "_setup_privateuseone_for_python_backend", None)
        if setup is None or not hasattr(torch._C, "_acc"):  # torch 2.9 has neither
            raise RuntimeError(f"torch {torch.__version__} cannot stand in for a backend from Python "
                               "(no torch.utils.backend_registration._setup_privateuseone_for_python_backend)")
        setup(NAME)
        _lib = torch.library.Library("_", "IMPL")
        _lib.fallback(_fallback, "PrivateUse1")
        by_name = torch.library.Library("aten", "IMPL")
        for name in _ONLY_NEW_BACKENDS:  # a fallback never sees these (see _ONLY_NEW_BACKENDS)
            op = getattr(torch.ops.aten, name).default
            by_name.impl(name, lambda *a, _op=op, **k: _fallback(_op, *a, **k), "PrivateUse1")
        _kernels.append(by_name)
    return torch.device(NAME, 0)


def twin(t: torch.Tensor) -> torch.Tensor:
    """The CPU tensor that holds a stand-in tensor's values: its storage's CPU twin,
    seen through the stand-in tensor's own sizes, strides and offset."""
    store = _STORAGES.get(t.untyped_storage()._cdata, (None, None))[1]
    if store is None:
        raise RuntimeError(f"a {NAME} tensor without CPU storage (made outside the stand-in backend)")
    return torch.empty(0, dtype=t.dtype).set_(store, t.storage_offset(), t.size(), t.stride())


def _wrap(cpu: torch.Tensor, base: torch.Tensor | None = None) -> torch.Tensor:
    """A stand-in tensor with ``cpu``'s sizes, strides and offset; ``base``: the
    stand-in tensor whose storage it views (None: a fresh storage, twin of cpu's)."""
    out = torch._C._acc.create_empty_tensor((0,), cpu.dtype)
    storage = (out if base is None else base).untyped_storage()
    torch.ops.aten.set_.source_Storage_storage_offset.redispatch(_META_KEYSET, out, storage, cpu.storage_offset(),
                                                                 cpu.size(), cpu.stride())
    if base is None:
        _remember(storage, cpu.untyped_storage())
    return out


def _remember(standin: torch.UntypedStorage, cpu: torch.UntypedStorage) -> None:
    from torch.multiprocessing.reductions import StorageWeakRef

    _STORAGES[standin._cdata] = (StorageWeakRef(standin), cpu)
    if len(_STORAGES) >= _sweep_at[0]:
        for key in [k for k, (ref, _) in _STORAGES.items() if ref.expired()]:
            del _STORAGES[key]
        _sweep_at[0] = max(256, 2 * len(_STORAGES))


def _is_standin(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == NAME


def _to_cpu(x: Any) -> Any:
    if _is_standin(x):
        return twin(x)
    if isinstance(x, torch.device) and x.type == NAME:
        return torch.device("cpu")
    if isinstance(x, (list, tuple)):
        return type(x)(_to_cpu(v) for v in x)
    return x


def _aliased_input(op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any],
                   i: int) -> tuple[Any, bool] | None:
    """(the stand-in input that output ``i`` aliases, whether the op writes it), from
    the op's schema: in-place and out= ops return their argument, views share its storage."""
    ret = op._schema.returns[i]
    if ret.alias_info is None:
        return None
    for j, arg in enumerate(op._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.before_set == ret.alias_info.before_set:
            value = kwargs[arg.name] if arg.name in kwargs else args[j] if j < len(args) else None
            return value, bool(ret.alias_info.is_write)
    return None


def _result(op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], cpu_out: Any) -> Any:
    """Stand-in results for the CPU results: written arguments are returned as
    themselves, views as views of their stand-in base, the rest as fresh tensors."""
    outs = cpu_out if isinstance(cpu_out, tuple) else (cpu_out,)
    wrapped = []
    for i, c in enumerate(outs):
        alias = _aliased_input(op, args, kwargs, i) if i < len(op._schema.returns) else None
        if isinstance(c, torch.Tensor):
            if alias is not None and _is_standin(alias[0]):
                wrapped.append(alias[0] if alias[1] else _wrap(c, alias[0]))
            else:
                wrapped.append(_wrap(c))
        elif isinstance(c, list):
            wrapped.append([_wrap(v) if isinstance(v, torch.Tensor) else v for v in c])
        else:
            wrapped.append(c)
    return tuple(wrapped) if isinstance(cpu_out, tuple) else wrapped[0]


def _copy_from(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
    """``_copy_from(self, dst)``: torch's ``copy_`` hands a copy that involves a new
    backend to it (host to device, device to host, device to device)."""
    src, dst = args[0], args[1] if len(args) > 1 else kwargs["dst"]
    target = twin(dst) if _is_standin(dst) else dst
    target.copy_(twin(src) if _is_standin(src) else src)
    return dst


def _conv_backward(grad: torch.Tensor, x: torch.Tensor, w: torch.Tensor, stride: list[int], padding: list[int],
                   dilation: list[int], transposed: bool, output_padding: list[int], groups: int,
                   mask: list[bool]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``convolution_backward_overrideable`` is convolution_backward without the
    bias sizes (a new backend's gradient of the bias is its own business)."""
    bias_sizes = [w.shape[1] * groups if transposed else w.shape[0]]
    # (grad_input, grad_weight, grad_bias); torch is Any to mypy (not installed where it runs)
    grads: tuple[torch.Tensor, torch.Tensor, torch.Tensor] = torch.ops.aten.convolution_backward.default(
        grad, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, mask)
    return grads


#: Ops torch routes only to new backends. Their only kernel is a
#: CompositeExplicitAutograd one that raises "not implemented", so they never reach a
#: fallback: a backend registers them by name (the stand-in does, below), and the
#: stand-in computes them with the op CPU and CUDA run at the same place.
_ONLY_NEW_BACKENDS = {
    "convolution_overrideable": torch.ops.aten.convolution.default,
    "convolution_backward_overrideable": _conv_backward,
}


def _fallback(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    """The backend's one kernel: every op without a PrivateUse1 kernel of its own."""
    if RECORDER.active:  # the CPU kernels below never dispatch back here: no nesting
        RECORDER.ops.append(op.name())
    with torch.profiler.record_function(_CPU_SCOPE):
        if op.name() in ("aten::_copy_from", "aten::_copy_from_and_resize"):
            return _copy_from(args, kwargs)
        cpu_op = _ONLY_NEW_BACKENDS.get(op._schema.name.split("::")[-1], op)
        cpu_out = cpu_op(*_to_cpu(args), **{k: _to_cpu(v) for k, v in kwargs.items()})
        return _result(op, args, kwargs, cpu_out)


def describe() -> dict[str, Any]:
    """What the trace's meta says of the stand-in: never a GPU, a run on this CPU."""
    return {"evidence": "run on the stand-in device",
            "backend": f"PrivateUse1 renamed '{NAME}': a Python boxed fallback (torch.library) that records each op "
                       "reaching the backend and computes it with torch's CPU kernels",
            "registered_by_name": [f"aten::{n}" for n in _ONLY_NEW_BACKENDS],
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

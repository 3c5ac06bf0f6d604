"""A new torch device played in Python on this CPU: the plumbing under a PrivateUse1 backend.

A hardware team bringing torch to a new chip registers its kernels under the
PrivateUse1 dispatch key. What every such backend needs besides its kernels is here,
once: renaming PrivateUse1 (:func:`install`), tensors of the device whose values live
in CPU storage (:func:`twin`), and computing an op with torch's CPU kernels on those
values, its results made tensors of the device again (:func:`on_cpu`). dltrace's
stand-in backend (tracer/probes/torch_standin.py) records every op that reaches it
and computes it here; ``dltrace scaffold torch`` copies this file verbatim into the
backend skeleton it writes (``device.py``), whose kernels start as calls of
:func:`on_cpu` for a porting team to replace one by one.

Why no C++: torch 2.13 lets a Python process stand in for a backend
(``torch.utils.backend_registration._setup_privateuseone_for_python_backend``:
device guard, hooks and device module) and makes empty PrivateUse1 tensors
(``torch._C._acc.create_empty_tensor``); their sizes, strides and storage are set
by torch's own ``set_`` kernel for meta tensors (redispatched: it only sets metadata
and the storage's size, allocating nothing).
Each device storage has a CPU twin of the same size; a device tensor's values are
its twin seen through the device tensor's own sizes, strides and offset, so views
(including those torch makes itself) line up.

Imports torch alone (no dltrace module): it must run where it is copied to.
"""

from __future__ import annotations

from typing import Any

import torch

_META_KEYSET = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)
#: device storage (its StorageImpl's address) -> (a weak reference to it, the CPU
#: storage that holds its bytes). Keyed by storage, not tensor: torch's own view
#: kernels (detach, alias) make new tensors on the same storage without asking the
#: backend. An address freed and reused gets its new twin when the backend makes the
#: new storage; the twins of storages that died are dropped as new ones are made.
_STORAGES: dict[int, tuple[Any, torch.UntypedStorage]] = {}
_sweep_at = [256]  # sweep the dead twins when this many are kept


def install(name: str) -> torch.device:
    """Rename PrivateUse1 to ``name`` and set up its device guard, hooks and module:
    once per process (torch renames PrivateUse1 only once); returns the device."""
    if torch._C._get_privateuse1_backend_name() == name:
        return torch.device(name, 0)
    from torch.utils import backend_registration

    setup = getattr(backend_registration, "_setup_privateuseone_for_python_backend", None)
    if setup is None or not hasattr(torch._C, "_acc"):  # torch 2.9 has neither
        raise RuntimeError(f"torch {torch.__version__} cannot stand in for a backend from Python "
                           "(no torch.utils.backend_registration._setup_privateuseone_for_python_backend)")
    setup(name)
    return torch.device(name, 0)


def _ours(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == torch._C._get_privateuse1_backend_name()


def twin(t: torch.Tensor) -> torch.Tensor:
    """The CPU tensor that holds a device tensor's values: its storage's CPU twin,
    seen through the device tensor's own sizes, strides and offset."""
    store = _STORAGES.get(t.untyped_storage()._cdata, (None, None))[1]
    if store is None:
        raise RuntimeError(f"a {t.device.type} tensor without CPU storage (made outside this backend)")
    return torch.empty(0, dtype=t.dtype).set_(store, t.storage_offset(), t.size(), t.stride())


def wrap(cpu: torch.Tensor, base: torch.Tensor | None = None) -> torch.Tensor:
    """A device tensor with ``cpu``'s sizes, strides and offset; ``base``: the device
    tensor whose storage it views (None: a fresh storage, twin of cpu's)."""
    out = torch._C._acc.create_empty_tensor((0,), cpu.dtype)
    storage = (out if base is None else base).untyped_storage()
    torch.ops.aten.set_.source_Storage_storage_offset.redispatch(_META_KEYSET, out, storage, cpu.storage_offset(),
                                                                 cpu.size(), cpu.stride())
    if base is None:
        _remember(storage, cpu.untyped_storage())
    return out


def _remember(device: torch.UntypedStorage, cpu: torch.UntypedStorage) -> None:
    from torch.multiprocessing.reductions import StorageWeakRef

    _STORAGES[device._cdata] = (StorageWeakRef(device), cpu)
    if len(_STORAGES) >= _sweep_at[0]:
        for key in [k for k, (ref, _) in _STORAGES.items() if ref.expired()]:
            del _STORAGES[key]
        _sweep_at[0] = max(256, 2 * len(_STORAGES))


def to_cpu(x: Any) -> Any:
    """``x`` with every device tensor replaced by its twin and the device by the CPU."""
    if _ours(x):
        return twin(x)
    if isinstance(x, torch.device) and x.type == torch._C._get_privateuse1_backend_name():
        return torch.device("cpu")
    if isinstance(x, (list, tuple)):
        return type(x)(to_cpu(v) for v in x)
    return x


def _aliased_input(op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any],
                   i: int) -> tuple[Any, bool] | None:
    """(the device input that output ``i`` aliases, whether the op writes it), from
    the op's schema: in-place and out= ops return their argument, views share its storage."""
    ret = op._schema.returns[i]
    if ret.alias_info is None:
        return None
    for j, arg in enumerate(op._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.before_set == ret.alias_info.before_set:
            value = kwargs[arg.name] if arg.name in kwargs else args[j] if j < len(args) else None
            return value, bool(ret.alias_info.is_write)
    return None


def results(op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], cpu_out: Any) -> Any:
    """Device results for the CPU results of ``op``: written arguments are returned as
    themselves, views as views of their device base, the rest as fresh tensors."""
    outs = cpu_out if isinstance(cpu_out, tuple) else (cpu_out,)
    wrapped = []
    for i, c in enumerate(outs):
        alias = _aliased_input(op, args, kwargs, i) if i < len(op._schema.returns) else None
        if isinstance(c, torch.Tensor):
            if alias is not None and _ours(alias[0]):
                wrapped.append(alias[0] if alias[1] else wrap(c, alias[0]))
            else:
                wrapped.append(wrap(c))
        elif isinstance(c, list):
            wrapped.append([wrap(v) if isinstance(v, torch.Tensor) else v for v in c])
        else:
            wrapped.append(c)
    return tuple(wrapped) if isinstance(cpu_out, tuple) else wrapped[0]


def _copy_from(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
    """``_copy_from(self, dst)``: torch's ``copy_`` hands a copy that involves a new
    backend to it (host to device, device to host, device to device)."""
    src, dst = args[0], args[1] if len(args) > 1 else kwargs["dst"]
    target = twin(dst) if _ours(dst) else dst
    target.copy_(twin(src) if _ours(src) else src)
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


#: Ops torch routes only to new backends, with what CPU runs at the same place. Their
#: only kernel is a CompositeExplicitAutograd one that raises "not implemented", so
#: they never reach a fallback: a backend registers them by name.
ONLY_NEW_BACKENDS = {
    "convolution_overrideable": torch.ops.aten.convolution.default,
    "convolution_backward_overrideable": _conv_backward,
}


def on_cpu(op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``op`` computed with torch's CPU kernels on the twins of its device arguments;
    its results are device tensors (the arguments it writes, views of those it views)."""
    if op.name() in ("aten::_copy_from", "aten::_copy_from_and_resize"):
        return _copy_from(args, kwargs)
    cpu_op = ONLY_NEW_BACKENDS.get(op._schema.name.split("::")[-1], op)
    cpu_out = cpu_op(*to_cpu(args), **{k: to_cpu(v) for k, v in kwargs.items()})
    return results(op, args, kwargs, cpu_out)

"""What a new backend must provide for a primitive, from the framework's own dispatch
tables as the probe recorded them (a trace's ``meta["dispatch"]``; torch: which
dispatch keys have a kernel, and native_functions.yaml's declared kernels).

A trace shows the ops one path reached; the tables say which of them a new backend
(torch's out-of-tree key, PrivateUse1; a TensorFlow PluggableDevice) has to write:
an op that decomposes into others (CompositeImplicitAutograd) or has a
backend-agnostic kernel (CompositeExplicitAutograd, TensorFlow's DEFAULT) it gets
for free; an op whose kernels are per backend (CPU, CUDA...) it must implement, and
for a structured op that is its ``.out`` overload. For each, the kernels CUDA and
the other backends use there (TensorFlow: the oneDNN op it is rewritten to). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracer.knowledge import knowledge
from tracer.trace import Trace

#: The backends whose declared kernels are shown beside a new backend's needs.
OTHER_BACKENDS = ("CPU", "CUDA", "MPS", "XPU", "MkldnnCPU", "GPU", "oneDNN")
_COMPOSITE = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


@dataclass
class BackendNeeds:
    key: str  # the dispatch key a new backend registers under
    must_implement: list[str] = field(default_factory=list)  # kernel ops first, then allocation and view ops
    free: list[tuple[str, str]] = field(default_factory=list)  # (op, why: decomposes / backend-agnostic kernel)
    others: dict[str, dict[str, str]] = field(default_factory=dict)  # op -> backend -> its kernel


def _row_needs(op: str, row: dict[str, Any]) -> tuple[str | None, str]:
    """(the op a new backend must implement, or None) and why it need not."""
    kernels = row.get("kernels") or []
    if "CompositeImplicitAutograd" in kernels:
        return None, "decomposes into other ops"
    delegate = row.get("delegate")
    if delegate:  # structured: computed by its .out overload
        if any(k in (row.get("delegate_declared") or {}) for k in _COMPOSITE):
            return None, f"its {delegate} has a backend-agnostic kernel"
        return f"aten::{delegate}", ""
    if row.get("new_backend"):
        return None, "backend-agnostic kernel" if "DEFAULT" not in kernels else "a kernel for any device (DEFAULT)"
    return op, ""


def backend_needs(traces: list[Trace]) -> BackendNeeds | None:
    """The needs over ``traces`` (a primitive's passes and API levels), or None when
    none of them recorded its framework's dispatch table."""
    tables = [t.meta.get("dispatch") for t in traces]
    tables = [d for d in tables if isinstance(d, dict) and isinstance(d.get("ops"), dict)]
    if not tables:
        return None
    out = BackendNeeds(str(tables[0].get("new_backend_key", "")))
    utility: list[str] = []
    for table in tables:
        for op, row in table["ops"].items():
            if not isinstance(row, dict):
                continue
            need, why = _row_needs(op, row)
            if need is None:
                if (op, why) not in out.free:
                    out.free.append((op, why))
                continue
            target = utility if knowledge().is_utility_op(op) else out.must_implement
            if need not in target:
                target.append(need)
            declared = row.get("delegate_declared") if row.get("delegate") else row.get("declared")
            others = {k: v for k, v in (declared or {}).items() if k in OTHER_BACKENDS}
            if others:
                out.others[need] = others
    out.must_implement += [u for u in utility if u not in out.must_implement]
    return out

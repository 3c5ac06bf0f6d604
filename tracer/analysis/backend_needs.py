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

from tracer.evidence_classes import DERIVED_EVIDENCE
from tracer.knowledge import Knowledge
from tracer.processing.tags import library_of
from tracer.trace import Frame, Node, Trace, op_namespace

_COMPOSITE = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


@dataclass
class BackendNeeds:
    key: str  # the dispatch key a new backend registers under
    must_implement: list[str] = field(default_factory=list)  # kernel ops first, then allocation and view ops
    free: list[tuple[str, str]] = field(default_factory=list)  # (op, why: decomposes / backend-agnostic kernel)
    others: dict[str, dict[str, str]] = field(default_factory=dict)  # op -> backend -> its kernel
    #: ops of a CPU library (torch's mkldnn_convolution: oneDNN CPU code) the CPU path reached: neither
    #: implemented by a new backend nor free to it, since its path never reaches them
    cpu_library: list[str] = field(default_factory=list)


def is_cpu_library_op(op: str, k: Knowledge) -> bool:
    """An op named for a library that computes on the CPU (libraries.yaml ``groups.cpu``:
    ``aten::mkldnn_convolution``, ``_MklNativeConv2D``)."""
    return library_of(Frame("op", "", op), k) in k.libraries.cpu


def _row_needs(op: str, row: dict[str, Any]) -> tuple[str | None, str]:
    """(the op a new backend must implement, or None) and why it need not. A row the
    probe has judged itself (``must``, ``implement``, ``free``: the schema of derived
    GPU evidence) is taken as written, so that a framework whose tables use neither
    torch's dispatch keys nor TensorFlow's device types needs nothing here."""
    if isinstance(row.get("must"), bool):
        if not row["must"]:
            return None, str(row.get("free") or "")
        implement = row.get("implement")
        return (str(implement[0]) if isinstance(implement, list) and implement else op), ""
    kernels = row.get("kernels") or []
    if "CompositeImplicitAutograd" in kernels:
        return None, "decomposes into other ops"
    delegate = row.get("delegate")
    if delegate:  # structured: computed by its .out overload
        if any(k in (row.get("delegate_declared") or {}) for k in _COMPOSITE):
            return None, f"its {delegate} has a backend-agnostic kernel"
        namespace = op_namespace(op)  # aten::add -> aten::add.out
        return f"{namespace}::{delegate}" if namespace else delegate, ""
    if row.get("new_backend"):
        return None, "backend-agnostic kernel" if "DEFAULT" not in kernels else "a kernel for any device (DEFAULT)"
    return op, ""


def backend_needs(traces: list[Trace], k: Knowledge) -> BackendNeeds | None:
    """The needs over ``traces`` (a primitive's passes and API levels), or None when
    none of them recorded its framework's dispatch table. The declared kernels shown are
    those of libraries.yaml's ``other_backends``."""
    other_backends = k.libraries.other_backends
    tables = [d for d in (t.info.dispatch for t in traces) if d is not None and d.ops is not None]
    if not tables:
        return None
    out = BackendNeeds(tables[0].new_backend_key)
    utility: list[str] = []
    for table in tables:
        for op, row in (table.ops or {}).items():
            if not isinstance(row, dict):
                continue
            if is_cpu_library_op(op, k):
                if op not in out.cpu_library:
                    out.cpu_library.append(op)
                continue
            need, why = _row_needs(op, row)
            if need is None:
                if (op, why) not in out.free:
                    out.free.append((op, why))
                continue
            target = utility if k.is_utility_op(op) else out.must_implement
            if need not in target:
                target.append(need)
            if isinstance(row.get("must"), bool):  # judged by the probe: its other backends as it names them
                others = {str(k): str(v) for k, v in (row.get("others") or {}).items()}
            else:
                declared = row.get("delegate_declared") if row.get("delegate") else row.get("declared")
                others = {k: v for k, v in (declared or {}).items() if k in other_backends}
            if others:
                out.others[need] = others
    out.must_implement += [u for u in utility if u not in out.must_implement]
    # one table's free op is another's must (a delegate computed in one pass, called in the
    # other): a backend that must write it does not also get it free
    out.free = [(op, why) for op, why in out.free if op not in out.must_implement]
    return out


# ----------------------------------------------------------------------------- per pass, from GPU evidence


@dataclass
class PassNeeds:
    """What a new backend must provide for one primitive and pass, from one evidence
    class: ``must_implement`` (kernel ops first, then allocation and view ops), what
    it gets for free and why, and what the GPU build uses there (op -> backend -> kernel)."""

    primitive: str
    pass_: str
    evidence: str  # registered / lowered / compiled / source / recorded (the CPU op layer)
    provenance: str  # what was read
    key: str  # what a new backend registers as
    must_implement: list[str] = field(default_factory=list)
    free: list[tuple[str, str]] = field(default_factory=list)
    others: dict[str, dict[str, str]] = field(default_factory=dict)


def _derived(trace: Trace) -> bool:
    return trace.info.evidence in DERIVED_EVIDENCE and trace.info.backend is not None


def _add(out: PassNeeds, utility: list[str], names: list[str], k: Knowledge) -> None:
    for name in names:
        target = utility if k.is_utility_op(name) else out.must_implement
        if name not in target:
            target.append(name)


def pass_needs(traces: list[Trace], k: Knowledge) -> list[PassNeeds]:
    """Per pass, what a new backend must implement for a primitive, from each derived
    GPU-evidence trace among ``traces`` (its meta ``backend``: op -> must, implement,
    free, others), merged over API levels: one PassNeeds per (evidence, pass)."""
    found: dict[tuple[str, str], tuple[PassNeeds, list[str]]] = {}
    for t in traces:
        if not _derived(t):
            continue
        backend = t.info.backend
        assert backend is not None  # _derived(t)
        tables = backend.passes
        read = t.info.provenance.read if t.info.provenance is not None else ""
        for run in t.runs:
            root = run.layers.get("op")
            if root is None:
                continue
            key = (t.info.evidence, run.pass_)
            if key not in found:
                found[key] = (PassNeeds(t.info.primitive, run.pass_, key[0], read, backend.key), [])
            out, utility = found[key]
            table = tables.get(run.pass_) or backend.ops
            for node in root.children:
                op = node.frame.name
                row = table.get(op) if isinstance(table, dict) else None
                if not isinstance(row, dict):
                    continue
                if isinstance(row.get("dispatch_row"), dict):  # a dispatch-table row: read as backend_needs does
                    need, why = _row_needs(op, row["dispatch_row"])
                    row = {**row, "must": need is not None, "implement": [need] if need else [], "free": why}
                if row.get("must"):
                    names = [str(n) for n in (row.get("implement") or [op])]
                    _add(out, utility, names, k)
                    others = row.get("others")
                    if isinstance(others, dict) and others:
                        for n in names:
                            out.others.setdefault(n, {}).update({str(k): str(v) for k, v in others.items()})
                elif (op, str(row.get("free", ""))) not in out.free:
                    out.free.append((op, str(row.get("free", ""))))
    for out, utility in found.values():
        out.must_implement += [u for u in utility if u not in out.must_implement]
    order = {p: i for i, p in enumerate(("forward", "backward"))}
    return [o for o, _ in sorted(found.values(), key=lambda v: (v[0].evidence, order.get(v[0].pass_, 9)))]


def _operators(nodes: list[Node], k: Knowledge) -> list[str]:
    """The top operators of an op layer: a utility record with operators below it (MXNet's
    ImperativeBulk, the engine's bulk of a backward) is looked through."""
    out: list[str] = []
    for n in nodes:
        if n.frame.kind != "op":
            continue
        if k.is_utility_op(n.frame.name) and n.children:
            out += _operators(n.children, k)
        else:
            out.append(n.frame.name)
    return out


def op_layer_needs(traces: list[Trace], k: Knowledge) -> list[PassNeeds]:
    """Per pass, the framework operators the default CPU path ran (its op layer), for a
    framework from which no GPU evidence is derived (MXNet): each is an operator a new
    backend must give a kernel (MXNet: an FCompute for its device), utility ops last."""
    from tracer.processing.pairs import is_default_cpu

    found: dict[str, tuple[PassNeeds, list[str]]] = {}
    for t in traces:
        if not is_default_cpu(t) or t.info.imported:
            continue
        for run in t.runs:
            root = run.layers.get("op")
            if run.phase != "warm" or root is None:
                continue
            if run.pass_ not in found:
                found[run.pass_] = (PassNeeds(t.info.primitive, run.pass_, "recorded",
                                              f"the op layer of {t.info.framework}'s CPU run (dltrace)",
                                              "every operator reached (no GPU evidence derived)"), [])
            out, utility = found[run.pass_]
            _add(out, utility, _operators(root.children, k), k)
    for out, utility in found.values():
        out.must_implement += [u for u in utility if u not in out.must_implement]
    return [found[p][0] for p in ("forward", "backward") if p in found]

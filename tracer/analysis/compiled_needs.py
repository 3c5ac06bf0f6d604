"""What a torch.compile backend must lower for a step (the compiled door), read from a
trace recorded with ``--door compiled`` (its meta ``compiled``: tracer/probes/torch_compiled.py),
and set beside what an eager backend must implement (the stand-in's list of the same
step), with the reason for every op only one door needs.

Why both: the eager backend gets ops as the dispatcher routes them to its key, out=
overloads and in-place forms included, after torch's composite kernels have run; a
compile backend gets AOTAutograd's graphs, functional, after the Core ATen
decomposition table. A team choosing its door, or planning both, needs both lists
and what separates them. Pure: reads traces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tracer.analysis.standin_needs import StandinNeeds
from tracer.trace import Trace

#: An overload that writes into an out= argument (``addmm.out``, ``sum.IntList_out``,
#: ``threshold_backward.grad_input``, ``nll_loss_forward.output``).
_OUT = re.compile(r"(?:^|_)(?:out|grad_input|output)$")
#: Ops that make views (the eager door reaches the storage's view, the graph names each view).
_VIEWS = frozenset({"as_strided", "view", "_reshape_alias", "alias", "permute", "expand", "t", "transpose",
                    "unsqueeze", "squeeze", "slice", "select", "_unsafe_view", "reshape"})
_ALLOCATION = re.compile(r"^(?:empty\w*|new_empty\w*)$")


@dataclass
class Variation:
    """One row of the compiled list: an op called with these inputs, ``count`` graph nodes."""

    op: str
    inputs: str  # every argument, a tensor as dtype[shape] (``float32[5, 3], [1, 0]``)
    dtypes: list[str]
    shapes: list[list[Any]]
    count: int


@dataclass
class Difference:
    op: str
    door: str  # "compiled only" or "eager only"
    why: str


@dataclass
class CompiledNeeds:
    """The compiled door's list of one or more traces (a model at its levels)."""

    framework: str
    table: str  # the decomposition table the graphs were made with
    unit: str
    ops: list[str] = field(default_factory=list)  # in first-graph order
    variations: list[Variation] = field(default_factory=list)
    graphs: list[dict[str, Any]] = field(default_factory=list)  # kind, pass, nodes, ops
    breaks: list[dict[str, Any]] = field(default_factory=list)  # reason, eager (what ran eagerly), count
    resumed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # a compile that failed, per trace
    seconds: float = 0.0  # the steps that compiled (and recorded) the graphs
    origin: dict[str, list[str]] = field(default_factory=dict)  # op -> the ops Core ATen decomposed into it
    facts: dict[str, dict[str, bool]] = field(default_factory=dict)  # op -> core, composite
    decomposed: set[str] = field(default_factory=set)  # the table's ops
    differences: list[Difference] = field(default_factory=list)
    eager: list[str] | None = None  # the eager list it was set beside, when there was one

    @property
    def break_count(self) -> int:
        return sum(int(b.get("count", 0)) for b in self.breaks)

    def kinds_of(self, op: str) -> list[str]:
        return list(dict.fromkeys(g["kind"] for g in self.graphs if op in g.get("ops", {})))

    def problem(self) -> str | None:
        """One line when the compiled door gave no usable list: a compile that failed, or
        no graph at all (graph breaks everywhere: the whole step ran eagerly)."""
        if self.errors:
            return f"torch.compile failed ({self.errors[0]})"
        if not self.graphs:
            first = next((b for b in self.breaks if b.get("reason")), None)
            why = f": {first['reason']} ({first.get('eager', '')})" if first else ""
            return f"torch.compile made no graph: the whole step ran eagerly{why}"
        return None


def compiled_needs(traces: list[Trace]) -> CompiledNeeds | None:
    """The compiled list over ``traces`` (those recorded with ``--door compiled``), or None."""
    metas: list[tuple[Trace, dict[str, Any]]] = [(t, t.meta["compiled"]) for t in traces
                                                  if isinstance(t.meta.get("compiled"), dict)]
    if not metas:
        return None
    first = metas[0][1]
    out = CompiledNeeds(str(metas[0][0].info.framework), str(first.get("decompositions", "")),
                        str(first.get("unit", "")), decomposed=set(first.get("decomposed") or ()))
    rows: dict[tuple[str, str], Variation] = {}
    for _, m in metas:
        out.graphs += [g for g in m.get("graphs") or [] if isinstance(g, dict)]
        out.breaks += [b for b in m.get("graph_breaks") or [] if isinstance(b, dict)]
        out.resumed += [str(r) for r in m.get("resumed") or []]
        out.seconds += float(m.get("seconds") or 0.0)
        out.facts.update(m.get("facts") or {})
        if m.get("error"):
            out.errors.append(str(m["error"]))
        for op, entry in (m.get("ops") or {}).items():
            if op not in out.ops:
                out.ops.append(op)
            have = out.origin.setdefault(op, [])
            have += [o for o in entry.get("from") or [] if o not in have]
            for v in entry.get("variations") or []:
                key = (op, str(v.get("inputs", "")))
                row = rows.get(key)
                if row is None:
                    rows[key] = Variation(op, key[1], list(v.get("dtypes") or []), list(v.get("shapes") or []),
                                          int(v.get("count", 0)))
                else:
                    row.count += int(v.get("count", 0))
    out.variations = list(rows.values())
    return out


def _base(op: str) -> str:
    return op.split("::", 1)[-1].split(".", 1)[0]


def _overload(op: str) -> str:
    rest = op.split("::", 1)[-1]
    return rest.split(".", 1)[1] if "." in rest else ""


def _eager_only(op: str, needs: CompiledNeeds, setup_only: bool, by_name: list[str]) -> str:
    base, compiled_bases = _base(op), {_base(o): o for o in needs.ops}
    into = [o for o, srcs in needs.origin.items() if any(_base(s) == base.rstrip("_") for s in srcs)]
    if setup_only:
        return "setup: puts the inputs and parameters on the device; a graph is handed them there"
    if op in by_name:
        got = compiled_bases.get("convolution") if "convolution" in base else None
        return ("torch routes it only to a new eager backend, by name" +
                (f"; the graph holds {got}" if got else ""))
    if base in ("_copy_from", "_copy_from_and_resize", "copy_"):
        return ("a copy as torch routes it to an eager backend (Tensor.to, copy_); a graph copies with aten::copy "
                "or aten::_to_copy")
    if _OUT.search(_overload(op)):
        if base in compiled_bases:
            return f"out= form: the graph holds the functional {compiled_bases[base]}"
        if into:
            return f"out= form of {base}, which Core ATen decomposes (into {', '.join(into[:6])})"
        return f"out= form of {base}: the graph holds no {base}"
    if base.endswith("_") and not base.startswith("_"):
        functional = base[:-1]
        if functional in compiled_bases:
            return f"in-place: functionalised, the graph holds {compiled_bases[functional]}"
        if into:
            return f"in-place: functionalised, and {functional} decomposed (into {', '.join(into[:6])})"
        return f"in-place: functionalised, the graph holds no {functional}"
    if into or f"aten::{base}" in needs.decomposed or op in needs.decomposed:
        return f"decomposed by Core ATen{' (into ' + ', '.join(into[:6]) + ')' if into else ''}"
    if _ALLOCATION.match(base):
        return ("allocates an output (a structured op's wrapper on an eager backend); a graph's ops are functional, "
                "their outputs the compiler's to allocate")
    if base in _VIEWS:
        return "a view as eager torch makes it; the graph names its views as ops of their own"
    return "not in the graphs (the compiled step computes it otherwise, or it ran eagerly at a graph break)"


def _compiled_only(op: str, needs: CompiledNeeds, eager: list[str]) -> str:
    base = _base(op)
    forms = [e for e in eager if _base(e) in (base, f"{base}_")]
    if forms:
        return f"functional form: the eager backend gets {', '.join(forms[:4])}"
    srcs = [s for s in needs.origin.get(op, []) if s != op]
    if srcs:
        return f"from Core ATen's decomposition of {', '.join(srcs[:6])}"
    if op.startswith("higher_order::"):
        return "a higher-order op: a graph in a graph, lowered by the backend"
    if needs.facts.get(op, {}).get("composite"):
        return ("torch's own kernel (CompositeExplicitAutograd) computes it for an eager backend; in a graph it is "
                "an op to lower")
    return "not reached by the eager backend: the compiled step computes that part otherwise"


def beside(needs: CompiledNeeds, eager: StandinNeeds) -> None:
    """Set ``needs`` beside the eager door's list (the stand-in's run of the same step):
    each op only one door needs, with why, into ``needs.differences``."""
    listed = eager.must_implement
    needs.eager = listed
    needs.differences = []
    for op in needs.ops:
        if op not in listed:
            needs.differences.append(Difference(op, "compiled only", _compiled_only(op, needs, listed)))
    for op in listed:
        if op not in needs.ops:
            needs.differences.append(Difference(op, "eager only", _eager_only(
                op, needs, eager.passes_of(op) == ["setup"], eager.by_name)))

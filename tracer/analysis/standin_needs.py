"""What a new backend must implement for a primitive, by running it: the ops that
reached a stand-in backend (``--device standin``; torch: PrivateUse1 played by a
Python fallback on this CPU), per pass, set against the list read from the
framework's dispatch tables (tracer.analysis.backend_needs), with the reason for
every op on one list only.

Why both: the tables are read from the CPU path's op names, so they see what CPU
chose (``_convolution`` picks oneDNN), not what torch routes to a new backend
(``convolution_overrideable``); the profiler names ops without their overload, so
the tables can miss or misread one (``aten::add_``, ``aten::sum``); and an op that
CPU's kernel calls inside itself (``relu`` > ``clamp_min``) is no concern of a
backend that implements the outer op. The run has none of these blind spots; it
sees only the path it ran. Pure: reads traces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tracer.contract import STANDIN_LIB
from tracer.analysis.backend_needs import BackendNeeds
from tracer.processing.standin_record import lost_passes
from tracer.trace import Node, Trace, op_namespace

EVIDENCE = "run on the stand-in device"
#: setup: putting the inputs and parameters on the device (before the step is traced)
PASS_ORDER = ("setup", "forward", "backward")
#: an op that only allocates its output (``empty``, ``empty_strided``...), in any namespace
_ALLOCATION = re.compile(r"(?:^|::)empty\w*$")


@dataclass
class Difference:
    op: str
    side: str  # "run only" or "tables only"
    why: str


@dataclass
class StandinNeeds:
    device: str
    evidence: str
    framework: str = ""
    unit: str = ""  # what one op of the list is, as the stand-in says
    by_pass: dict[str, list[str]] = field(default_factory=dict)  # pass -> ops reached, in first-call order
    by_name: list[str] = field(default_factory=list)  # ops the framework routes only to new backends
    free: list[str] = field(default_factory=list)  # its ops the step called that it computed itself
    #: every op the run's op layer shows that did not reach the device (any namespace: what
    #: the framework kept on the host or ran with its own kernel for any device)
    elsewhere: list[str] = field(default_factory=list)
    apis: list[str] = field(default_factory=list)  # the API levels that ran on the stand-in
    differences: list[Difference] = field(default_factory=list)
    #: "CASE PASS" -> why: passes that did not run whole on the stand-in, whose ops are
    #: therefore not all on the list (an op it could not compute, a program it could not run)
    lost: dict[str, str] = field(default_factory=dict)

    @property
    def must_implement(self) -> list[str]:
        return list(dict.fromkeys(op for p in PASS_ORDER for op in self.by_pass.get(p, [])))

    def passes_of(self, op: str) -> list[str]:
        return [p for p in PASS_ORDER if op in self.by_pass.get(p, [])]


def _base(op: str) -> str:
    return op.split(".", 1)[0]


#: How many of an op's ancestors are kept (a chain thousands deep, from a file someone
#: else wrote, must not cost memory by the square of its depth).
_ANCESTORS = 256


def _op_nodes(traces: list[Trace]) -> list[tuple[Node, list[str]]]:
    """Every op-layer node of the traces' warm runs with the names of its ancestors."""
    out: list[tuple[Node, list[str]]] = []
    for t in traces:
        for r in t.runs:
            if r.phase == "warm" and "op" in r.layers:
                stack: list[tuple[Node, list[str]]] = [(r.layers["op"], [])]  # iterative: a deep chain is no recursion
                while stack:
                    n, up = stack.pop()
                    out.append((n, up))
                    above = [*up[-_ANCESTORS:], n.frame.name]  # an op's nearest ancestors: op trees are shallow
                    stack.extend((c, above) for c in reversed(n.children))
    return out


def _reached_under(nodes: list[tuple[Node, list[str]]], ancestor: str) -> list[str]:
    return list(dict.fromkeys(n.frame.name for n, up in nodes
                              if ancestor in up and n.frame.lib == STANDIN_LIB))


def _run_only(op: str, run: StandinNeeds, cpu_names: set[str], looked_up: dict[str, Any], free: dict[str, str]) -> str:
    if op in run.by_name:
        return (f"{run.framework} routes it only to new backends: the CPU path never calls it, and its one kernel "
                "(CompositeExplicitAutograd) only raises 'not implemented', so a backend registers it by name")
    if run.passes_of(op) == ["setup"]:
        return "puts the inputs and parameters on the device (setup): the CPU path copies nothing"
    base = _base(op)
    if base in free:
        return (f"the profiler names ops without their overload: the tables looked up {base}'s default overload "
                f"({free[base]}), but {op} runs, which has no kernel a new backend gets")
    if (base in cpu_names and base not in looked_up) or (f"{base}_" in cpu_names and f"{base}_" not in looked_up):
        return (f"the profiler names ops without their overload and {base} (or {base}_) has no default one: "
                "the tables could not look it up")
    if _ALLOCATION.search(base):
        return ("allocates an output through the dispatcher (a structured op's generated wrapper on a new "
                "backend); CPU's own kernels allocate without a dispatcher call")
    return "not on the CPU path: the new backend's path differs here (see the diff against the CPU path)"


def _tables_only(op: str, run: StandinNeeds, cpu_nodes: list[tuple[Node, list[str]]],
                 run_nodes: list[tuple[Node, list[str]]]) -> str:
    reached = {_base(o) for o in run.must_implement}
    stand_names = {n.frame.name for n, _ in run_nodes}
    for n, up in cpu_nodes:
        if n.frame.name not in (op, _base(op)):
            continue
        for anc in reversed(up):
            if _base(anc) in reached:
                return f"CPU's kernel of {anc} calls it inside itself: a backend that implements {anc} does that work"
        for anc in reversed(up):
            if anc in stand_names:
                routed = _reached_under(run_nodes, anc)
                return (f"CPU's choice below {anc}; on a new backend {anc} routes to "
                        f"{', '.join(routed) or 'other ops'} instead")
    return "not reached on the stand-in device's path"


def standin_needs(standin: list[Trace], cpu: list[Trace], table: BackendNeeds | None) -> StandinNeeds | None:
    """The run's needs over a primitive's stand-in traces (passes and API levels), set
    against ``table`` (from ``cpu``, the default CPU traces), or None without a run."""
    metas = [m for m in (t.info.standin for t in standin) if m is not None]
    if not metas:
        return None
    out = StandinNeeds(standin[0].info.device, EVIDENCE if metas[0].evidence is None else metas[0].evidence,
                       standin[0].info.framework, metas[0].unit or "")
    for m in metas:
        for pass_, ops in m.reached.items():
            have = out.by_pass.setdefault(str(pass_), [])
            for o in ops:
                if isinstance(o, str) and o not in have:
                    have.append(o)
        out.by_name += [str(o) for o in m.registered_by_name if o not in out.by_name]
    for t in standin:
        out.lost.update(lost_passes(t))
    run_nodes = _op_nodes(standin)
    reached = set(out.must_implement)
    spaces = {op_namespace(op) for op in reached} - {""}  # the op namespace the backend's kernels are named in
    out.free = list(dict.fromkeys(n.frame.name for n, _ in run_nodes if op_namespace(n.frame.name) in spaces
                                  and n.frame.lib != STANDIN_LIB and n.frame.name not in reached))
    out.apis = list(dict.fromkeys(str(t.info.api) for t in standin))
    out.elsewhere = list(dict.fromkeys(n.frame.name for n, _ in run_nodes if n.frame.kind == "op"
                                       and n.frame.lib != STANDIN_LIB and n.frame.name not in reached))
    if table is None:
        return out
    cpu_nodes = _op_nodes(cpu)
    looked_up = {op: row for t in cpu if t.info.dispatch is not None
                 for op, row in (t.info.dispatch.ops or {}).items()}
    free = dict(table.free)
    cpu_names = {n.frame.name for n, _ in cpu_nodes}
    for op in out.must_implement:
        if op not in table.must_implement:
            out.differences.append(Difference(op, "run only", _run_only(op, out, cpu_names, looked_up, free)))
    for op in table.must_implement:
        if op not in out.must_implement:
            out.differences.append(Difference(op, "tables only", _tables_only(op, out, cpu_nodes, run_nodes)))
    return out

"""What a user's own workload needs beyond dltrace's built-in cases, op by op: the
table a porting team pastes into its tracker (op, overload, passes, calls, which
built-in cases also reach it), and what each recorded layer cost on that workload.

A must-implement list is true only for the code that was traced: a torchvision
ResNet's in-place ReLU (``aten::relu_``) and adaptive pooling (``aten::mean.out``)
reach no built-in case. The rows are the workload's own list (tracer.analysis.models:
the entries of its framework's unit, from its strongest source); an op "also in" a
built-in case is one whose trace of the same kind (a stand-in run against a stand-in
run, a CPU path against a CPU path) names it in its op layer. Pure: reads traces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tracer.analysis.arm_ops import ArmOpTable
from tracer.contract import PASSES, STANDIN
from tracer.processing.standin_record import host_placed
from tracer.trace import Node, Run, Trace

#: The passes of a stand-in run's list: putting the inputs and parameters on the device first.
_PASSES = ("setup", *PASSES)


@dataclass
class CoverageRow:
    op: str  # the entry as the list names it (aten::addmm.out, Conv2D, conv_general_dilated)
    name: str  # without its overload
    overload: str  # torch's overload name ("out", "Tensor"), "" where the unit has none
    passes: list[str]
    calls: int  # how often the workload's warm step called it, over its passes
    also_in: list[str]  # built-in cases (primitives, models) whose traces name it too
    #: on no built-in case's list (in the framework's unit): what the workload adds
    beyond: bool = False
    #: machine (this one, each ARM CPU) -> what computed the op there and what a port must
    #: care about (tracer.analysis.arm_ops), where the workload ran on an ARM CPU
    arm: dict[str, str] = field(default_factory=dict)


@dataclass
class Cost:
    """What recording one layer cost: the median of the recorded step's time over the
    untraced step's, in pairs timed in turn (tracer.collect.costs), and the pairs' spread
    (their ratios' quartiles) where it was measured. A factor whose spread reaches 1, or
    under 1, is no cost: it is said "within noise", never shown as a factor."""

    factor: float | None
    low: float | None = None
    high: float | None = None

    @property
    def noise(self) -> bool:
        return self.factor is not None and (self.factor < 1 or (self.low is not None and self.low <= 1))

    @property
    def said(self) -> str:
        """The one way every output words it (the audit, the models page; survey.json
        keeps the numbers beside it)."""
        if self.factor is None:
            return "not measured"
        spread = f" (×{self.low:.2f}–×{self.high:.2f})" if self.low is not None and self.high is not None else ""
        return f"within noise{spread}" if self.noise else f"×{self.factor:.2f}{spread}"


@dataclass
class LayerCost:
    """What recording each layer cost on one pass of the workload, against its untraced
    step (×1.6: the recorded step took 1.6 times as long)."""

    pass_: str
    untraced_s: float | None
    python: Cost  # the Python tracer's traced step / the untraced step
    op: Cost  # the framework's profiler's step (its start, stop and events' processing left out) / the untraced step
    native: Cost  # py-spy's sampled loop / the unsampled loop (spread: each window over the timings before and after)

    @classmethod
    def of(cls, r: Run) -> "LayerCost":
        """What recording each layer cost on one run (its stats), as every output words it
        (a method, so that a renderer reads it without computing an analysis of its own)."""
        untraced = _number(r.stats, "untraced_s")
        layers = _mapping(r.stats, "layers")
        op = _mapping(layers, "op")
        op_s = _number(op, "seconds")
        if "pairs" in r.stats or "overhead" in op:  # paired (collect.costs): a record that timed no step has none
            op_cost = _cost(op)
        else:  # a trace of before the pairs: the record's seconds over the untraced step
            op_cost = Cost(op_s / untraced if op_s is not None and untraced else None)
        native = _mapping(layers, "native")
        return cls(r.pass_, untraced, _cost(r.stats), op_cost,
                   Cost(_number(native, "slowdown"), _number(native, "slowdown_low"), _number(native, "slowdown_high")))


@dataclass
class WorkloadCoverage:
    framework: str
    workload: str
    device: str  # where the list's trace ran (the stand-in device, or the CPU)
    rows: list[CoverageRow] = field(default_factory=list)
    costs: list[LayerCost] = field(default_factory=list)
    #: the machines of the rows' ``arm`` cells, in order (none where it ran on no ARM CPU)
    machines: list[str] = field(default_factory=list)
    #: op -> passes, for the ops the stand-in's graphs placed on the host (TensorFlow's
    #: tf.function: a port would lose them to the host unseen); not on the list
    host: dict[str, list[str]] = field(default_factory=dict)
    #: why the list the rows are is not whole (figure.Figure.incomplete); "" when it is
    incomplete: str = ""

    @property
    def beyond(self) -> list[str]:
        return [r.op for r in self.rows if r.beyond]


def _split(op: str) -> tuple[str, str]:
    name = op.split(" (")[0]
    if "::" in name and "." in name.split("::", 1)[1]:
        head, overload = name.rsplit(".", 1)
        return head, overload
    return name, ""


def _op_counts(trace: Trace) -> dict[str, dict[str, int]]:
    """pass -> op name -> calls, over the warm runs' op layers (iteratively: a deep tree
    is no recursion)."""
    out: dict[str, dict[str, int]] = {}
    for r in trace.runs:
        if r.phase != "warm" or "op" not in r.layers:
            continue
        counts = out.setdefault(r.pass_, {})
        stack: list[Node] = [r.layers["op"]]
        while stack:
            n = stack.pop()
            if n.frame.kind == "op":
                counts[n.frame.name] = counts.get(n.frame.name, 0) + n.count
            stack.extend(n.children)
    return out


def _reached(trace: Trace) -> dict[str, list[str]]:
    """pass -> the ops a stand-in run says reached its backend (meta ``standin``), else {}."""
    standin = trace.meta.get("standin")
    reached = standin.get("reached") if isinstance(standin, dict) else None
    if not isinstance(reached, dict):
        return {}
    return {p: [str(o) for o in ops] for p, ops in reached.items() if p in _PASSES and isinstance(ops, list)}


def _names(trace: Trace) -> set[str]:
    names = {name for counts in _op_counts(trace).values() for name in counts}
    names.update(op for ops in _reached(trace).values() for op in ops)
    return names


def _default(t: Trace, device: str) -> bool:
    return t.info.device == device and t.info.variant == "default" and t.info.emulated is None


def _evidence(t: Trace) -> bool:
    """A trace a list is read from: a default path on this machine (the CPU, the
    stand-in), or a GPU path derived here (its variant is its evidence class)."""
    return t.info.emulated is None and (t.info.variant == "default" or t.info.device == "gpu")


def _number(doc: Any, key: str) -> float | None:
    value = doc.get(key) if isinstance(doc, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _mapping(doc: Any, key: str) -> dict[str, Any]:
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, dict) else {}


def _cost(stats: Any, key: str = "overhead") -> Cost:
    """A factor and its spread (``overhead_spread``: two numbers) from a run's stats."""
    spread = stats.get(f"{key}_spread") if isinstance(stats, dict) else None
    if isinstance(spread, list) and len(spread) == 2 and all(type(v) in (int, float) for v in spread):
        return Cost(_number(stats, key), float(spread[0]), float(spread[1]))
    return Cost(_number(stats, key))


def layer_costs(trace: Trace) -> list[LayerCost]:
    """Each pass's cost of each layer on the workload's CPU trace. A trace recorded before
    costs were paired has one timing of each side: its factor is read, without a spread."""
    return [LayerCost.of(r) for r in trace.runs if r.phase == "warm"]


def coverage(framework: str, workload: str, items: list[str], traces: list[Trace], builtin: list[Trace],
             beyond: list[str] | None = None, incomplete: str = "", arm: ArmOpTable | None = None) -> WorkloadCoverage:
    """``items``: the workload's must-implement list in its framework's unit;
    ``traces``: the workload's traces in that framework; ``builtin``: the framework's
    traces of its built-in primitives and models; ``beyond``: the entries on no built-in
    case's list (tracer.analysis.models sets the lists apart; without it, the entries no
    built-in trace names). An entry is counted and placed in its passes from the first of
    the workload's stand-in run, CPU path and derived GPU path that names it; ``arm``:
    the workload's per-op ARM table (tracer.analysis.arm_ops), each entry's cells."""
    standin = next((t for t in traces if _default(t, STANDIN)), None)
    cpu = next((t for t in traces if _default(t, "cpu")), None)
    gpu = [t for t in traces if t.info.device == "gpu" and t.info.emulated is None]
    sources = [t for t in (standin, cpu, *gpu) if t is not None]
    cov = WorkloadCoverage(framework, workload, sources[0].info.device if sources else "", incomplete=incomplete,
                           host=host_placed([standin]) if standin is not None else {})
    if cpu is not None:
        cov.costs = layer_costs(cpu)
    if not sources:
        return cov
    seen = [(t.info.device, _reached(t), _op_counts(t)) for t in sources]
    # what each built-in case's traces name, per device: an entry is set against the
    # built-in cases' traces of the kind that named it in the workload (a stand-in run
    # against stand-in runs, a derived GPU path against derived GPU paths)
    others: dict[str, dict[str, set[str]]] = {}
    for t in builtin:
        if _evidence(t):
            others.setdefault(t.info.device, {}).setdefault(t.info.primitive, set()).update(_names(t))
    outside = set(beyond) if beyond is not None else None
    for op in items:
        name, overload = _split(op)
        bare = op.split(" (")[0]
        device, reached, counts = next(((d, r, c) for d, r, c in seen if any(bare in ops for ops in r.values())
                                        or any(bare in cs for cs in c.values())), ("", {}, {}))
        passes = [p for p in _PASSES if bare in reached.get(p, []) or bare in counts.get(p, {})]
        calls = sum(c.get(bare, 0) for c in counts.values())
        also = [case for case, names in others.get(device, {}).items() if bare in names]
        cov.rows.append(CoverageRow(op, name, overload, passes, calls, also,
                                    op in outside if outside is not None else not also))
    if arm is not None:
        cov.machines = arm.machines
        by_op = {r.op: r for r in arm.rows}
        for row in cov.rows:
            found = next((by_op[n] for n in cpu_op_names(row.name) if n in by_op), None)
            if found is not None:
                row.arm = {m: "; ".join([c.said, *found.flags.get(m, [])]) for m, c in found.cells.items()}
    return cov


def cpu_op_names(entry: str) -> list[str]:
    """The names the CPU path may run a list entry under, likeliest first. The stand-in's
    list names an op as a new backend gets it: ``aten::convolution_overrideable`` (torch's
    hook for a device without a convolution of its own) where the CPU runs
    ``aten::convolution``, and an out= form (``aten::add.out``) where the CPU ran the
    in-place op (``aten::add_``) the out= kernel serves. A StableHLO op (``stablehlo.add``)
    is its own name on every path. Chainer's list names the GPU code a FunctionNode runs
    (``Convolution2DFunction.forward_gpu``, ``._forward_gpu_core``) where the CPU ran the
    node's forward or backward, and an update rule's (``MomentumSGDRule.update_core_gpu``)
    where the CPU ran the rule's update."""
    name = entry.split(" (")[0]
    if name.startswith(("stablehlo.", "chlo.")):
        return [name]
    chainer = re.fullmatch(r"(\w+)\._?(forward|backward)_gpu\w*", name)
    if chainer:
        return [f"{chainer.group(1)}.{chainer.group(2)}"]
    rule = re.fullmatch(r"(\w+)\.update_core_gpu", name)
    if rule:
        return [f"{rule.group(1)}.update"]
    base = re.sub(r"_overrideable$", "", name.split(".")[0])
    return list(dict.fromkeys([base, base + "_", base.rstrip("_")]))

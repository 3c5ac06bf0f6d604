"""From a nested Kineto profile to one op-layer tree per primitive and pass.

Each forward instance of a primitive (see :mod:`tracer.importers.primitives`) and
its backward nodes become call trees shaped like the CPU probe's op layer:
``conv2d.forward > aten::conv2d > aten::convolution > aten::_convolution >
aten::cudnn_convolution``, with the GPU kernels each op launched hanging under
it. The instances of one profiler step (``ProfilerStep#N``; the whole file when
there is none) are merged under one root, same-named siblings adding up, so a
ResNet's convolutions read as one path with counts, and distinct kernels
stay distinct. Times are the recorded ones, converted from microseconds to
nanoseconds; nothing is scaled or estimated.

The step chosen is the last one that holds the primitive in both passes, else
the last that holds it at all: the steady state, after the first steps' one-time
work (cuDNN autotuning, lazy kernel loading).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tracer.probes.base import merge_siblings, op_node
from tracer.importers.hierarchy import Hierarchy, ancestors, walk
from tracer.importers.kernels import kernel_lib, module_of
from tracer.importers.kineto import HostOp, KinetoProfile, Step
from tracer.importers.primitives import EVALUATE, input_rank, namespaces
from tracer.registry_entries import OpRule
from tracer.trace import Frame, Node, op_namespace

#: Levels of ops kept below an instance, and the deepest an instance may sit. Real
#: traces nest a dozen levels; a file nesting thousands (hostile or broken) is cut
#: here, and the cut is counted, so that no walk up or down costs more than this.
MAX_DEPTH = 200


@dataclass
class Instances:
    """The instances of one primitive in one profile, before a step is chosen."""

    rule: OpRule
    forward: list[HostOp]
    backward: list[tuple[HostOp, HostOp | None]]  # (backward node, the forward instance it came from)
    linked_by: str  # how backward nodes were found: "fwdbwd flows", "autograd node names" or ""
    recomputed: list[HostOp]  # forward ops run inside the backward pass (activation checkpointing), left out


@dataclass
class Slice:
    """What becomes one dltrace trace: a primitive's merged trees, one per pass."""

    primitive: str
    trees: dict[str, Node]  # pass -> root
    first: HostOp | None  # the first forward instance (its input shape and dtype go to the meta)
    step: str | None
    stats: dict[str, dict[str, Any]] = field(default_factory=dict)  # pass -> run stats
    kernels: Counter[str] = field(default_factory=Counter)  # kernel name -> launches, both passes


def find_instances(hier: Hierarchy, rule: OpRule) -> Instances:
    """Forward instances (outermost ops of the rule's names, outside the backward pass)
    and the backward nodes they lead to."""
    forward: list[HostOp] = []
    recomputed: list[HostOp] = []
    names = {*rule.forward, *rule.top_only}
    for name in names:
        for op in hier.by_name.get(name, ()):
            if (name in rule.top_only and op.parent is not None) or op.depth > MAX_DEPTH:
                continue
            context = [a.name for a in ancestors(op)]
            if any(a in names or a in rule.inside_other for a in context) or not _rank_ok(rule, op):
                continue
            if any(a.startswith(EVALUATE) for a in context):
                recomputed.append(op)
            else:
                forward.append(op)
    forward.sort(key=lambda op: (op.start, op.index))

    backward: list[tuple[HostOp, HostOp | None]] = []
    seen: set[int] = set()
    if hier.has_flows:
        linked_by = "fwdbwd flows"
        for f in forward:
            for op in walk(f):
                for node in hier.backward_of.get(op, ()):
                    top = _evaluate_frame(node)
                    if id(top) not in seen:
                        seen.add(id(top))
                        backward.append((top, f))
    else:
        linked_by = "autograd node names"
        for name in rule.backward:
            for op in hier.by_name.get(name, ()):
                top = _evaluate_frame(op)
                if id(top) not in seen:
                    seen.add(id(top))
                    backward.append((top, None))
    backward = _outermost(backward)
    backward.sort(key=lambda pair: (pair[0].start, pair[0].index))
    return Instances(rule, forward, backward, linked_by if backward else "", recomputed)


def _outermost(backward: list[tuple[HostOp, HostOp | None]]) -> list[tuple[HostOp, HostOp | None]]:
    """The backward nodes that lie inside no other one: a node nested in another
    (reentrant autograd, or a hostile file nesting thousands) is already in the outer
    one's tree, and slicing it again would count it twice and walk the nest once per
    node (quadratic). One walk up per node, each ancestor's answer remembered, so the
    whole check is linear in the ops."""
    tops = {id(op) for op, _ in backward}
    above: dict[int, bool] = {}  # op -> whether it or an op above it is one of the tops
    out = []
    for op, origin in backward:
        path: list[HostOp] = []
        node = op.parent
        found = False
        while node is not None:
            if id(node) in above:
                found = above[id(node)]
                break
            if id(node) in tops:
                found = True
                break
            path.append(node)
            node = node.parent
        for p in path:
            above[id(p)] = found
        if not found:
            out.append((op, origin))
    return out


def _rank_ok(rule: OpRule, op: HostOp) -> bool:
    if not rule.ranks:
        return True
    rank = input_rank(op.args)
    return rank is None or rank in rule.ranks


def _evaluate_frame(node: HostOp) -> HostOp:
    """The autograd engine's ``evaluate_function`` op around a backward node (the top
    of the CPU probe's backward tree), or the node itself when there is none."""
    if node.name.startswith(EVALUATE):
        return node
    for i, a in enumerate(ancestors(node)):
        if a.name.startswith(EVALUATE):
            return a
        if i >= MAX_DEPTH:
            break
    return node


class _Steps:
    """Which profiler step a time falls in (bisect: a file may hold many steps)."""

    def __init__(self, steps: list[Step]):
        self.steps = sorted(steps, key=lambda st: st.start)
        self.starts = [st.start for st in self.steps]

    def of(self, ts: float) -> Step | None:
        i = bisect_right(self.starts, ts) - 1
        return self.steps[i] if i >= 0 and ts < self.steps[i].end else None


def choose_step(inst: Instances, steps: list[Step]) -> tuple[Step | None, list[HostOp], list[HostOp]]:
    """The step to slice and the instances in it (all instances when the file has no
    steps, or none of its steps holds the primitive)."""
    index = _Steps(steps)
    fwd = [(op, index.of(op.start)) for op in inst.forward]
    fwd_step = {id(op): st for op, st in fwd}
    bwd = [(b, fwd_step.get(id(f)) if f is not None else index.of(b.start)) for b, f in inst.backward]
    n_fwd = Counter(id(st) for _, st in fwd if st is not None)
    n_bwd = Counter(id(st) for _, st in bwd if st is not None)
    candidates = [((n_fwd[id(st)] > 0 and n_bwd[id(st)] > 0, st.start), st) for st in index.steps
                  if n_fwd[id(st)] or n_bwd[id(st)]]
    if not candidates:
        return None, inst.forward, [b for b, _ in inst.backward]
    step = max(candidates, key=lambda c: c[0])[1]
    return step, [op for op, st in fwd if st is step], [b for b, st in bwd if st is step]


def op_tree(top: HostOp, vendor: str, counts: Counter[str], kernels: Counter[str], framework: str,
            spaces: frozenset[str] = frozenset()) -> Node:
    """One recorded op and everything under it as a Node tree: child ops and the GPU
    activities each op launched, in host-time order (a kernel at the time of its
    launch call). An op's module is its namespace where that is one of ``spaces``
    (the rules' own: ``aten``), else the framework. Iterative, so any depth the
    file has is safe."""
    module = module_of(vendor)
    nodes: dict[int, Node] = {}
    order: list[tuple[HostOp, int]] = []
    stack = [(top, 0)]
    while stack:
        op, depth = stack.pop()
        space = op_namespace(op.name)
        nodes[id(op)] = op_node(op.name, space if space in spaces else framework, "", 1, _ns(op.dur))
        order.append((op, depth))
        if depth < MAX_DEPTH:
            stack.extend((c, depth + 1) for c in op.children)
        elif op.children:
            counts["ops cut at depth"] += sum(1 for c in op.children for _ in walk(c))
    for op, depth in order:
        items: list[tuple[float, int, Node]] = []
        for ts, ev in op.device:
            counts[ev.kind] += 1
            if ev.kind == "kernel":
                kernels[ev.name] += 1
            frame = Frame("op", module, ev.name, lib=kernel_lib(ev.name, vendor, ev.kind))
            items.append((ts, 1, Node(frame, 1, _ns(ev.dur))))
        if depth < MAX_DEPTH:
            items.extend((c.start, 0, nodes[id(c)]) for c in op.children)
        items.sort(key=lambda it: (it[0], it[1]))
        nodes[id(op)].children = [node for _, _, node in items]
    return nodes[id(top)]


def _ns(us: float) -> int:
    return max(int(round(us * 1000.0)), 0)


def build_slices(profile: KinetoProfile, hier: Hierarchy, vendor: str, framework: str,
                 rules: tuple[OpRule, ...], producer: str = "Kineto") -> list[Slice]:
    """One Slice per primitive of ``rules`` found in the profile, in their order;
    ``producer`` names what recorded it in each run's stats (the framework's profiler)."""
    out = []
    spaces = namespaces(rules)
    forward_names = frozenset(name for rule in rules for name in rule.forward)
    for rule in rules:
        inst = find_instances(hier, rule)
        if not inst.forward and not inst.backward:
            continue
        step, fwd, bwd = choose_step(inst, profile.steps)
        trees: dict[str, Node] = {}
        stats: dict[str, dict[str, Any]] = {}
        kernels: Counter[str] = Counter()
        for pass_, tops in (("forward", fwd), ("backward", bwd)):
            if not tops:
                continue
            counts: Counter[str] = Counter()
            children = merge_siblings([op_tree(op, vendor, counts, kernels, framework, spaces) for op in tops])
            trees[pass_] = Node(Frame("root", "", f"{rule.primitive}.{pass_}"), 1, sum(c.time_ns for c in children),
                                children=children)
            info: dict[str, Any] = {
                "source": f"{producer} (Kineto JSON), imported",
                "instances": len(tops),
                "step": step.name if step else "whole file",
                "kernels": counts["kernel"], "memcpy": counts["memcpy"], "memset": counts["memset"],
            }
            if pass_ == "forward":
                left_out = sum(1 for op in inst.recomputed if step is None or step.start <= op.start < step.end)
                if left_out:
                    info["recomputed_in_backward_left_out"] = left_out
            else:
                info["linked_by"] = inst.linked_by
                inside = sum(1 for op in tops for o in walk(op) if o.name in forward_names)
                if inside:  # activation checkpointing: the forward recomputed inside backward nodes, as recorded
                    info["forward_ops_recomputed_inside"] = inside
            if counts["ops cut at depth"]:
                info["ops_cut_at_depth"] = counts["ops cut at depth"]
            stats[pass_] = {"layers": {"op": info}}
        out.append(Slice(rule.primitive, trees, fwd[0] if fwd else None, step.name if step else None, stats, kernels))
    return out

"""The op hierarchy of a Kineto profile, rebuilt from flat events.

torch.profiler writes each op as a flat interval on its host thread; an op whose
interval lies inside another's (same thread) ran inside it, which is how
``aten::conv2d > aten::convolution > aten::_convolution > aten::cudnn_convolution``
comes back. Two more kinds of link are followed:

* a GPU activity (kernel, memcpy, memset) and the runtime call that launched it
  (``cudaLaunchKernel``, ``hipExtModuleLaunchKernel``, ``cuLaunchKernel``...) share
  ``args.correlation``; the innermost op around that call launched it. Files
  without the runtime call fall back to the op whose ``External id`` the activity
  names;
* a ``fwdbwd`` flow starts in the forward op that recorded an autograd node and
  ends in that node when the backward pass runs it, on the autograd thread.

Points (launch calls, flow ends) are bound to the innermost op whose interval
holds them, the chrome-trace meaning of a flow's "enclosing slice".
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterator

from tracer.importers.kineto import HostOp, KinetoProfile, Launch

_OP, _POINT = 0, 1


@dataclass
class Hierarchy:
    roots: dict[tuple[Any, Any], list[HostOp]]  # top-level ops of each host thread, in time order
    by_name: dict[str, list[HostOp]]  # every op, by name, in file order
    #: forward op -> the backward nodes its fwdbwd flows end in
    backward_of: dict[HostOp, list[HostOp]] = field(default_factory=dict)
    has_flows: bool = False
    attached: int = 0  # GPU activities hung under the op that launched them
    unattached: int = 0  # GPU activities no op could be found for (launched outside any op)


def build(profile: KinetoProfile) -> Hierarchy:
    """Nest the ops of every host thread and attach launches and flows to them."""
    per_thread: dict[tuple[Any, Any], list[tuple[float, int, float, int, Any]]] = defaultdict(list)
    for op in profile.ops:
        per_thread[op.thread].append((op.start, _OP, -op.dur, op.index, op))
    for launch in profile.launches:
        per_thread[launch.thread].append((launch.ts, _POINT, 0.0, 0, launch))
    for point in profile.flows:
        per_thread[point.thread].append((point.ts, _POINT, 0.0, 0, point))

    roots: dict[tuple[Any, Any], list[HostOp]] = {}
    launcher: dict[int, tuple[HostOp, float]] = {}
    flow_ends: dict[Any, dict[str, HostOp]] = defaultdict(dict)
    for thread, items in per_thread.items():
        items.sort(key=lambda it: it[:4])
        top: list[HostOp] = []
        stack: list[HostOp] = []
        for ts, kind, _, _, item in items:
            if kind == _OP:
                while stack and ts >= stack[-1].end:
                    stack.pop()
                if stack:
                    item.parent = stack[-1]
                    item.depth = stack[-1].depth + 1
                    stack[-1].children.append(item)
                else:
                    top.append(item)
                stack.append(item)
                continue
            while stack and ts > stack[-1].end:
                stack.pop()
            if not stack:
                continue
            if isinstance(item, Launch):
                launcher.setdefault(item.correlation, (stack[-1], ts))
            else:
                flow_ends[item.id].setdefault(item.phase, stack[-1])
        if top:
            roots[thread] = top

    by_external = _unique_external_ids(profile.ops)
    attached = unattached = 0
    for ev in profile.device:
        found = launcher.get(ev.correlation) if ev.correlation is not None else None
        if found is None and ev.external_id is not None and ev.external_id in by_external:
            op = by_external[ev.external_id]
            found = (op, op.start)
        if found is None:
            unattached += 1
            continue
        op, ts = found
        op.device.append((ts, ev))
        attached += 1

    backward_of: dict[HostOp, list[HostOp]] = defaultdict(list)
    for ends in flow_ends.values():
        if "s" in ends and "f" in ends and ends["f"] not in backward_of[ends["s"]]:
            backward_of[ends["s"]].append(ends["f"])
    by_name: dict[str, list[HostOp]] = defaultdict(list)
    for op in profile.ops:
        by_name[op.name].append(op)
    return Hierarchy(roots, dict(by_name), dict(backward_of), bool(profile.flows), attached, unattached)


def _unique_external_ids(ops: list[HostOp]) -> dict[int, HostOp]:
    """``External id`` -> op, for the ids that name exactly one op."""
    ids: dict[int, HostOp] = {}
    seen: Counter[int] = Counter()
    for op in ops:
        ext = op.args.get("External id")
        if ext.__class__ is int:
            seen[ext] += 1
            ids[ext] = op
    return {k: v for k, v in ids.items() if seen[k] == 1}


def walk(op: HostOp) -> Iterator[HostOp]:
    """``op`` and everything below it, depth first, without recursion."""
    stack = [op]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children))


def ancestors(op: HostOp) -> Iterator[HostOp]:
    node = op.parent
    while node is not None:
        yield node
        node = node.parent

"""``dltrace import --framework mxnet|tensorflow``: a framework's own operator
timeline (chrome-trace JSON) to traces.

MXNet's profiler (``mx.profiler``, 2019) and TensorFlow 1.x's
``tensorflow.python.client.timeline`` (2017) record which operator ran on which
device context: MXNet puts each operator in a process named ``cpu/0`` or
``gpu/0``; TensorFlow's ``/gpu:0 Compute`` lane holds the op as the executor
placed it, and its ``/gpu:0/stream:N`` lanes the same op on each CUDA stream
(op names, not kernel names). That is the CPU-vs-GPU split at the operator
level, the level the CPU probes' op layer records (``Convolution``, ``MatMul``):
an operator that ran on a GPU context is named with it (``Convolution [gpu/0]``),
so ``dltrace diff`` of a CPU probe against the import splits at the operator and
calls it a device dispatch.

The files were recorded by other versions than the probes' (the version is
"unknown": neither format says it, the provenance row says when); which
primitive an op is comes from the op names alone, listed here per format.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracer.contract import PASSES
from tracer.importers import Imported, ImportFailed
from tracer.importers import meta as m
from tracer.importers.provenance import provenance
from tracer.importers.source import Source, clip, load_json, read_source, short_name
from tracer.registry import OpRule
from tracer.trace import Frame, Node, Run, Trace

_MX_CONTEXT = re.compile(r"^(cpu|gpu|cpu_pinned|cpu_shared)/(\d+)$")
_TF_LANE = re.compile(r"^(?:/job:[^/]+/replica:\d+/task:\d+)?/(?:device:)?(cpu|gpu|CPU|GPU):(\d+)"
                      r"(/stream:\w+|/memcpy)? Compute$")


@dataclass
class OpEvent:
    name: str
    device: str  # "gpu/0", "gpu:0"
    lane: str  # "" or the GPU stream ("stream:12")
    backward: bool
    dur_us: float


@dataclass
class Timeline:
    fmt: str  # "MXNet profiler" | "TensorFlow timeline"
    framework: str
    ops: list[OpEvent] = field(default_factory=list)
    events: int = 0
    skipped: int = 0


def sniff(doc: Any) -> str:
    """Which framework's operator timeline ``doc`` is: "mxnet", "tensorflow", or ""."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        return ""
    for ev in events[:2000]:
        if not isinstance(ev, dict):
            continue
        if ev.get("cat") == "operator" and ev.get("ph") in ("B", "E"):
            return "mxnet"
        args = ev.get("args")
        if ev.get("cat") == "Op" and ev.get("ph") == "X" and isinstance(args, dict) and "op" in args:
            return "tensorflow"
    return ""


def _processes(events: list) -> dict[Any, str]:
    return {ev.get("pid"): ev["args"]["name"] for ev in events
            if isinstance(ev, dict) and ev.get("ph") == "M" and ev.get("name") == "process_name"
            and isinstance(ev.get("args"), dict) and isinstance(ev["args"].get("name"), str)}


def _mxnet(events: list, tl: Timeline) -> None:
    contexts = {pid: name for pid, name in _processes(events).items() if _MX_CONTEXT.match(name)}
    opened: dict[tuple, float] = {}
    for ev in events:
        if not isinstance(ev, dict) or ev.get("cat") != "operator" or ev.get("ph") not in ("B", "E"):
            continue
        name, ts, pid = ev.get("name"), ev.get("ts"), ev.get("pid")
        if not isinstance(name, str) or not isinstance(ts, (int, float)) or pid not in contexts:
            tl.skipped += 1
            continue
        key = (name, pid, ev.get("tid"))
        if ev["ph"] == "B":
            opened[key] = ts
        elif key in opened:
            tl.ops.append(OpEvent(name, contexts[pid], "", name.startswith("_backward_"), ts - opened.pop(key)))


def _tensorflow(events: list, tl: Timeline) -> None:
    lanes = {}
    for pid, name in _processes(events).items():
        mt = _TF_LANE.match(name)
        if mt:
            lanes[pid] = (f"{mt.group(1).lower()}:{mt.group(2)}", (mt.group(3) or "").lstrip("/"))
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X" or ev.get("cat") != "Op":
            continue
        args = ev.get("args")
        op, node, dur = (args or {}).get("op"), (args or {}).get("name"), ev.get("dur")
        if not isinstance(op, str) or not isinstance(node, str) or not isinstance(dur, (int, float)) \
                or ev.get("pid") not in lanes:
            tl.skipped += 1
            continue
        device, lane = lanes[ev["pid"]]
        tl.ops.append(OpEvent(op, device, lane, node.startswith("gradients/") or "_grad/" in node, dur))


def parse(src: Source, framework: str) -> Timeline:
    doc = load_json(src, f"{'an MXNet profiler' if framework == 'mxnet' else 'a TensorFlow timeline'} file")
    found = sniff(doc)
    if found != framework:
        said = {"mxnet": "an MXNet profiler file", "tensorflow": "a TensorFlow timeline"}.get(found, "neither an MXNet "
                                                                                              "profiler file nor a "
                                                                                              "TensorFlow timeline")
        raise ImportFailed(f"{src.path}: not a {framework} operator timeline (it is {said})")
    events = doc["traceEvents"]
    tl = Timeline("MXNet profiler" if framework == "mxnet" else "TensorFlow timeline", framework, events=len(events))
    (_mxnet if framework == "mxnet" else _tensorflow)(events, tl)
    return tl


def _on(name: str, device: str) -> str:
    """An op's name as the trace shows it: on a CPU context as the CPU probes record
    it, on any other context with that context."""
    return name if device.startswith("cpu") else f"{name} [{device}]"


def _tree(tl: Timeline, primitive: str, pass_: str, names: tuple[str, ...]) -> Node | None:
    ops = [o for o in tl.ops if o.name in names and o.backward == (pass_ == "backward") and not o.lane]
    if not ops:
        return None
    streams: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for o in tl.ops:
        if o.name in names and o.backward == (pass_ == "backward") and o.lane:
            streams[(o.name, o.device)][o.lane] += 1
    children = []
    for (name, device), group in _group(ops).items():
        node = Node(Frame("op", tl.framework, _on(name, device)), len(group), int(sum(o.dur_us for o in group) * 1e3))
        node.children = [Node(Frame("op", f"{tl.framework}.stream", f"{_on(name, device)} on {lane}", "", 0,
                                    "GPU stream"), n, 0)
                         for lane, n in sorted(streams.get((name, device), Counter()).items())]
        children.append(node)
    return Node(Frame("root", "", f"{primitive}.{pass_}"), 1, sum(c.time_ns for c in children), children=children)


def _group(ops: list[OpEvent]) -> dict[tuple[str, str], list[OpEvent]]:
    out: dict[tuple[str, str], list[OpEvent]] = {}
    for o in ops:
        out.setdefault((o.name, o.device), []).append(o)
    return out


def import_op_timeline(path: Path, framework: str, rules: tuple[OpRule, ...], command: str = "") -> list[Imported]:
    src = read_source(path)
    tl = parse(src, framework)
    devices = Counter(o.device for o in tl.ops)
    device = "gpu" if any(not d.startswith("cpu") for d in devices) else "cpu"
    gpu = next((d for d, _ in devices.most_common() if not d.startswith("cpu")), "")
    origin = provenance(src.name, src.sha256, f"{tl.fmt} chrome-trace JSON")
    origin.update({"events": tl.events, "events_skipped_malformed": tl.skipped,
                   "recorded_by": f"{framework} (version not recorded in the file; see the provenance row)"})
    out = []
    for rule in rules:
        primitive = rule.primitive
        trees = {p: t for p, t in (("forward", _tree(tl, primitive, "forward", rule.forward)),
                                   ("backward", _tree(tl, primitive, "backward", rule.backward))) if t is not None}
        if not trees:
            continue
        passes = [p for p in PASSES if p in trees]
        meta = m.build_meta(framework=framework, version="unknown", primitive=primitive, variant=short_name(src.name),
                            passes=passes, shape=[], dtype=None,
                            machine_info={"arch": "unknown", "cpu": "", "gpu": gpu or "none", "vendor": "unknown"},
                            software={}, provenance=origin, command=command, device=device)
        runs = [Run(p, "warm", {"op": trees[p]}, {"source": tl.fmt}) for p in passes]
        ops = sum(n.count for t in trees.values() for n in t.children)
        out.append(Imported(Trace(meta, runs), primitive, passes, gpu or "cpu", 0, ops))
    if not out:
        common = ", ".join(f"{clip(n, 40)} ×{c}" for n, c in Counter(o.name for o in tl.ops).most_common(5))
        raise ImportFailed(f"{src.path}: none of dltrace's primitives in its {len(tl.ops)} operator records "
                           f"(most frequent: {common or 'none'})")
    return out

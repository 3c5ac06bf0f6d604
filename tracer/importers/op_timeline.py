"""A framework's own operator timeline (chrome-trace JSON, format op-timeline) to
traces.

Some frameworks' profilers record which operator ran on which device context:
MXNet's profiler (``mx.profiler``, 2019) puts each operator in a process named
``cpu/0`` or ``gpu/0``; TensorFlow 1.x's timeline (2017) has a ``/gpu:0 Compute``
lane holding the op as the executor placed it, and ``/gpu:0/stream:N`` lanes with
the same op on each CUDA stream (op names, not kernel names). How each records an
operator is its dialect, declared with the framework (frameworks.yaml
``profile_vocab.op-timeline.timeline``: the op events' category and phases, which
processes are devices, what marks a backward op). That is the CPU-vs-GPU split at
the operator level, the level the CPU probes' op layer records (``Convolution``,
``MatMul``): an operator that ran on a GPU context is named with it
(``Convolution [gpu/0]``), so ``dltrace diff`` of a CPU probe against the import
splits at the operator and calls it a device dispatch.

The files were recorded by other versions than the probes' (the version is
"unknown": neither format says it, the provenance row says when); which
primitive an op is comes from the op names alone (``profile_ops``).
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
from tracer.importers.checks import bad_span, bad_time
from tracer.importers.provenance import provenance
from tracer.importers.source import Source, clip, load_json, read_source, short_name
from tracer.registry_entries import OpRule, ProfileVocab, TimelineDialect
from tracer.trace import Frame, Node, Run, Trace

#: How many events are looked at to tell whose timeline a file is.
SNIFF_EVENTS = 2000


@dataclass
class OpEvent:
    name: str
    device: str  # "gpu/0", "gpu:0"
    lane: str  # "" or the GPU stream ("stream:12")
    backward: bool
    dur_us: float


@dataclass
class Timeline:
    fmt: str  # what recorded it ("MXNet profiler")
    framework: str
    ops: list[OpEvent] = field(default_factory=list)
    events: int = 0
    skipped: int = 0


def _marks(dialect: TimelineDialect, ev: dict[str, Any]) -> bool:
    """``ev`` is one of the dialect's op events (with its op name, where an arg holds it)."""
    if ev.get("cat") != dialect.category or ev.get("ph") not in dialect.phases:
        return False
    args = ev.get("args")
    return not dialect.op_arg or (isinstance(args, dict) and dialect.op_arg in args)


def sniff(doc: Any, dialects: dict[str, TimelineDialect]) -> str:
    """Whose operator timeline ``doc`` is: the framework of ``dialects`` whose op
    event comes first, or ""."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        return ""
    for ev in events[:SNIFF_EVENTS]:
        if isinstance(ev, dict):
            found = next((name for name, d in dialects.items() if _marks(d, ev)), "")
            if found:
                return found
    return ""


def _dialects() -> dict[str, tuple[str, TimelineDialect]]:
    """Every framework's timeline dialect, with what it calls its files: to say whose
    a file is when it is not the one asked for."""
    from tracer import registry

    out = {}
    for name, fw in registry.load().items():
        vocab = fw.profile_vocab.get("op-timeline")
        if vocab is not None and vocab.timeline is not None:
            out[name] = (vocab.producer or name, vocab.timeline)
    return out


def _processes(events: list[dict[str, Any]]) -> dict[Any, str]:
    return {ev.get("pid"): ev["args"]["name"] for ev in events
            if isinstance(ev, dict) and ev.get("ph") == "M" and ev.get("name") == "process_name"
            and isinstance(ev.get("args"), dict) and isinstance(ev["args"].get("name"), str)}


def _devices(events: list[dict[str, Any]], dialect: TimelineDialect) -> dict[Any, tuple[str, str]]:
    """pid -> (device context, lane) of the processes that are a device."""
    pattern = re.compile(dialect.devices)
    out = {}
    for pid, name in _processes(events).items():
        mt = pattern.match(name)
        if mt:
            lane = mt.group("lane") if "lane" in pattern.groupindex else None
            out[pid] = (mt.group("device").lower(), lane or "")
    return out


def _ops(events: list[dict[str, Any]], dialect: TimelineDialect, tl: Timeline, path: Path) -> None:
    """The dialect's op events as OpEvents: begin/end pairs matched per op, process
    and thread, or complete events with their duration. A time that is not finite,
    or an op that ends before it begins, is an ImportFailed naming the event: a
    trace of it would hold a time no command reads."""
    devices = _devices(events, dialect)
    backward = re.compile(dialect.backward)
    paired = dialect.phases != ("X",)
    opened: dict[tuple[Any, ...], tuple[int, float]] = {}
    for index, ev in enumerate(events):
        if not isinstance(ev, dict) or ev.get("cat") != dialect.category or ev.get("ph") not in dialect.phases:
            continue
        name = _field(ev, dialect.op_arg)
        node = _field(ev, dialect.node_arg) if dialect.node_arg else name
        key_ = "ts" if paired else "dur"
        when = ev.get(key_)
        if not isinstance(name, str) or not isinstance(node, str) or not isinstance(when, (int, float)) \
                or isinstance(when, bool) or ev.get("pid") not in devices:
            tl.skipped += 1
            continue
        wrong = bad_time(when) or ("" if paired or when >= 0 else f"is {when:g}, a negative duration")
        if wrong:
            raise ImportFailed(f"{path}: event {index} ({clip(name, 40)}): {key_} {wrong}; not imported")
        device, lane = devices[ev["pid"]]
        if not paired:
            tl.ops.append(OpEvent(name, device, lane, bool(backward.search(node)), float(when)))
            continue
        key = (name, ev["pid"], ev.get("tid"))
        if ev["ph"] == dialect.phases[0]:
            opened[key] = (index, float(when))
        elif key in opened:
            begun, start = opened.pop(key)
            wrong = bad_span(start, when)
            if wrong:
                raise ImportFailed(f"{path}: event {index} ({clip(name, 40)}, the end of event {begun}): "
                                   f"{wrong}; not imported")
            tl.ops.append(OpEvent(name, device, lane, bool(backward.search(node)), when - start))


def _field(ev: dict[str, Any], arg: str) -> Any:
    """The event's ``args[arg]``, or its own name when ``arg`` is ""."""
    if not arg:
        return ev.get("name")
    args = ev.get("args")
    return args.get(arg) if isinstance(args, dict) else None


def parse(src: Source, framework: str, vocab: ProfileVocab) -> Timeline:
    doc = load_json(src, f"a {framework} operator timeline")
    dialects = _dialects()
    found = sniff(doc, {name: d for name, (_, d) in dialects.items()})
    if found != framework or vocab.timeline is None:
        if found:
            said = f"it is {dialects[found][0]} output, read with --framework {found}"
        else:
            said = f"it is none of the operator timelines read: {', '.join(f for f, _ in dialects.values())}"
        raise ImportFailed(f"{src.path}: not a {framework} operator timeline ({said})")
    events = doc["traceEvents"]
    tl = Timeline(vocab.producer or framework, framework, events=len(events))
    _ops(events, vocab.timeline, tl, src.path)
    return tl


def _on(name: str, device: str) -> str:
    """An op's name as the trace shows it: on a CPU context as the CPU probes record
    it, on any other context with that context."""
    return name if device.startswith("cpu") else f"{name} [{device}]"


def _tree(tl: Timeline, primitive: str, pass_: str, names: tuple[str, ...]) -> Node | None:
    ops = [o for o in tl.ops if o.name in names and o.backward == (pass_ == "backward") and not o.lane]
    if not ops:
        return None
    streams: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
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


def import_op_timeline(path: Path, framework: str, rules: tuple[OpRule, ...], vocab: ProfileVocab = ProfileVocab(),
                       command: str = "") -> list[Imported]:
    src = read_source(path)
    tl = parse(src, framework, vocab)
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
        meta = m.build_meta(framework=framework, version=vocab.version, primitive=primitive,
                            variant=short_name(src.name, vocab.suffixes),
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

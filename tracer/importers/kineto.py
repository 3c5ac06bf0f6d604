"""A Kineto chrome-trace document (what ``torch.profiler`` exports) as checked,
typed events: host ops, runtime launches, GPU activities, forward-backward flows
and profiler steps.

Only what the importer reads is kept, and every field is checked before it is
used: an event with a string for a timestamp, a list for a name or a NaN
duration is counted in ``skipped`` and left out, so no later stage meets a wrong
type. Two schemas are read: today's (categories ``cpu_op``, ``kernel``,
``cuda_runtime``...) and torch 1.8-era files (``Operator``, ``Kernel``, ``Runtime``).
Times stay in the file's unit (microseconds, fractional); nothing is rounded here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from tracer.importers import ImportFailed
from tracer.importers.checks import MAX_US
from tracer.importers.source import Source, load_json

#: Event categories (lower-cased), current and old schema.
OP_CATS = frozenset({"cpu_op", "operator"})
KERNEL_CATS = frozenset({"kernel"})
MEMCPY_CATS = frozenset({"gpu_memcpy", "memcpy"})
MEMSET_CATS = frozenset({"gpu_memset", "memset"})
#: Host-side API calls that carry the correlation id of what they put on the GPU
#: (cudaLaunchKernel, hipExtModuleLaunchKernel, cuLaunchKernel, cudaMemcpyAsync...).
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime", "driver"})
#: Host annotations a profiler step can be recorded as (record_function; older
#: torch recorded ProfilerStep#N as an op).
STEP_CATS = frozenset({"user_annotation", "cpu_op", "operator"})
FLOW_CAT = "fwdbwd"
STEP_NAME = re.compile(r"^ProfilerStep#\d+$")


@dataclass(eq=False, slots=True)
class HostOp:
    """One op on a host thread (aten::conv2d, an autograd node...), with the tree
    :mod:`tracer.importers.hierarchy` builds around it."""

    name: str
    thread: tuple[Any, Any]  # (pid, tid)
    start: float
    end: float
    args: dict[str, Any]
    index: int  # position in the file: the order of events that start together
    parent: "HostOp | None" = None
    depth: int = 0  # ops above it on its thread
    children: list["HostOp"] = field(default_factory=list)
    #: what this op put on the GPU, with the host time of each launch
    device: list[tuple[float, "DeviceEvent"]] = field(default_factory=list)

    @property
    def dur(self) -> float:
        return self.end - self.start


@dataclass(eq=False, slots=True)
class DeviceEvent:
    """A kernel, memcpy or memset that ran on a GPU."""

    name: str
    kind: str  # kernel | memcpy | memset
    start: float
    dur: float
    correlation: int | None
    external_id: int | None
    device: int | None


@dataclass(frozen=True, slots=True)
class Launch:
    """A runtime or driver call on a host thread that carries a correlation id."""

    name: str
    thread: tuple[Any, Any]
    ts: float
    correlation: int


@dataclass(frozen=True, slots=True)
class FlowPoint:
    """One end of a flow arrow: ``s`` (start) or ``f`` (finish) of flow ``id``."""

    id: Any
    phase: str
    thread: tuple[Any, Any]
    ts: float


@dataclass(frozen=True, slots=True)
class Step:
    """A ``ProfilerStep#N`` annotation: one training or inference iteration."""

    name: str
    thread: tuple[Any, Any]
    start: float
    end: float


@dataclass
class KinetoProfile:
    source: Source
    header: dict[str, Any]  # the document's top-level keys but traceEvents (unchecked)
    ops: list[HostOp]
    launches: list[Launch]
    device: list[DeviceEvent]
    flows: list[FlowPoint]
    steps: list[Step]
    events: int  # events in the file
    skipped: int  # events left out as malformed
    schema: str  # "cpu_op" (current) or "Operator" (torch 1.8-era)
    first_skipped: int | None = None  # the index of the first malformed event, for the provenance


def _num(value: Any) -> float | None:
    """A finite int or float (not a bool, not NaN) within any real clock's range
    (:data:`MAX_US`: its nanoseconds, and a start plus a duration, stay finite), else None."""
    if value.__class__ in (int, float) and math.isfinite(value) and abs(value) <= MAX_US:
        return float(value)
    return None


def _int(value: Any) -> int | None:
    if value.__class__ is int:
        return value
    if value.__class__ is str and 0 < len(value) < 20 and value.isdigit():
        return int(value)
    return None


def _json_kind(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(
        value.__class__, "null")


def _thread(e: dict[str, Any]) -> tuple[Any, Any] | None:
    pid, tid = e.get("pid"), e.get("tid")
    if pid.__class__ in (int, str) and tid.__class__ in (int, str):
        return (pid, tid)
    return None


def parse(src: Source) -> KinetoProfile:
    """The checked events of a Kineto document, or a one-line ImportFailed saying
    why the file is not one."""
    doc = load_json(src, "a Kineto trace")
    if isinstance(doc, dict):
        if doc.get("format") == "dltrace-trace":
            raise ImportFailed(f"{src.path}: is a dltrace trace already, not a profiler file; nothing to import")
        events = doc.get("traceEvents")
        header = {k: v for k, v in doc.items() if k != "traceEvents"}
    else:
        events, header = doc, {}
    if not isinstance(events, list):
        got = (f"the document is a JSON {_json_kind(doc)}" if not isinstance(doc, dict)
               else "no traceEvents key" if "traceEvents" not in doc else f"traceEvents is a JSON {_json_kind(events)}")
        raise ImportFailed(f"{src.path}: not a Kineto trace (no traceEvents list: {got})")

    ops: list[HostOp] = []
    launches: list[Launch] = []
    device: list[DeviceEvent] = []
    flows: list[FlowPoint] = []
    steps: list[Step] = []
    skipped = 0
    first_skipped: int | None = None
    old_schema = 0
    for index, e in enumerate(events):
        if e.__class__ is not dict:
            skipped += 1
            first_skipped = index if first_skipped is None else first_skipped
            continue
        ph, cat = e.get("ph"), e.get("cat")
        cat = cat.lower() if cat.__class__ is str else ""
        if ph == "X":
            if not (cat in OP_CATS or cat in KERNEL_CATS or cat in MEMCPY_CATS or cat in MEMSET_CATS
                    or cat in LAUNCH_CATS or cat in STEP_CATS):
                continue
            name, ts, dur, thread = e.get("name"), _num(e.get("ts")), _num(e.get("dur")), _thread(e)
            if name.__class__ is not str or not name or ts is None or dur is None or dur < 0 or thread is None:
                skipped += 1
                first_skipped = index if first_skipped is None else first_skipped
                continue
            args = e.get("args")
            args = args if args.__class__ is dict else {}
            if STEP_NAME.match(name):
                if cat in STEP_CATS:
                    steps.append(Step(name, thread, ts, ts + dur))
                continue
            if cat in OP_CATS:
                old_schema += cat == "operator"
                ops.append(HostOp(name, thread, ts, ts + dur, args, index))
            elif cat in LAUNCH_CATS:
                corr = _int(args.get("correlation"))
                if corr is not None:
                    launches.append(Launch(name, thread, ts, corr))
            elif cat in KERNEL_CATS or cat in MEMCPY_CATS or cat in MEMSET_CATS:
                kind = "kernel" if cat in KERNEL_CATS else "memcpy" if cat in MEMCPY_CATS else "memset"
                device.append(DeviceEvent(name, kind, ts, dur, _int(args.get("correlation")),
                                          _int(args.get("External id")), _int(args.get("device"))))
        elif ph in ("s", "f") and cat == FLOW_CAT:
            ts, thread, fid = _num(e.get("ts")), _thread(e), e.get("id")
            if ts is None or thread is None or fid.__class__ not in (int, str):
                skipped += 1
                first_skipped = index if first_skipped is None else first_skipped
                continue
            flows.append(FlowPoint(fid, ph, thread, ts))
    if not ops:
        bad = f", {skipped} of them malformed" if skipped else ""
        kinds = "no events" if not events else f"{len(events)} events{bad}, no host op (cat cpu_op or Operator)"
        raise ImportFailed(f"{src.path}: not a Kineto trace ({kinds})")
    return KinetoProfile(src, header, ops, launches, device, flows, steps, len(events), skipped,
                         "Operator" if old_schema > len(ops) // 2 else "cpu_op", first_skipped)

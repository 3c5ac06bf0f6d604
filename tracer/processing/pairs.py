"""Which traces to set against which. A survey compares, for each framework,
primitive and API level: the default CPU path against each variant, against the
GPU path, and against the same path recorded on another machine (x86 vs ARM)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

from tracer.processing.evidence_class import evidence_class
from tracer.trace import Trace

#: Pair kinds, in the order a report shows them.
KINDS = ("device", "variant", "machine")
#: What each kind sets against the default CPU path (side A), as a report names it.
KIND_NAMES = {"device": "CPU vs another device", "variant": "CPU vs a CPU variant", "machine": "x86 vs another CPU"}


def machine_of(trace: Trace) -> str:
    m = trace.info.machine
    return f"{'?' if m.arch is None else m.arch} {'?' if m.cpu is None else m.cpu}"


def recorded_by(trace: Trace) -> str:
    """The fleet worker that recorded the trace (meta ``recorded_by``, tracer.fleet), "" for a local probe."""
    return trace.info.worker


def side_label(trace: Trace, with_machine: bool = False) -> str:
    m = trace.info
    label = m.device if m.variant == "default" else f"{m.device} {m.variant}"
    return f"{label} ({machine_of(trace)})" if with_machine else label


def case_key(trace: Trace) -> tuple[str, str, str, tuple[int, ...]]:
    m = trace.info
    return (m.framework, m.primitive, m.api, m.shape)


#: How a pair names a CPU path recorded on the GPU machine itself, set against that GPU path.
RECORDING_CPU = "the GPU machine's own CPU"


@dataclass(frozen=True)
class Pair:
    kind: str  # device | variant | machine
    a: Trace
    b: Trace
    reference: bool = False  # A is the GPU machine's own CPU path (:func:`reference_cpus`)

    @property
    def title(self) -> str:
        # a GPU is its own machine: only CPU paths of two machines need the machine named
        cross = self.kind == "machine" or (self.kind == "variant" and machine_of(self.a) != machine_of(self.b))
        if self.kind == "device" and self.reference:
            version = self.a.info.framework_version
            return f"{side_label(self.a)} ({RECORDING_CPU}{', ' + str(version) if version else ''}) vs " \
                   f"{side_label(self.b)}"
        return f"{side_label(self.a, cross)} vs {side_label(self.b, cross)}"


def _baseline(candidates: list[Trace], machine: str) -> Trace | None:
    same = [t for t in candidates if machine_of(t) == machine]
    return same[0] if same else candidates[0] if candidates else None


def _version(t: Trace) -> str:
    return str(t.info.framework_version or "")


def reference_cpus(traces: Iterable[Trace]) -> list[Trace]:
    """The default CPU paths recorded on a GPU machine beside its GPU path (a recorded
    folder's ``cpu-default``): same machine and framework version as a GPU trace of the
    case, where the case also has another default CPU path (this survey's own). Each is
    the baseline of its machine's GPU path only, never one of the survey's CPU paths:
    the GPU path is then set against its own version on its own machine, like with like."""
    traces = list(traces)
    # paths a device ran (derived evidence is read on this machine, not recorded on a GPU's)
    gpu = {(case_key(t), machine_of(t), _version(t)) for t in traces
           if t.info.device != "cpu" and evidence_class(t.info) == "recorded"}
    cpu: dict[tuple[str, str, str, tuple[int, ...]], list[Trace]] = defaultdict(list)
    for t in traces:
        if is_default_cpu(t) and not t.info.imported:
            cpu[case_key(t)].append(t)
    out = []
    for key, group in cpu.items():
        ref = [t for t in group if (key, machine_of(t), _version(t)) in gpu]
        if ref and len(ref) < len(group):
            out += ref
    return out


def is_default_cpu(t: Trace) -> bool:
    """The framework's default path on a CPU (no variant's switch applied): what every
    other path is set against."""
    return t.info.device == "cpu" and t.info.variant == "default"


def _stand_in(traces: list[Trace], t: Trace) -> list[Trace]:
    """For a trace recorded elsewhere by another tool (an imported GPU profile, at the
    model's own shape): the default CPU traces of the same framework and primitive,
    functional API and smallest shape first, that it is to be set against."""
    refs = {id(r) for r in reference_cpus(traces)}
    same = [x for x in traces if is_default_cpu(x) and not x.info.imported and id(x) not in refs
            and x.info.framework == t.info.framework and x.info.primitive == t.info.primitive]
    return sorted(same, key=lambda x: (x.info.api != "functional", len(x.info.shape), x.info.shape))[:1]


def pairs(traces: Iterable[Trace]) -> list[Pair]:
    """Comparable pairs: A is always the default CPU path (on the same machine as B
    where there is one), B a variant, the GPU, or another machine's default CPU path.
    An imported trace (api "imported": a GPU profile of a whole model) is set against
    the CPU probe of the same primitive, whatever its shape."""
    traces = list(traces)
    groups: dict[tuple[str, str, str, tuple[int, ...]], list[Trace]] = defaultdict(list)
    for t in traces:
        groups[case_key(t)].append(t)
    out: list[Pair] = []
    refs = {id(t) for t in reference_cpus(traces)}
    for key in sorted(groups):
        group = groups[key]
        base = [t for t in group if is_default_cpu(t) and id(t) not in refs]
        ref = [t for t in group if id(t) in refs]
        for t in group:
            if t in base or id(t) in refs:
                continue
            own = [r for r in ref if machine_of(r) == machine_of(t) and _version(r) == _version(t)]
            if own and t.info.device != "cpu" and evidence_class(t.info) == "recorded":
                out.append(Pair("device", own[0], t, reference=True))
                continue
            a = _baseline(base or (_stand_in(traces, t) if t.info.imported else []), machine_of(t))
            if a is not None:
                out.append(Pair("device" if t.info.device != "cpu" else "variant", a, t))
        machines = sorted({machine_of(t) for t in base})
        for i, m1 in enumerate(machines):
            for m2 in machines[i + 1:]:
                a, b = _baseline(base, m1), _baseline(base, m2)
                assert a is not None and b is not None  # m1 and m2 are machines of traces in base
                out.append(Pair("machine", a, b))
    out.sort(key=lambda p: (case_key(p.a), KINDS.index(p.kind), side_label(p.b)))
    return out

"""Which traces to set against which. A survey compares, for each framework,
primitive and API level: the default CPU path against each variant, against the
GPU path, and against the same path recorded on another machine (x86 vs ARM)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

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


@dataclass(frozen=True)
class Pair:
    kind: str  # device | variant | machine
    a: Trace
    b: Trace

    @property
    def title(self) -> str:
        # a GPU is its own machine: only CPU paths of two machines need the machine named
        cross = self.kind == "machine" or (self.kind == "variant" and machine_of(self.a) != machine_of(self.b))
        return f"{side_label(self.a, cross)} vs {side_label(self.b, cross)}"


def _baseline(candidates: list[Trace], machine: str) -> Trace | None:
    same = [t for t in candidates if machine_of(t) == machine]
    return same[0] if same else candidates[0] if candidates else None


def is_default_cpu(t: Trace) -> bool:
    """The framework's default path on a CPU (no variant's switch applied): what every
    other path is set against."""
    return t.info.device == "cpu" and t.info.variant == "default"


def _stand_in(traces: list[Trace], t: Trace) -> list[Trace]:
    """For a trace recorded elsewhere by another tool (an imported GPU profile, at the
    model's own shape): the default CPU traces of the same framework and primitive,
    functional API and smallest shape first, that it is to be set against."""
    same = [x for x in traces if is_default_cpu(x) and not x.info.imported
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
    for key in sorted(groups):
        group = groups[key]
        base = [t for t in group if is_default_cpu(t)]
        for t in group:
            if t in base:
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

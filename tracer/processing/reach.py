"""What one trace's path reaches: the libraries and ISA-specific code in its native
and op layers, the kernels (the hottest computing leaves), the kernel ops the
framework chose, its Python path's size and its time. Pure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from tracer.contract import PASSES
from tracer.knowledge import Knowledge
from tracer.processing.evidence_class import evidence_class
from tracer.processing.sampling import DEFAULT_THRESHOLD
from tracer.processing.summary import PathSummary, summarize
from tracer.processing.cpu_kernel import attribute, ranked
from tracer.processing.kernel_names import implausible
from tracer.processing.tags import isa_of, library_of, library_order, recorded_kernel_lib
from tracer.processing.tree import total_samples
from tracer.trace import Node, Trace


@dataclass
class Reach:
    """What one trace's warm path reaches, over both passes."""

    libraries: list[str]  # vendor and framework libraries in the native and op layers
    isa: list[str]  # ISA-specific code (from symbol names)
    kernels: list[tuple[str, str, int]]  # (pass, native leaf symbol, samples), hottest first
    ops: list[tuple[str, str]]  # (pass, leaf op): the backend kernels the framework chose
    handoffs: list[tuple[str, str]]  # (pass, C hand-off) when there is no op layer
    python: dict[str, PathSummary]  # pass -> summary of the python layer
    seconds: dict[str, float]  # pass -> untraced seconds per call
    device: str = "cpu"  # where this path ran
    default: bool = True  # the default variant (no switch applied)
    native_note: str = ""  # why there is no native layer, if there is none
    library_calls: list[tuple[str, str]] = field(default_factory=list)  # (pass, call the library reported), in order
    origin: str = ""  # where a trace recorded elsewhere came from (GPU, source, repository)
    evidence: str = ""  # a GPU path's evidence class (tracer.processing.evidence_class); "" on a CPU


def _leaves(tree: Node, kinds: tuple[str, ...], facts: Knowledge) -> Counter[str]:
    """Leaf frames of ``kinds``; for ops, the deepest op that is not a utility op (ops
    that allocate, view or copy, and the runtime's own records around a kernel, as
    each framework declares them in tracer.knowledge: every backend has them, and
    they hang below the kernel op, so they must not hide it; and the profiler's own
    markers, the knowledge's noise)."""

    def utility(name: str) -> bool:
        return facts.is_utility_op(name) or facts.is_noise(name)

    found: Counter[str] = Counter()
    for _, node in tree.walk():
        if node.frame.kind not in kinds:
            continue
        if node.frame.kind == "op":
            if utility(node.frame.name):
                continue
            inner = (c for _, c in node.walk() if c is not node and c.frame.kind == "op" and not utility(c.frame.name))
            if next(inner, None) is None:
                found[node.frame.label] += node.count
        elif not any(c.frame.kind in kinds for c in node.children):
            found[node.frame.label] += node.count
    return found


def native_kernels(native: Node, threshold: float = DEFAULT_THRESHOLD, most: int = 5,
                   *, k: Knowledge) -> list[tuple[str, int]]:
    """The frames that compute, in at least ``threshold`` of the samples: a vendor
    library's (oneDNN, Eigen, BLAS...) first, then the framework's own, most sampled
    first. Each sampled stack counts for its innermost frame that computes by the rules
    (tracer.processing.cpu_kernel.attribute: an allocator or lock sampled below a kernel
    counts for the kernel, but a frame sampled computing itself ranks first), and a stack
    with none counts for nothing (eager bookkeeping, bindings, reference counts, timers:
    tracer.processing.kernel_names); an impossible name (a complex LAPACK routine under a
    float32 probe) is no kernel (:func:`suspect_kernels`)."""
    found, total = attribute([native], k)
    return [(a.frame.label, a.own + a.below) for a in ranked(found, threshold * (total or 1), k)[:most]]


def suspect_kernels(native: Node, k: Knowledge) -> list[str]:
    """Why each sampled leaf whose name cannot be what ran is not named (kernel_names.implausible)."""
    return list(dict.fromkeys(why for node in _native_leaves(native) if (why := implausible(node.frame.name, k))))


def _native_leaves(native: Node) -> Iterator[Node]:
    """Each native leaf (no native child)."""
    stack = [native]
    while stack:
        node = stack.pop()
        if node.frame.kind == "native" and not any(c.frame.kind == "native" for c in node.children):
            yield node
        stack.extend(node.children)


def reach(trace: Trace, threshold: float = DEFAULT_THRESHOLD, *, k: Knowledge) -> Reach:
    """What ``trace``'s warm path reaches, read with the knowledge ``k``."""
    libs: Counter[str] = Counter()
    isa: set[str] = set()
    kernels, ops, handoffs, python, seconds, calls = [], [], [], {}, {}, []
    note = ""
    for pass_ in PASSES:
        run = trace.run(pass_, "warm")
        if run is None:
            continue
        if run.info.untraced_s is not None:
            seconds[pass_] = run.info.untraced_s
        if "python" in run.layers:
            python[pass_] = summarize(run.layers["python"])
            handoffs += [(pass_, name) for name in _leaves(run.layers["python"], ("c",), k)]
        native = run.layers.get("native")
        if native is not None:
            total = total_samples(native) or 1
            for _, node in native.walk():
                f = node.frame
                # a frame in a sample or two can be a misread stack (a bad unwind, a wrong symbol)
                if f.kind != "native" or node.count / total < threshold:
                    continue
                lib = library_of(f, k)
                if lib:
                    libs[lib] += node.count
                tag = isa_of(f, k)
                if tag:
                    isa.add(tag)
            kernels += [(pass_, name, n) for name, n in native_kernels(native, threshold, k=k)]
        elif run.info.not_captured.get("native"):
            note = run.info.not_captured["native"]
        op = run.layers.get("op")
        if op is not None:
            ops += [(pass_, name) for name in _leaves(op, ("op",), k)]
            for _, node in op.walk():
                # a GPU kernel dltrace's probe recorded untagged: the tag its importer would give it
                f = node.frame
                lib = (library_of(f, k) or recorded_kernel_lib(f, k)) if f.kind == "op" else ""
                if lib:
                    libs[lib] += 1
        lib_layer = run.layers.get("library")
        if lib_layer is not None:  # what the libraries said they ran: no sampling, every call
            for node in lib_layer.children:
                libs[library_of(node.frame, k)] += node.count
                tag = isa_of(node.frame, k)
                if tag:
                    isa.add(tag)
                if (pass_, node.frame.name) not in calls:
                    calls.append((pass_, node.frame.name))
    return Reach(sorted(libs, key=lambda lib: library_order(lib, k)), sorted(isa), kernels, ops, handoffs, python,
                 seconds, trace.info.device, trace.info.variant == "default", note, calls, origin(trace),
                 evidence_class(trace.info) or "")


def origin(trace: Trace) -> str:
    """"recorded on NVIDIA A100 by others: facebookresearch/HolisticTraceAnalysis@f4d0062c"
    for an imported trace, "" for dltrace's own."""
    prov = trace.info.provenance
    if prov is None:
        return ""
    gpu = trace.info.machine.gpu or prov.gpu
    where = prov.origin or prov.source
    return f"recorded{' on ' + gpu if gpu else ''} by others: {where}" if where else ""

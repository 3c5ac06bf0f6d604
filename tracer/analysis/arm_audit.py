"""The ARM audit: per primitive, what runs on each aarch64 CPU (emulated, or native
where a fleet worker or another machine recorded it) next to this machine, from the
library layer (what oneDNN and MKL report they ran: the implementation and its
ISA), and where a CPU falls back to reference code or fails.

Porting to an ARM server is mostly a question of which of the vendor library's
implementations a CPU gets (oneDNN: brgconv:sve_512 on A64FX, indirect_gemm:acl on
Neoverse-N1, gemm:ref where nothing better exists): the aten ops are the same on
both. Emulated traces say so (meta ``emulated``), native ones by their machine's
architecture; nothing here is a timing. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tracer.contract import PASSES, PRIMITIVES
from tracer.gap import Gap
from tracer.knowledge import Knowledge
from tracer.trace import Trace

#: oneDNN's implementations that are its reference code: no ISA-specific kernel exists
#: for this CPU (what a port must write, or accept as slow).
REFERENCE = re.compile(r"(?:^|[\s:])(?:ref|simple)(?:[\s:_)]|$)")


@dataclass
class ArmCell:
    """One primitive on one CPU."""

    calls: dict[str, list[str]] = field(default_factory=dict)  # pass -> distinct library calls, in order
    reference: list[str] = field(default_factory=list)  # calls that are reference implementations
    capability: str = ""  # the ISA the framework's own kernels dispatched to (torch: SVE256, AVX512...)
    blas: str = ""  # the BLAS kernels OpenBLAS chose for this CPU (it reports no calls)
    failed: str = ""  # why the case could not run there (a gap)
    #: pass -> what a compiler chose, where the framework compiles (XLA's compiled HLO
    #: instructions: convolution, fusion(kCustom):__ynn_fusion for YNNPACK)
    compiled: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class ArmAudit:
    machines: list[str]  # column labels: this machine first, then each emulated CPU
    rows: dict[str, dict[str, ArmCell]]  # primitive -> machine -> cell
    #: machine -> the BLAS the framework's build there links, as the build says (torch's
    #: BLAS_INFO: MKL on x86, NVPL in PyPI's aarch64 2.13): context, never a verdict
    linked_blas: dict[str, str] = field(default_factory=dict)


#: The architecture names of ARM machines (Linux, macOS).
ARM_ARCHES = ("aarch64", "arm64")


def _arch(trace: Trace) -> str:
    arch = trace.info.machine.arch
    return "?" if arch is None else arch


def on_arm(trace: Trace) -> str:
    """"emulated" or "native" for a trace recorded on an aarch64 CPU, "" otherwise."""
    if trace.info.emulated is not None:
        return "emulated"
    return "native" if _arch(trace) in ARM_ARCHES else ""


def machine_label(trace: Trace) -> str:
    """The column: the machine, and the variant where it is not the default (TensorFlow
    runs onednn-on there too: oneDNN is off by default on ARM)."""
    emulated = trace.info.emulated
    variant = trace.info.variant
    suffix = "" if variant == "default" else f", {variant}"
    if emulated is not None:
        return f"{emulated.cpu} (emulated){suffix}"
    if on_arm(trace):
        return f"{_arch(trace)} (native){suffix}"
    return f"{_arch(trace)} (this machine){suffix}"


def _default_shape(trace: Trace) -> tuple[int, ...] | None:
    prim = PRIMITIVES.get(trace.info.primitive)
    return tuple(prim.shape) if prim else None


def _gap_label(gap: Gap) -> str:
    suffix = "" if gap.variant == "default" else f", {gap.variant}"
    return f"{gap.cpu} (emulated){suffix}" if gap.cpu else f"{gap.arch} (native){suffix}"


def _by_variant(traces: list[Trace]) -> list[Trace]:
    """Each machine's columns together, its default path before its variants."""
    return sorted(traces, key=lambda t: (machine_label(t).split(",")[0], t.info.variant != "default"))


def _compiled(trace: Trace, pass_: str) -> list[str]:
    """The instructions a compiler emitted for the pass, from the op layer: the children
    of a compiler's node (JAX: ``XLA:cpu``), in order, without repeats."""
    layer = trace.layer(pass_, "op")
    if layer is None:
        return []
    return list(dict.fromkeys(k.frame.name for n in layer.children if n.frame.name.startswith("XLA:")
                              for k in n.children))


#: BLAS_INFO's words as the libraries call themselves
_BLAS_NAMES = {"mkl": "MKL", "nvpl": "NVPL", "open": "OpenBLAS", "armpl": "Arm Performance Libraries",
               "accelerate": "Accelerate", "blis": "BLIS", "flexi": "FlexiBLAS"}


def _numpy_blas_computes(trace: Trace, k: Knowledge) -> bool:
    """NumPy's OpenBLAS is the framework's BLAS only where the framework has no native
    core of its own (Chainer: its kernels are NumPy's); elsewhere (torch's oneDNN and
    MKL, TensorFlow's Eigen, XLA) the OpenBLAS numpy loaded computes none of the primitive,
    and its per-CPU kernel family would read as a finding on every primitive."""
    return trace.info.framework in k.pure_python


def _cell(trace: Trace, k: Knowledge) -> ArmCell:
    core = trace.info.openblas_core if _numpy_blas_computes(trace, k) else ""
    cell = ArmCell(capability=trace.info.cpu_capability, blas=f"OpenBLAS, {core} kernels" if core else "")
    for pass_ in PASSES:
        layer = trace.layer(pass_, "library")
        if layer is None:
            continue
        names = list(dict.fromkeys(call_name(n.frame.name, n.frame.module, trace) for n in layer.children))
        cell.calls[pass_] = names
        if _compiled(trace, pass_):
            cell.compiled[pass_] = _compiled(trace, pass_)
        cell.reference += [n for n in names if REFERENCE.search(n) and n not in cell.reference]
    return cell


def call_name(name: str, library: str, trace: Trace) -> str:
    """A library call as the audit names it: NVPL's BLAS calls carry the platform it chose
    its kernels for (its verbose log says it once: "Generic ASIMD", "Neoverse V2")."""
    facts = trace.info.library.get(library) if library == "NVPL" else None
    platform = str(facts.get("platform") or "") if isinstance(facts, dict) else ""
    return f"{name} (NVPL, {platform})" if platform else name


def arm_audit(traces: list[Trace], gaps: list[Gap], k: Knowledge) -> ArmAudit | None:
    """The audit over a framework's CPU traces at the default shapes, functional API
    (the default path, and each variant that also ran on ARM), when any of them ran
    on an aarch64 CPU, emulated or native, or such a case is a gap; None otherwise."""
    functional = [t for t in traces if t.info.device == "cpu" and t.info.api == "functional"]
    arm = [t for t in functional if on_arm(t)]
    arm_gaps = [g for g in gaps if getattr(g, "cpu", "") or getattr(g, "arch", "")]
    if not arm and not arm_gaps:
        return None
    # the default path, and each variant that also ran on ARM, on every machine
    variants = {"default", *(t.info.variant for t in arm)}
    chosen = [t for t in functional if t.info.variant in variants]
    arm = [t for t in chosen if on_arm(t)]
    # one shape per primitive: the default one where an ARM trace has it (a native ARM
    # machine's survey also has the kernel shapes)
    shapes = {t.info.primitive: t.info.shape for t in arm}
    shapes.update({t.info.primitive: t.info.shape for t in arm if t.info.shape == _default_shape(t)})
    host = [t for t in chosen if not on_arm(t) and t.info.shape == shapes.get(t.info.primitive)]
    arm = [t for t in arm if t.info.shape == shapes.get(t.info.primitive)]
    gap_label = {id(g): _gap_label(g) for g in arm_gaps}
    machines = list(dict.fromkeys([*map(machine_label, _by_variant(host)), *map(machine_label, _by_variant(arm)),
                                   *gap_label.values()]))
    rows: dict[str, dict[str, ArmCell]] = {}
    linked: dict[str, str] = {}
    for t in host + arm:
        rows.setdefault(t.info.primitive, {})[machine_label(t)] = _cell(t, k)
        if t.info.blas:
            linked.setdefault(machine_label(t), _BLAS_NAMES.get(t.info.blas, t.info.blas))
    for g in arm_gaps:
        rows.setdefault(g.primitive or "(all)", {}).setdefault(gap_label[id(g)], ArmCell()).failed = g.error
    return ArmAudit(machines, rows, linked)

"""The ARM audit: per primitive, what runs on each emulated aarch64 CPU next to this
machine, from the library layer (what oneDNN and MKL report they ran: the
implementation and its ISA), and where a CPU falls back to reference code or fails.

Porting to an ARM server is mostly a question of which of the vendor library's
implementations a CPU gets (oneDNN: brgconv:sve_512 on A64FX, indirect_gemm:acl on
Neoverse-N1, gemm:ref where nothing better exists): the aten ops are the same on
both. Emulated traces say so (meta ``emulated``); nothing here is a timing. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tracer.contract import PASSES
from tracer.process.pairs import is_default_cpu
from tracer.trace import Trace

#: oneDNN's implementations that are its reference code: no ISA-specific kernel exists
#: for this CPU (what a port must write, or accept as slow).
_REFERENCE = re.compile(r"(?:^|[\s:])(?:ref|simple)(?:[\s:_)]|$)")


@dataclass
class ArmCell:
    """One primitive on one CPU."""

    calls: dict[str, list[str]] = field(default_factory=dict)  # pass -> distinct library calls, in order
    reference: list[str] = field(default_factory=list)  # calls that are reference implementations
    capability: str = ""  # the ISA the framework's own kernels dispatched to (torch: SVE256, AVX512...)
    blas: str = ""  # the BLAS kernels OpenBLAS chose for this CPU (it reports no calls)
    failed: str = ""  # why the case could not run there (a gap)


@dataclass
class ArmAudit:
    machines: list[str]  # column labels: this machine first, then each emulated CPU
    rows: dict[str, dict[str, ArmCell]]  # primitive -> machine -> cell


def _label(trace: Trace) -> str:
    emulated = trace.meta.get("emulated")
    if isinstance(emulated, dict):
        return f"{emulated.get('cpu', '?')} (emulated)"
    machine = trace.meta.get("machine") if isinstance(trace.meta.get("machine"), dict) else {}
    return f"{machine.get('arch', '?')} (this machine)"


def _cell(trace: Trace) -> ArmCell:
    library = trace.meta.get("library") if isinstance(trace.meta.get("library"), dict) else {}
    blas = library.get("OpenBLAS") if isinstance(library.get("OpenBLAS"), dict) else {}
    cell = ArmCell(capability=str(trace.meta.get("cpu_capability", "")),
                   blas=f"OpenBLAS, {blas['core']} kernels" if blas.get("core") else "")
    for pass_ in PASSES:
        layer = trace.layer(pass_, "library")
        if layer is None:
            continue
        names = list(dict.fromkeys(n.frame.name for n in layer.children))
        cell.calls[pass_] = names
        cell.reference += [n for n in names if _REFERENCE.search(n) and n not in cell.reference]
    return cell


def arm_audit(traces: list[Trace], gaps: list[Any]) -> ArmAudit | None:
    """The audit over a framework's default CPU traces at the default shapes, functional
    API, when any of them ran on an emulated CPU; None otherwise."""
    chosen = [t for t in traces if is_default_cpu(t) and t.meta.get("api") == "functional"]
    emulated = [t for t in chosen if isinstance(t.meta.get("emulated"), dict)]
    arm_gaps = [g for g in gaps if getattr(g, "cpu", "")]
    if not emulated and not arm_gaps:
        return None
    shapes = {t.meta["primitive"]: t.meta.get("shape") for t in emulated}
    host = [t for t in chosen if not isinstance(t.meta.get("emulated"), dict)
            and t.meta.get("shape") == shapes.get(t.meta["primitive"])]
    machines = list(dict.fromkeys([*map(_label, host), *map(_label, emulated),
                                   *(f"{g.cpu} (emulated)" for g in arm_gaps)]))
    rows: dict[str, dict[str, ArmCell]] = {}
    for t in host + emulated:
        rows.setdefault(t.meta["primitive"], {})[_label(t)] = _cell(t)
    for g in arm_gaps:
        rows.setdefault(g.primitive, {}).setdefault(f"{g.cpu} (emulated)", ArmCell()).failed = g.error
    return ArmAudit(machines, rows)

"""The portability scorecard: one row per framework, the first thing the report
shows, so that a team choosing which framework to port first reads the comparison
measured, each figure (tracer.analysis.figure.Figure) with the line that says what it counts
and where its evidence is.

The survey dltrace grew from ended on "TensorFlow is modular, Chainer has no
separation of concerns, MKL-DNN's ~81k lines are a proxy of one backend's effort".
Here each of those is a count over the traces:

* where the device and backend decisions are made: decision sites, the code that
  chooses, each counted once however many ops it chooses for (tracer.analysis.decisions:
  TensorFlow's kernel registry is one site); splits that are no decision (two
  versions' own code, jit against eager, a model's context...) shown apart, never
  in a headline figure;
* what a new backend must implement and gets free, from tracer.analysis.backend_needs
  (the two columns' figures: tracer.analysis.needs_figures);
* the vendor libraries each path reaches;
* the machine code each path reaches, per library, in bytes (symbol sizes read from
  the shared objects by a caller-supplied measure, tracer.elf_code; the JIT code
  oneDNN generated for this CPU shown beside it, never counted), and the Python lines in
  device-specific branches (the bytes' figure: tracer.analysis.code_bytes);
* coverage per primitive and pass: CPU x86, GPU by evidence class, ARM (emulated or native).

Where a framework's evidence is thinner (no native layer, no GPU trace, no dispatch
table, no ARM trace) its cell says so: a missing measurement is never a small one.
Pure: the shared objects are read by the function passed in.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping

from tracer.analysis.arm_audit import on_arm
from tracer.analysis.code_bytes import Measure, bytes_figure, path_kind, reads
from tracer.analysis.decisions import Decisions, decisions, device_branches, is_device_branch
from tracer.analysis.figure import Figure, page
from tracer.analysis.needs_figures import needs_figures
from tracer.analysis.portability import FrameworkReport
from tracer.contract import PASSES
from tracer.knowledge import Knowledge
from tracer.processing.evidence_class import EVIDENCE_ORDER, evidence_class
from tracer.processing.pairs import reference_cpus
from tracer.processing.tags import JIT, is_gpu_lib, is_vendor_lib, library_order
from tracer.trace import Trace

#: The evidence classes of a GPU trace (the shared GPU evidence contract).
EVIDENCE = EVIDENCE_ORDER


@dataclass
class ScoreRow:
    framework: str
    figures: dict[str, Figure]  # column -> cell, in COLUMNS order


#: Column key -> what its figure counts, said once under the header. Every headline
#: figure counts one kind of thing, in one unit for every framework.
EXPLAIN = {
    "decisions": "decision sites: the code that chooses a device's, a library's or an ISA's code (a Python "
                 "device branch, an op whose C++ calls another op per device, the kernel registry, a backend "
                 "selection, a vendor library's ISA dispatch), counted once however many ops it chooses for",
    "apart": "split points that are no decision, shown apart and never counted above: two framework versions' "
             "own code, jit against eager, the model around an imported slice, derived evidence's shape, "
             "the stand-in's own code, splits no rule could class",
    "implement": "entries a new backend registers at the framework's backend interface (unit named per "
                 "framework) for the nine primitives, forward and backward; compiler artefacts, engine "
                 "bookkeeping and CPU-library ops are not entries",
    "free": "ops it gets without writing a kernel: they decompose, or have a backend-agnostic kernel",
    "vendor": "vendor libraries the default x86 CPU path reaches that the GPU path, or an ARM CPU's path, "
              "does not: what a port replaces",
    "bytes": "machine code (ELF symbol sizes) of the native functions the paths were sampled in, read from "
             "the framework's own shared objects in its environment; left out where any could not be read",
    "lines": "source lines in the arms (taken and not) of the device/backend branches the default CPU path evaluated",
    "coverage": "primitives traced on this x86 CPU, on a GPU by evidence class (recorded, imported, registered, "
                "lowered, compiled, source), on aarch64 CPUs",
}

#: Column key -> header.
COLUMNS = {
    "decisions": "decision sites",
    "apart": "splits that are no decision",
    "implement": "a new backend must implement",
    "free": "it gets free",
    "vendor": "libraries a port replaces",
    "bytes": "backend-specific machine code reached",
    "lines": "Python lines in device branches",
    "coverage": "coverage",
}

#: Columns whose value is a headline figure (the rest say what is shown apart, or coverage).
HEADLINE = ("decisions", "implement", "free", "vendor", "bytes", "lines")


def evidence_of(trace: Trace) -> str:
    """A GPU trace's evidence class (tracer.processing.evidence_class, "recorded" when it says none)."""
    return evidence_class(trace.info) or "recorded"


def decision_figures(rep: FrameworkReport, found: Decisions) -> tuple[Figure, Figure]:
    """Decision sites (the Python device branches a single trace shows are sites too,
    merged with a split at the same line), and the splits that are none, by kind, from
    the framework's decisions (tracer.analysis.decisions)."""
    sites = {s.site: s.kind for s in found.sites}
    for c in device_branches(rep):
        sites.setdefault(c.function, "python")  # the deciding function: one site with a split in it
    by_kind: dict[str, int] = defaultdict(int)
    for kind in sites.values():
        by_kind[kind] += 1
    registry = next((s for s in found.sites if s.kind == "registry"), None)
    parts = [f"{n} {kind}" + (f" ({len(registry.entries)} ops)" if kind == "registry" and registry else "")
             for kind, n in by_kind.items()]
    details = [f"{s.kind}: {s.site}" + (f" — chooses for {len(s.entries)}: {', '.join(s.entries[:6])}"
                                         if len(s.entries) > 1 or s.entries[:1] != [s.site] else "")
               for s in found.sites]
    details += [f"python (single trace): {c.function} ({c.file}:{c.line}): {c.condition}"
                for c in device_branches(rep) if c.function not in {s.site for s in found.sites}][:8]
    fig = Figure(str(len(sites)), "; ".join(parts) or "none found", page(rep, "dispatch-table"), details[:14],
                 unit="decision sites", items=list(sites))
    if not any(c.pairs for c in rep.cases) and not device_branches(rep):
        fig.thin = "no second path traced (no variant or GPU pair): no split could show"
    apart = Figure(" · ".join(f"{n} {kind}" for kind, n in found.apart.items()) or "none",
                   f"{found.decision_splits} split point(s) of the decision classes, nested ones included",
                   page(rep, "dispatch-table"), unit="split points")
    return fig, apart


def vendor_figure(rep: FrameworkReport, k: Knowledge) -> Figure:
    """The vendor libraries of the default x86 CPU path that the GPU path, or an ARM
    CPU's, does not reach (what a port replaces), and what those paths reach instead."""
    def order(lib: str) -> tuple[int, str]:
        return library_order(lib, k)

    libs: dict[str, set[str]] = defaultdict(set)
    for side, found in rep.libraries.items():
        kind = path_kind(side)
        if kind:
            libs[kind].update(lib for lib in found if is_vendor_lib(lib, k) or is_gpu_lib(lib, k) or lib == JIT)
    cpu = libs.get("cpu", set())
    details, replaced = [f"x86 CPU: {', '.join(sorted(cpu, key=order)) or 'none'}"], set()
    for kind, name in (("gpu", "GPU"), ("arm", "ARM")):
        if kind not in libs:
            details.append(f"{name}: no path traced")
            continue
        gone = cpu - libs[kind]
        replaced |= gone
        instead = sorted(libs[kind] - cpu, key=order)
        shown = ", ".join(instead[:4]) + (f" +{len(instead) - 4} more" if len(instead) > 4 else "")
        details.append(f"{name} path replaces {', '.join(sorted(gone, key=order)) or 'nothing'}"
                       f" with {shown or 'nothing new'}")
    fig = Figure(str(len(replaced)), ", ".join(sorted(replaced, key=order)) or "none",
                 page(rep, "audit-table"), details, unit="libraries", items=sorted(replaced, key=order))
    if "gpu" not in libs and "arm" not in libs:
        fig.thin = "no GPU or ARM path traced: nothing to compare with"
        fig.value = "—"
    return fig


def _lines(rep: FrameworkReport) -> Figure:
    spans: dict[tuple[str, int], int] = {}
    for case in rep.cases:
        for c in case.candidates:
            if is_device_branch(c):  # not jit against eager, not an exception type's name
                spans[(c.file, c.line)] = sum(a.last_line - a.first_line + 1 for a in c.arms if a.first_line)
    return Figure(str(sum(spans.values())), f"in {len(spans)} branch(es)", page(rep, "primitives"), unit="lines",
                  items=[f"{f}:{ln}" for f, ln in spans])


def _coverage(rep: FrameworkReport, traces: list[Trace]) -> Figure:
    cpu: dict[str, set[str]] = defaultdict(set)
    arm: dict[str, set[str]] = defaultdict(set)
    arm_kinds: set[str] = set()
    gpu: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for t in traces:
        passes = {r.pass_ for r in t.runs}
        prim = t.info.primitive
        for p in passes:
            if t.info.device == "gpu":
                gpu[evidence_of(t)][p].add(prim)
            elif on_arm(t):
                arm[p].add(prim)
                arm_kinds.add(on_arm(t))
            elif t.info.machine.arch in (None, "x86_64", "AMD64", ""):
                cpu[p].add(prim)
    n = len(rep.primitives) or 1

    def count(d: dict[str, set[str]]) -> str:
        return " · ".join(f"{p[:3]} {len(d.get(p, ()))}/{n}" for p in PASSES)

    details = [f"CPU x86: {count(cpu)}"]
    strongest_first = sorted(gpu, key=lambda ev: (EVIDENCE.index(ev) if ev in EVIDENCE else len(EVIDENCE), ev))
    details += [f"GPU ({ev}): {count(gpu[ev])}" for ev in strongest_first]
    details.append(f"ARM ({', '.join(sorted(arm_kinds))}): {count(arm)}" if arm else "ARM: no trace")
    thin = []
    if not gpu:
        thin.append("no GPU evidence")
    if not arm:
        thin.append("no ARM trace")
    else:
        on_arm_prims = set().union(*arm.values())
        failed = {g.primitive for g in rep.gaps if getattr(g, "cpu", "") or getattr(g, "arch", "")}
        unplanned = len(rep.primitives) - len(on_arm_prims | failed)
        if unplanned > 0:  # neither traced nor a gap: the survey did not plan them there
            thin.append(f"ARM: {len(on_arm_prims)} of {len(rep.primitives)} primitives traced, {unplanned} not "
                        "planned there (frameworks.yaml aarch64.primitives; dltrace survey --arm-all runs them)")
    value = (f"CPU {len(cpu.get('forward', ()))}/{n} · GPU {'/'.join(strongest_first) or '—'} · "
             f"ARM {len(arm.get('forward', ()))}/{n}")
    return Figure(value, "forward; per pass in details",
                  page(rep, "primitives"), details, "; ".join(thin))


def _measured(traces: list[Trace]) -> dict[str, list[Trace]]:
    """framework -> the traces its row measures: a GPU machine's CPU path is its GPU
    path's baseline only."""
    refs = {id(t) for t in reference_cpus(traces)}
    by_fw: dict[str, list[Trace]] = defaultdict(list)
    for t in traces:
        if id(t) not in refs:
            by_fw[t.info.framework].append(t)
    return by_fw


def elf_reads(traces: list[Trace], k: Knowledge) -> dict[tuple[str, int | None], frozenset[str]]:
    """Every shared object the scorecard's code column will read, with the names it asks
    of each (tracer.analysis.code_bytes.reads): read ahead, while the reports are made."""
    out: dict[tuple[str, int | None], frozenset[str]] = {}
    for mine in _measured(traces).values():
        out.update(reads(mine, k))
    return out


def scorecard(reports: list[FrameworkReport], traces: list[Trace], measure: Measure | None,
              k: Knowledge, decided: Mapping[str, Decisions] | None = None) -> list[ScoreRow]:
    """One row per framework; ``measure`` reads a shared object's symbol sizes
    (tracer.elf_code.ElfCode().sizes), None where they cannot be read; ``k``: the
    knowledge the caller loaded."""
    by_fw = _measured(traces)
    rows = []
    for rep in reports:
        mine = by_fw.get(rep.name, [])
        sites, apart = decision_figures(rep, decided[rep.name] if decided is not None else decisions(rep, k))
        implement, free = needs_figures(rep, k)
        rows.append(ScoreRow(rep.name, {
            "decisions": sites, "apart": apart, "implement": implement, "free": free, "vendor": vendor_figure(rep, k),
            "bytes": bytes_figure(rep, mine, measure, k), "lines": _lines(rep), "coverage": _coverage(rep, mine)}))
    return rows

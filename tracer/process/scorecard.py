"""The portability scorecard: one row per framework, the first thing the report
shows, so that a team choosing which framework to port first reads the comparison
measured, each figure with the line that says what it counts and where its evidence is.

The survey dltrace grew from ended on "TensorFlow is modular, Chainer has no
separation of concerns, MKL-DNN's ~81k lines are a proxy of one backend's effort".
Here each of those is a count over the traces:

* where the device and backend decisions are made: device branches in Python (the
  single-trace candidates that pick an implementation, and python-layer dispatch
  points) against decisions in the C++ dispatcher or kernel registry (op- and
  native-layer dispatch points) and in the library itself (oneDNN's ISA dispatch);
* what a new backend must implement and gets free, from tracer.process.backend_needs;
* the vendor libraries each path reaches;
* the machine code each path reaches, per library, in bytes (symbol sizes read from
  the shared objects by a caller-supplied measure, tracer.elf_code; JIT code
  from oneDNN's perf map as the capture recorded it), and the Python lines in
  device-specific branches;
* coverage per primitive and pass: CPU x86, GPU by evidence class, ARM (emulated or native).

Where a framework's evidence is thinner (no native layer, no GPU trace, no dispatch
table, no ARM trace) its cell says so: a missing measurement is never a small one.
Pure: the shared objects are read by the function passed in.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

from tracer.contract import PASSES
from tracer.process.arm_audit import on_arm
from tracer.process.pairs import side_label
from tracer.process.evidence_class import EVIDENCE_ORDER, evidence_class
from tracer.process.portability import FrameworkReport
from tracer.process.standin_needs import StandinNeeds
from tracer.process.ran_kernels import REWRITE
from tracer.process.tags import JIT, SYSTEM_LIBS, is_gpu_lib, is_vendor_lib, library_of, library_order
from tracer.trace import Frame, Trace

#: The evidence classes of a GPU trace (the shared GPU evidence contract).
EVIDENCE = EVIDENCE_ORDER


class LibraryCodeLike(Protocol):
    sizes: dict[str, int]
    missing: list[str]
    error: str


#: (shared object's path, its size at capture or None, sampled names) -> what its tables say.
Measure = Callable[[str, "int | None", Iterable[str]], LibraryCodeLike]


@dataclass
class Figure:
    """One cell: the figure, the line that says what it counts, where its evidence
    is (a link into the framework's page), and details (per path, per library)."""

    value: str
    explain: str
    link: str
    details: list[str] = field(default_factory=list)
    thin: str = ""  # why the evidence is thinner here: shown instead of a score


@dataclass
class ScoreRow:
    framework: str
    figures: dict[str, Figure]  # column -> cell, in COLUMNS order


#: Column key -> what its figure counts, said once under the header.
EXPLAIN = {
    "python": "device branches in the framework's Python that pick an implementation (single trace: the arm not "
              "taken calls other code) + python-layer split points between traced paths",
    "registry": "op- and native-layer split points (dispatch keys, the kernel registry), and library-layer ones "
                "the framework's op rewrite made; decisions inside a vendor library (its ISA dispatch) counted apart",
    "implement": "distinct ops/kernels a new backend registers for the nine primitives, forward and backward: "
                 "run on a stand-in device where the framework has one, else its dispatch tables, else the "
                 "audit's per-pass lists (derived GPU evidence, or the CPU path's operators)",
    "free": "ops it gets without writing a kernel: they decompose, or have a backend-agnostic kernel",
    "vendor": "vendor and GPU libraries and JIT code any traced path reaches, per path in details",
    "bytes": "machine code (ELF symbol sizes) of the native functions a path was sampled in, vendor and framework "
             "libraries (system ones left out), + oneDNN JIT kernels (perf map); per path and library in details",
    "lines": "source lines in the arms (taken and not) of the device/backend branches the default CPU path evaluated",
    "coverage": "primitives traced on this x86 CPU, on a GPU by evidence class (recorded, imported, registered, "
                "lowered, compiled, source), on emulated aarch64 CPUs",
}

#: Column key -> header.
COLUMNS = {
    "python": "deciding points in Python",
    "registry": "deciding points in the C++ dispatcher / kernel registry",
    "implement": "a new backend must implement",
    "free": "it gets free",
    "vendor": "vendor libraries to replace or provide",
    "bytes": "backend-specific machine code reached",
    "lines": "Python lines in device branches",
    "coverage": "coverage",
}


def evidence_of(trace: Trace) -> str:
    """A GPU trace's evidence class (tracer.process.evidence_class, "recorded" when it says none)."""
    return evidence_class(trace.info) or "recorded"


def _page(rep: FrameworkReport, anchor: str) -> str:
    """Where a figure's evidence is on its framework's page: the anchor (the renderer
    knows the page's file name)."""
    return anchor


def _deciding(rep: FrameworkReport) -> tuple[Figure, Figure]:
    branches = {(c.file, c.line): c for c in rep.device_branches}
    py_points = [p for p in rep.dispatch_points if p.layer == "python"]
    # a library-layer row whose sides ran the framework's op rewrite was decided by the
    # framework's C++ (TensorFlow's _MklNative rewrite), not by the library
    rewritten = [p for p in rep.dispatch_points if p.layer == "library"
                 and any(REWRITE in k for k in p.a_kernels + p.b_kernels)]
    reg_points = [p for p in rep.dispatch_points if p.layer in ("op", "native")] + rewritten
    lib_points = [p for p in rep.dispatch_points if p.layer == "library" and p not in rewritten]
    python = Figure(
        str(len(branches) + len(py_points)),
        f"{len(branches)} device branch(es) + {len(py_points)} split(s)",
        _page(rep, "dispatch-table"),
        [f"{c.function} ({c.file}:{c.line}): {c.condition}" for c in list(branches.values())[:6]]
        + [f"split at {p.display}" for p in py_points[:4]])
    registry = Figure(
        str(len(reg_points)),
        f"+ {len(lib_points)} inside a vendor library",
        _page(rep, "dispatch-table"),
        [f"{'' if p.display.startswith(p.layer) else p.layer + ': '}{p.display} ({', '.join(p.primitives[:4])})"
         + (f": {', '.join(k for k in p.a_kernels + p.b_kernels if REWRITE in k)}" if p in rewritten else "")
         for p in reg_points[:6]])
    if not any(c.pairs for c in rep.cases):
        registry.thin = "no second path traced (no variant or GPU pair): no split could show"
    return python, registry


def _needs(rep: FrameworkReport) -> tuple[Figure, Figure]:
    """From the stand-in device's run where the framework has one (torch); else from its
    own dispatch tables (TensorFlow's kernel registry); else from the audit's per-pass
    lists, whose evidence class the cell names (JAX's lowering, Chainer's forward_gpu
    source, MXNet's CPU operators)."""
    ran = [r.standin for r in rep.audit if r.standin is not None]
    if ran:
        return _run_needs(rep, ran)
    with_table = [r.primitive for r in rep.audit if r.needs is not None]
    if with_table:
        return _table_needs(rep, with_table)
    return _pass_needs(rep)


def _run_needs(rep: FrameworkReport, ran: list[StandinNeeds]) -> tuple[Figure, Figure]:
    """From the stand-in device's run, the strongest list: what reached a backend when the
    step ran on one (setup, forward, backward), checked by running, not read from tables."""
    must: dict[str, None] = {}
    free: dict[str, None] = {}
    for run in ran:
        must.update(dict.fromkeys(run.must_implement))
        free.update(dict.fromkeys(run.free))
    link = _page(rep, "audit-table")
    implement = Figure(str(len(must)), f"run on the {ran[0].device} device: {len(ran)} primitive(s), "
                       "setup (copies to the device) included", link, list(must)[:10])
    gets = Figure(str(len(free)), f"ops the run called that never reached the backend ({rep.name} computed them)",
                  link, list(free)[:10])
    if len(ran) < len(rep.primitives):
        implement.thin = f"run for {len(ran)} of {len(rep.primitives)} primitives"
    return implement, gets


def _table_needs(rep: FrameworkReport, with_table: list[str]) -> tuple[Figure, Figure]:
    must: dict[str, None] = {}
    free: dict[str, str] = {}
    for row in rep.audit:
        if row.needs is None:
            continue
        must.update(dict.fromkeys(row.needs.must_implement))
        for op, why in row.needs.free:
            free.setdefault(op, why)
    link = _page(rep, "audit-table")
    keys = {r.needs.key for r in rep.audit if r.needs is not None and r.needs.key}
    implement = Figure(str(len(must)), f"under {', '.join(sorted(keys)) or 'its key'}, "
                       f"{len(with_table)} primitive(s) with a dispatch table",
                       link, list(must)[:10])
    gets = Figure(str(len(free)), "ops that decompose or have a kernel for any device",
                  link, [f"{op}: {why}" for op, why in list(free.items())[:10]])
    if len(with_table) < len(rep.primitives):
        implement.thin = f"dispatch tables for {len(with_table)} of {len(rep.primitives)} primitives"
    return implement, gets


#: What a per-pass list of each evidence class rests on, said in the cell.
_PASS_EVIDENCE = {
    "recorded": "every operator the CPU path ran: no GPU evidence derived, so not checked against a device build",
}


def _pass_needs(rep: FrameworkReport) -> tuple[Figure, Figure]:
    must: dict[str, None] = {}
    free: dict[str, str] = {}
    classes: dict[str, None] = {}
    keys: dict[str, None] = {}
    prims = [r.primitive for r in rep.audit if r.pass_needs]
    for row in rep.audit:
        for pn in row.pass_needs:
            must.update(dict.fromkeys(pn.must_implement))
            for op, why in pn.free:
                free.setdefault(op, why)
            classes[pn.evidence] = None
            if pn.key:
                keys[pn.key] = None
    link = _page(rep, "audit-table")
    where = f"{len(prims)} primitive(s), from {', '.join(classes) or 'no'} evidence"
    implement = Figure(str(len(must)), f"{where} ({'; '.join(keys) or 'its key'})", link, list(must)[:10])
    gets = Figure(str(len(free)), "ops that decompose or have a kernel for any device",
                  link, [f"{op}: {why}" for op, why in list(free.items())[:10]])
    if not prims:
        implement.thin = gets.thin = "no dispatch table and no must-implement list for this framework: not counted"
        implement.value = gets.value = "—"
    elif "recorded" in classes:
        implement.thin = _PASS_EVIDENCE["recorded"]
    elif len(prims) < len(rep.primitives):
        implement.thin = f"lists for {len(prims)} of {len(rep.primitives)} primitives"
    return implement, gets


def _vendor(rep: FrameworkReport) -> Figure:
    per_path = {side: [lib for lib in libs if is_vendor_lib(lib) or is_gpu_lib(lib) or lib == JIT]
                for side, libs in rep.libraries.items()}
    every = sorted({lib for libs in per_path.values() for lib in libs}, key=library_order)
    return Figure(str(len(every)), f"over {len(per_path)} path(s)",
                  _page(rep, "audit-table"),
                  [f"{side}: {', '.join(libs) or 'none'}" for side, libs in per_path.items()])


def _native_names(traces: list[Trace]) -> dict[str, dict[str, set[str]]]:
    """path label -> shared object basename -> native symbols its warm passes reached."""
    out: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for t in traces:
        for run in t.runs:
            tree = run.layers.get("native") if run.phase == "warm" else None
            if tree is None:
                continue
            for _, node in tree.walk():
                f = node.frame
                if f.kind == "native" and f.lib and not f.lib.startswith("["):
                    out[side_label(t)][f.lib].add(f.name)
    return out


def _jit_bytes(traces: list[Trace]) -> dict[str, int]:
    """path label -> bytes of distinct generated kernels its loops reached (perf map);
    an instance two primitives of one probe process reached counts once."""
    seen: dict[str, set[tuple[str, int, int]]] = defaultdict(set)
    for t in traces:
        for run in t.runs:
            native = run.info.layers.get("native")
            seen[side_label(t)].update(native.jit_code if native is not None else ())
    return {side: sum(r[1] for r in rows) for side, rows in seen.items()}


def _bytes(rep: FrameworkReport, traces: list[Trace], measure: Measure | None) -> Figure:
    link = _page(rep, "audit-table")
    names = _native_names(traces)
    paths: dict[str, Any] = {}
    for t in traces:
        paths.update(t.info.native.lib_paths if t.info.native is not None else {})
    fig = Figure("—", "the largest path's", link)
    if not names:
        fig.thin = "no native layer sampled: not measured"
        return fig
    if measure is None or not paths:
        fig.thin = "the traces name no shared-object paths (captured before they were recorded): not measured"
        return fig
    jit = _jit_bytes(traces)
    wanted: dict[str, set[str]] = defaultdict(set)  # every path's names, so each file is read once
    for by_lib in names.values():
        for lib, syms in by_lib.items():
            info = paths.get(lib)
            if library_of(_frame(lib, "")) not in SYSTEM_LIBS and isinstance(info, dict) and info.get("path"):
                wanted[lib] |= syms
    measured = {lib: measure(str(paths[lib]["path"]), paths[lib].get("bytes"), syms) for lib, syms in wanted.items()}
    best = 0
    for side, by_lib in names.items():
        per_tag: dict[str, int] = defaultdict(int)
        found = asked = 0
        for lib, syms in by_lib.items():
            code = measured.get(lib)
            if code is None:
                continue
            asked += len(syms)
            for name in syms & set(code.sizes):
                found += 1
                per_tag[library_of(_frame(lib, name))] += code.sizes[name]
        per_tag = {k: v for k, v in per_tag.items() if k not in SYSTEM_LIBS}
        if jit.get(side):
            per_tag[JIT] = per_tag.get(JIT, 0) + jit[side]
        total = sum(per_tag.values())
        best = max(best, total)
        libs = ", ".join(f"{k} {v / 1024:.1f} KiB" for k, v in sorted(per_tag.items(), key=lambda kv: -kv[1]))
        fig.details.append(f"{side}: {total / 1024:.1f} KiB ({libs or 'none'}); {found} of {asked} symbols sized")
    errors = sorted({f"{lib}: {c.error}" for lib, c in measured.items() if c.error})
    fig.details += errors
    if errors and not best:
        fig.thin = "shared objects unreadable here: " + "; ".join(errors)[:200]
        return fig
    fig.value = f"{best / 1024:.0f} KiB"
    return fig


def _frame(lib: str, name: str) -> Frame:
    return Frame("native", "", name, lib=lib)


def _lines(rep: FrameworkReport) -> Figure:
    spans: dict[tuple[str, int], int] = {}
    for case in rep.cases:
        for c in case.candidates:
            spans[(c.file, c.line)] = sum(a.last_line - a.first_line + 1 for a in c.arms if a.first_line)
    fig = Figure(str(sum(spans.values())), f"in {len(spans)} branch(es)", _page(rep, "primitives"))
    return fig


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
    value = (f"CPU {len(cpu.get('forward', ()))}/{n} · GPU {'/'.join(strongest_first) or '—'} · "
             f"ARM {len(arm.get('forward', ()))}/{n}")
    return Figure(value, "forward; per pass in details",
                  _page(rep, "primitives"), details, "; ".join(thin))


def scorecard(reports: list[FrameworkReport], traces: list[Trace], measure: Measure | None = None) -> list[ScoreRow]:
    """One row per framework; ``measure`` reads a shared object's symbol sizes
    (tracer.elf_code.ElfCode().sizes), None where they cannot be read."""
    by_fw: dict[str, list[Trace]] = defaultdict(list)
    for t in traces:
        by_fw[t.info.framework].append(t)
    rows = []
    for rep in reports:
        mine = by_fw.get(rep.name, [])
        python, registry = _deciding(rep)
        implement, free = _needs(rep)
        rows.append(ScoreRow(rep.name, {
            "python": python, "registry": registry, "implement": implement, "free": free, "vendor": _vendor(rep),
            "bytes": _bytes(rep, mine, measure), "lines": _lines(rep), "coverage": _coverage(rep, mine)}))
    return rows

"""The portability scorecard: one row per framework, the first thing the report
shows, so that a team choosing which framework to port first reads the comparison
measured, each figure with the line that says what it counts and where its evidence is.

The survey dltrace grew from ended on "TensorFlow is modular, Chainer has no
separation of concerns, MKL-DNN's ~81k lines are a proxy of one backend's effort".
Here each of those is a count over the traces:

* where the device and backend decisions are made: decision sites, the code that
  chooses, each counted once however many ops it chooses for (tracer.analysis.decisions:
  TensorFlow's kernel registry is one site); splits that are no decision (two
  versions' own code, jit against eager, a model's context...) shown apart, never
  in a headline figure;
* what a new backend must implement and gets free, from tracer.analysis.backend_needs;
* the vendor libraries each path reaches;
* the machine code each path reaches, per library, in bytes (symbol sizes read from
  the shared objects by a caller-supplied measure, tracer.elf_code; the JIT code
  oneDNN generated for this CPU shown beside it, never counted), and the Python lines in
  device-specific branches;
* coverage per primitive and pass: CPU x86, GPU by evidence class, ARM (emulated or native).

Where a framework's evidence is thinner (no native layer, no GPU trace, no dispatch
table, no ARM trace) its cell says so: a missing measurement is never a small one.
Pure: the shared objects are read by the function passed in.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol

from tracer.contract import APIS, PASSES, USER_API
from tracer.evidence_classes import DERIVED_EVIDENCE
from tracer.analysis.arm_audit import on_arm
from tracer.analysis.backend_needs import is_cpu_library_op
from tracer.analysis.decisions import Decisions, decisions, device_branches, is_device_branch
from tracer.processing.pairs import reference_cpus, side_label
from tracer.processing.evidence_class import EVIDENCE_ORDER, evidence_class
from tracer.analysis.portability import FrameworkReport
from tracer.analysis.standin_needs import StandinNeeds
from tracer.knowledge import Knowledge
from tracer.processing.tags import JIT, is_gpu_lib, is_system_lib, is_vendor_lib, library_of, library_order
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
    unit: str = ""  # what one counted thing is, where the column's definition leaves it to the framework
    items: list[str] = field(default_factory=list)  # the whole list behind the figure (survey.json)
    evidence: str = ""  # what the figure rests on, where its sources differ in strength (LIST_EVIDENCE)
    beside: Beside | None = None  # a run's list: what the registry or the compiler said, and the differences
    #: why the list is not whole (a pass that did not run on the stand-in): then it is no
    #: must-implement list, and every place that shows it says so
    incomplete: str = ""


@dataclass
class Beside:
    """The list a run's list is set beside (the kernel registry's, the compiler's), and
    the differences both ways."""

    evidence: str
    value: str
    run_only: list[str]
    other_only: list[str]
    why: dict[str, str] = field(default_factory=dict)  # each difference's reason

    def said(self) -> str:
        parts = [f"the {self.evidence} list: {self.value}"]
        if self.run_only:
            parts.append(f"run only: {', '.join(self.run_only)}")
        if self.other_only:
            parts.append(f"{self.evidence} only: {', '.join(self.other_only)}")
        if not self.run_only and not self.other_only:
            parts.append("the same ops")
        return "; ".join(parts)


#: What a must-implement list rests on, strongest first: a run on a stand-in backend, the
#: framework's own kernel registry or dispatch tables, its compiler (compiled, lowered for a
#: GPU), its GPU source read, the operators its CPU path ran: the derived GPU classes in
#: their order of tracer.evidence_classes, between a list's own words and "recorded".
LIST_EVIDENCE = ("run", "registry", *DERIVED_EVIDENCE, "recorded")


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

#: What is never an entry of a backend interface: compiler artefacts (fusion kinds, bitcast,
#: the IR's calls and tuples), a traced program's wrappers, and an engine's own records.
NOT_ENTRIES = re.compile(r"^(?:fusion|bitcast|tuple|get-tuple-element|parameter|constant|copy-start|copy-done|"
                         r"custom_jvp_call|custom_vjp_call\w*|pjit|closed_call|remat\w*|stop_gradient|"
                         r"DeleteVariable|WaitForVar|ImperativeBulk)(?:$|[.(\s:])|\(k(?:Loop|Input|Output)\)")


def interface_entries(ops: Iterable[str], k: Knowledge) -> list[str]:
    """The ops that are entries of a backend interface: not :data:`NOT_ENTRIES`, and
    not a CPU library's own op (``mkldnn_convolution`` is oneDNN CPU code)."""
    out = []
    for op in ops:
        name = op.split(" (")[0]
        if NOT_ENTRIES.search(name) or is_cpu_library_op(name, k):
            continue
        out.append(op)
    return list(dict.fromkeys(out))


def evidence_of(trace: Trace) -> str:
    """A GPU trace's evidence class (tracer.processing.evidence_class, "recorded" when it says none)."""
    return evidence_class(trace.info) or "recorded"


def _page(rep: FrameworkReport, anchor: str) -> str:
    """Where a figure's evidence is on its framework's page: the anchor (the renderer
    knows the page's file name)."""
    return anchor


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
    fig = Figure(str(len(sites)), "; ".join(parts) or "none found", _page(rep, "dispatch-table"), details[:14],
                 unit="decision sites", items=list(sites))
    if not any(c.pairs for c in rep.cases) and not device_branches(rep):
        fig.thin = "no second path traced (no variant or GPU pair): no split could show"
    apart = Figure(" · ".join(f"{n} {kind}" for kind, n in found.apart.items()) or "none",
                   f"{found.decision_splits} split point(s) of the decision classes, nested ones included",
                   _page(rep, "dispatch-table"), unit="split points")
    return fig, apart


def needs_figures(rep: FrameworkReport, k: Knowledge) -> tuple[Figure, Figure]:
    """From the stand-in device's run where the framework has one (torch, JAX), with the
    list read from its tables or its compiler beside it (:class:`Beside`); else from its
    own dispatch tables (TensorFlow's kernel registry); else from the audit's per-pass
    lists, whose evidence class the cell names (JAX's lowering, Chainer's forward_gpu
    source, MXNet's CPU operators)."""
    ran = [r.standin for r in rep.audit if r.standin is not None]
    if ran:
        implement, gets = _run_needs(rep, ran, k)
        read = _read_needs(rep, k)
        other = read[0] if read is not None else None
        if other is not None and other.items and other.evidence != "recorded":
            run_only = [op for op in implement.items if op not in other.items]
            other_only = [op for op in other.items if op not in implement.items]
            implement.beside = Beside(other.evidence, other.value, run_only, other_only,
                                      _differences_why(rep, ran, run_only, other_only, other.evidence))
        return implement, gets
    return _read_needs(rep, k) or _pass_needs(rep, k)


def _differences_why(rep: FrameworkReport, ran: list[StandinNeeds], run_only: list[str], other_only: list[str],
                     evidence: str) -> dict[str, str]:
    """Why each op is on one list only, from what the runs show: the stand-in's own reason
    where it has one (tracer.analysis.standin_needs: torch's routing, its profiler's
    names, setup); an op reached only while the inputs and parameters were put on the
    device; one whose level did not run on the stand-in (a marked gap); one the run
    executed without the device (kept on the host, or run by the framework's own kernel
    for any device); one the run never executed."""
    said = {d.op: d.why for run in ran for d in run.differences}  # the stand-in's own reasons (torch's the most)
    why: dict[str, str] = {op: said[op] for op in run_only if op in said}
    for op in [o for o in run_only if o not in why]:
        if all(run.passes_of(op) in ([], ["setup"]) for run in ran):
            why[op] = "reached only in setup (putting the inputs and parameters on the device), which the " \
                      f"{evidence} list, read from the step, does not see"
        else:
            why[op] = f"reached the device in the step; the {evidence} list, read without running on a device, " \
                      "misses it"
    elsewhere = {op for run in ran for op in run.elsewhere}
    levels = {c.api for c in rep.cases} & {*APIS, USER_API}  # an imported profile's "level" is none
    missing = {row.primitive: sorted(levels - set(row.standin.apis if row.standin else ())) for row in rep.audit}
    for op in other_only:
        listed_by = {row.primitive for row in rep.audit
                     if (row.needs is not None and op in row.needs.must_implement)
                     or any(op in pn.must_implement for pn in row.pass_needs)}
        if listed_by and all(missing.get(p) for p in listed_by):
            why[op] = "listed for " + ", ".join(f"{p} ({', '.join(missing[p])})" for p in sorted(listed_by)) + \
                      ", which did not run on the stand-in there (a marked gap says why)"
        elif op in elsewhere:
            why[op] = "executed in the step without reaching the device: the framework kept it on the host or ran " \
                      "its own kernel for any device"
        elif op in said:
            why[op] = said[op]
        else:
            why[op] = "never executed on the stand-in's path (the list is read from a table or a compiler, not a run)"
    return why


def _read_needs(rep: FrameworkReport, k: Knowledge) -> tuple[Figure, Figure] | None:
    """The list read without running on a backend: the framework's dispatch tables, or
    its compiler's per-pass lists (None without either)."""
    with_table = [r.primitive for r in rep.audit if r.needs is not None]
    if with_table:
        return _table_needs(rep, with_table, k)
    return _pass_needs(rep, k)


def _run_needs(rep: FrameworkReport, ran: list[StandinNeeds], k: Knowledge) -> tuple[Figure, Figure]:
    """From the stand-in device's run, the strongest list: what reached a backend when the
    step ran on one (setup, forward, backward), checked by running, not read from tables."""
    must: dict[str, None] = {}
    free: dict[str, None] = {}
    for run in ran:
        must.update(dict.fromkeys(run.must_implement))
        free.update(dict.fromkeys(run.free))
    link = _page(rep, "audit-table")
    entries = interface_entries(must, k)
    setup = any(run.by_pass.get("setup") for run in ran)
    implement = Figure(str(len(entries)), f"run on the {ran[0].device} device: {len(ran)} primitive(s)"
                       + (", setup (copies to the device) included" if setup else ""), link, entries[:10],
                       unit=ran[0].unit or f"ops that reached the {ran[0].device} backend's dispatch key",
                       items=entries, evidence="run")
    gets = Figure(str(len(free)), f"ops the run called that never reached the backend ({rep.name} computed them)",
                  link, list(free)[:10])
    if len(ran) < len(rep.primitives):
        implement.thin = f"run for {len(ran)} of {len(rep.primitives)} primitives"
    lost = {what: why for run in ran for what, why in run.lost.items()}
    if lost:
        implement.incomplete = "; ".join(f"{what} did not run whole on the {ran[0].device} device: {why}"
                                         for what, why in lost.items())
    return implement, gets


def _table_needs(rep: FrameworkReport, with_table: list[str], k: Knowledge) -> tuple[Figure, Figure]:
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
    entries = interface_entries(must, k)
    implement = Figure(str(len(entries)), f"under {', '.join(sorted(keys)) or 'its key'}, "
                       f"{len(with_table)} primitive(s) with a dispatch table",
                       link, entries[:10], unit=f"op kernels registered under {', '.join(sorted(keys)) or 'its key'}",
                       items=entries, evidence="registry")
    gets = Figure(str(len(free)), "ops that decompose or have a kernel for any device",
                  link, [f"{op}: {why}" for op, why in list(free.items())[:10]])
    if len(with_table) < len(rep.primitives):
        implement.thin = f"dispatch tables for {len(with_table)} of {len(rep.primitives)} primitives"
    return implement, gets


#: What a per-pass list of each evidence class rests on, said in the cell.
_PASS_EVIDENCE = {
    "recorded": "every operator the CPU path ran: no GPU evidence derived, so not checked against a device build",
}


def _pass_needs(rep: FrameworkReport, k: Knowledge) -> tuple[Figure, Figure]:
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
    entries = interface_entries(must, k)
    implement = Figure(str(len(entries)), f"{where} ({'; '.join(keys) or 'its key'})", link, entries[:10],
                       unit="; ".join(keys) or "ops", items=entries,
                       evidence=min(classes, key=lambda c: LIST_EVIDENCE.index(c) if c in LIST_EVIDENCE else 99,
                                    default=""))
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


def _path_kind(side: str) -> str:
    """"gpu", "arm", "cpu" (the default x86 path) or "" (a variant) of a path label."""
    if side.startswith("gpu"):
        return "gpu"
    if side.startswith("cpu"):
        if any(a in side for a in ("aarch64", "arm64")):
            return "arm"
        return "cpu" if side == "cpu" or side.startswith("cpu (") else ""
    return ""


def vendor_figure(rep: FrameworkReport, k: Knowledge) -> Figure:
    """The vendor libraries of the default x86 CPU path that the GPU path, or an ARM
    CPU's, does not reach (what a port replaces), and what those paths reach instead."""
    def order(lib: str) -> tuple[int, str]:
        return library_order(lib, k)

    libs: dict[str, set[str]] = defaultdict(set)
    for side, found in rep.libraries.items():
        kind = _path_kind(side)
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
                 _page(rep, "audit-table"), details, unit="libraries", items=sorted(replaced, key=order))
    if "gpu" not in libs and "arm" not in libs:
        fig.thin = "no GPU or ARM path traced: nothing to compare with"
        fig.value = "—"
    return fig


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


def _side_paths(traces: list[Trace]) -> dict[str, dict[str, Any]]:
    """path label -> shared object basename -> where its traces mapped it: per path, since
    one basename (libc10.so) is another file on the machine a GPU path was recorded on."""
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for t in traces:
        out[side_label(t)].update(t.info.native.lib_paths if t.info.native is not None else {})
    return out


def _bytes(rep: FrameworkReport, traces: list[Trace], measure: Measure | None, k: Knowledge) -> Figure:
    """The machine code of each path, read from that path's own shared objects (their
    size at capture checked); a path with any of its objects unreadable here (a GPU path
    recorded on another machine) is not measured, and the figure is the largest of the
    measured CPU paths', or none: a sum over whichever files happen to be on this
    machine would measure the machine, not the framework."""
    link = _page(rep, "audit-table")
    names = _native_names(traces)
    paths = _side_paths(traces)
    fig = Figure("—", "the largest measured path's", link, unit="KiB")
    if not names:
        fig.thin = "no native layer sampled: not measured"
        return fig
    if measure is None or not any(paths.values()):
        fig.thin = "the traces name no shared-object paths (captured before they were recorded): not measured"
        return fig
    jit = _jit_bytes(traces)
    cache: dict[tuple[str, Any], LibraryCodeLike] = {}
    best, measured_sides = 0, []
    for side, by_lib in names.items():
        per_tag: dict[str, int] = defaultdict(int)
        found = asked = 0
        problems: list[str] = []
        for lib, syms in by_lib.items():
            if is_system_lib(library_of(_frame(lib, ""), k), k):
                continue
            info = paths.get(side, {}).get(lib)
            if not isinstance(info, dict) or not info.get("path"):
                problems.append(f"{lib}: no path recorded")
                continue
            key = (str(info["path"]), info.get("bytes"))
            if key not in cache:  # every path's names at once would be smaller; one file is read per path
                cache[key] = measure(key[0], key[1], {n for by in names.values() for n in by.get(lib, ())})
            code = cache[key]
            if code.error:
                problems.append(f"{lib}: {code.error}")
                continue
            asked += len(syms)
            for name in syms & set(code.sizes):
                found += 1
                per_tag[library_of(_frame(lib, name), k)] += code.sizes[name]
        per_tag = {tag: v for tag, v in per_tag.items() if not is_system_lib(tag, k)}
        total = sum(per_tag.values())
        # JIT code is what a library generated for this CPU's ISA: shown, never counted
        generated = f"; + {jit[side] / 1024:.1f} KiB JIT code generated for this CPU, not counted" \
            if jit.get(side) else ""
        if problems:
            fig.details.append(f"{side}: not measured ({'; '.join(problems)[:200]})")
            continue
        measured_sides.append(side)
        if _path_kind(side) in ("cpu", ""):
            best = max(best, total)
        libs = ", ".join(f"{k} {v / 1024:.1f} KiB" for k, v in sorted(per_tag.items(), key=lambda kv: -kv[1]))
        fig.details.append(f"{side}: {total / 1024:.1f} KiB ({libs or 'none'}); {found} of {asked} symbols sized"
                           f"{generated}")
    if not any(_path_kind(side) == "cpu" for side in measured_sides):
        fig.thin = "not measured: the default CPU path's own shared objects could not all be read"
        return fig
    fig.value = f"{best / 1024:.0f} KiB"
    return fig


def _frame(lib: str, name: str) -> Frame:
    return Frame("native", "", name, lib=lib)


def _lines(rep: FrameworkReport) -> Figure:
    spans: dict[tuple[str, int], int] = {}
    for case in rep.cases:
        for c in case.candidates:
            if is_device_branch(c):  # not jit against eager, not an exception type's name
                spans[(c.file, c.line)] = sum(a.last_line - a.first_line + 1 for a in c.arms if a.first_line)
    return Figure(str(sum(spans.values())), f"in {len(spans)} branch(es)", _page(rep, "primitives"), unit="lines",
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
                  _page(rep, "primitives"), details, "; ".join(thin))


def scorecard(reports: list[FrameworkReport], traces: list[Trace], measure: Measure | None,
              k: Knowledge, decided: Mapping[str, Decisions] | None = None) -> list[ScoreRow]:
    """One row per framework; ``measure`` reads a shared object's symbol sizes
    (tracer.elf_code.ElfCode().sizes), None where they cannot be read; ``k``: the
    knowledge the caller loaded."""
    by_fw: dict[str, list[Trace]] = defaultdict(list)
    for t in traces:
        by_fw[t.info.framework].append(t)
    rows = []
    refs = {id(t) for t in reference_cpus(traces)}  # a GPU machine's CPU path: its GPU path's baseline only
    for rep in reports:
        mine = [t for t in by_fw.get(rep.name, []) if id(t) not in refs]
        sites, apart = decision_figures(rep, decided[rep.name] if decided is not None else decisions(rep, k))
        implement, free = needs_figures(rep, k)
        rows.append(ScoreRow(rep.name, {
            "decisions": sites, "apart": apart, "implement": implement, "free": free, "vendor": vendor_figure(rep, k),
            "bytes": _bytes(rep, mine, measure, k), "lines": _lines(rep), "coverage": _coverage(rep, mine)}))
    return rows

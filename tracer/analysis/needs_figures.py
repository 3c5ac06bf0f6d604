"""The scorecard's "a new backend must implement" and "it gets free" columns: from the
stand-in device's run where the framework has one, with the list read from its tables or
its compiler beside it; else from its own dispatch tables; else from the audit's per-pass
lists, whose evidence class the cell names. Compiler artefacts, engine bookkeeping and CPU
libraries' own ops are no entries of a backend interface (:func:`interface_entries`)."""

from __future__ import annotations

import re
from typing import Iterable

from tracer.analysis.backend_needs import is_cpu_library_op
from tracer.analysis.figure import LIST_EVIDENCE, Beside, Figure, page
from tracer.analysis.portability import FrameworkReport
from tracer.analysis.standin_needs import StandinNeeds
from tracer.contract import APIS, USER_API
from tracer.knowledge import Knowledge

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
    link = page(rep, "audit-table")
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
    link = page(rep, "audit-table")
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
    link = page(rep, "audit-table")
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

"""The porting audit in the terminal (`dltrace audit`): the same data as the
report's audit section, for an engineer who wants the list, not the page.
Every name comes from traces: it is printed as text, never read as rich markup."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracer.analysis.arm_ops import ArmOpTable
from tracer.analysis.audit_model import WorkloadAudit
from tracer.analysis.portability import LAYER_NAMES, FrameworkReport
from tracer.analysis.figure import Figure
from tracer.analysis.workload_coverage import WorkloadCoverage
from tracer.render.terminal import clip


def _lines(names: list[str]) -> Text:
    return Text("\n".join(map(clip, names)))


def print_audit(rep: FrameworkReport, console: Console) -> None:
    # One path per line: a path's label names its machine and evidence class, and a
    # label cut by the terminal's wrap would split "gpu" from the class that qualifies it.
    head = Text.assemble((f"{rep.name} {', '.join(rep.versions)}", "bold"), "  paths traced:")
    if not rep.has_gpu:
        head.append("  (no GPU trace: add one with --traces)", style="dim")
    for side in rep.sides:
        head.append(f"\n  - {clip(side)}")
    console.print(head, highlight=False)
    points = Table(title="Dispatch points: where a new backend hooks in", title_justify="left", show_lines=False)
    for col in ("frame", "layer", "decision", "primitives", "A side", "B side"):
        points.add_column(col, overflow="fold")
    for d in rep.dispatch_points:
        where = Text(clip(d.display))
        if d.file:
            where.append(f"\n{clip(d.file)}:{d.line}", style="dim")
        points.add_row(where, LAYER_NAMES[d.layer], d.classification, ", ".join(d.primitives),
                       _lines(d.a_names), _lines(d.b_names))
    if rep.dispatch_points:
        console.print(points)
    else:
        console.print(Text("No split points between the traced paths.", style="dim"))
    needs = Table(title="What each primitive needs from a backend", title_justify="left")
    for col in ("primitive", "CPU libraries", "GPU libraries", "ISA-specific code", "a port must provide"):
        needs.add_column(col, overflow="fold")
    for r in rep.audit:
        gpu = "no GPU trace" if r.gpu_libraries is None else ", ".join(r.gpu_libraries) or "-"
        provide = _lines(r.provide[:8])
        if len(r.provide) > 8:
            provide.append(f"\n… {len(r.provide) - 8} more")
        needs.add_row(r.primitive, Text(", ".join(r.cpu_libraries) or "-"), Text(gpu), Text(", ".join(r.isa) or "-"),
                      provide)
    console.print(needs)
    rows = [(r, r.needs) for r in rep.audit if r.needs]
    if rows:
        table = Table(title=f"What a new backend must implement ({rows[0][1].key}), "
                            "from the framework's own dispatch tables", title_justify="left")
        for col in ("primitive", "must implement", "what other backends use there", "gets for free"):
            table.add_column(col, overflow="fold")
        for r, need in rows:
            others = Text("\n".join(", ".join(f"{b}: {k}" for b, k in need.others.get(op, {}).items()) or "-"
                                    for op in need.must_implement))
            table.add_row(r.primitive, _lines(need.must_implement), others,
                          _lines([f"{op} ({why})" for op, why in need.free]))
        console.print(table)
    _print_standin(rep, console)
    if rep.gaps:
        console.print(Text.assemble((f"{len(rep.gaps)} case(s) could not be traced", "yellow"), ": ", clip(
            "; ".join(f"{g.primitive} {g.api} {g.device}/{g.variant}: {g.error}" for g in rep.gaps[:5]), 2000)),
            highlight=False)


def _print_standin(rep: FrameworkReport, console: Console) -> None:
    """The must-implement list the stand-in device's run found, per primitive and
    pass, next to the tables' list, and why each op on one list only is there."""
    rows = [(r, r.standin) for r in rep.audit if r.standin]
    if not rows:
        return
    first = rows[0][1]
    table = Table(title=f"What a new backend must implement, {first.evidence} ({first.device}), next to the "
                        "dispatch tables' list", title_justify="left")
    for col in ("primitive", "pass", "must implement (run)", "dispatch tables (forward and backward)",
                f"{rep.name} computed itself (run)"):
        table.add_column(col, overflow="fold")
    why = Table(title="Why the run and the tables differ", title_justify="left")
    for col in ("primitive", "op", "on", "why"):
        why.add_column(col, overflow="fold")
    for r, run in rows:
        passes = [p for p in ("setup", "forward", "backward") if run.by_pass.get(p)]
        for i, pass_ in enumerate(passes):
            tables = (_lines(r.needs.must_implement) if r.needs else Text("-")) if i == 0 else Text("")
            table.add_row(r.primitive if i == 0 else "", pass_, _lines(run.by_pass[pass_]), tables,
                          _lines(run.free) if i == 0 else Text(""), end_section=i == len(passes) - 1)
        for i, d in enumerate(run.differences):
            why.add_row(r.primitive if i == 0 else "", Text(clip(d.op)), d.side, Text(clip(d.why)),
                        end_section=i == len(run.differences) - 1)
    console.print(table)
    if any(run.differences for _, run in rows):
        console.print(why)


def print_pass_needs(rep: FrameworkReport, console: Console) -> None:
    """Per primitive and pass: what a new backend must implement, what it gets for free,
    and from which evidence (derived here without a GPU, or the CPU run's op layer)."""
    rows = [n for r in rep.audit for n in r.pass_needs]
    if not rows:
        console.print(Text(f"{rep.name}: no must-implement list (no GPU evidence derived and no op layer traced)",
                           style="yellow"), highlight=False)
        return
    keys = ", ".join(dict.fromkeys(n.key for n in rows if n.key))
    table = Table(title=f"{rep.name}: what a new backend must implement, per primitive and pass ({keys})",
                  title_justify="left")
    for col in ("primitive", "pass", "evidence", "must implement", "what the GPU build uses there", "gets for free"):
        table.add_column(col, overflow="fold")
    for n in rows:
        others = Text("\n".join(", ".join(f"{b}: {k}" for b, k in n.others.get(op, {}).items()) or "-"
                                for op in n.must_implement[:12]))
        must = _lines(n.must_implement[:12])
        if len(n.must_implement) > 12:
            must.append(f"\n… {len(n.must_implement) - 12} more")
        table.add_row(n.primitive, n.pass_, Text(f"{n.evidence}\n{clip(n.provenance, 160)}"), must, others,
                      _lines([f"{op} ({why})" if why else op for op, why in n.free]))
    console.print(table)


def print_workload_audit(audited: WorkloadAudit, console: Console) -> None:
    """A workload's audit (tracer.analysis.audit_model): the dispatch points and per-pass
    needs of its traces, the decision sites on its path, its list op by op."""
    print_audit(audited.report, console)
    print_pass_needs(audited.report, console)
    row = audited.row
    console.print(Text(f"decision sites on {row.model}'s path: {row.decisions.value} ({row.decisions.explain})"),
                  highlight=False, soft_wrap=True)
    if row.coverage is not None:
        print_coverage(row.coverage, row.implement, console)
    if audited.arm_ops is not None:
        print_arm_ops(audited.arm_ops, console)


def print_arm_ops(table: ArmOpTable, console: Console) -> None:
    """Per op of a workload, what computed it on this machine and on each ARM CPU, and
    what a port must care about there (tracer.analysis.arm_ops)."""
    view = Table(title=f"{table.workload} on ARM: what computed each op (library calls, or the framework's own "
                       f"kernel and its ISA); emulated CPUs are QEMU's, never timed", title_justify="left")
    view.add_column("op", overflow="fold")
    view.add_column("passes")
    for machine in table.machines:
        view.add_column(machine, overflow="fold")
    for r in table.rows:
        cells = []
        for m in table.machines:
            cell = r.cells.get(m)
            text = Text(clip(cell.said, 200) if cell is not None else "did not run")
            for flag in (f for f in r.flags.get(m, []) if not f.startswith("DEFAULT build")):  # the cell says it
                text.append("\n" + clip(flag, 200), style="yellow")
            cells.append(text)
        view.add_row(Text(clip(r.op)), ", ".join(r.passes), *cells)
    console.print(view)
    for m in table.machines[1:]:
        default = f", {table.count(m, 'DEFAULT build')} ran the framework's DEFAULT build" if table.isa_dispatch else ""
        console.print(Text(f"{m}: {table.count(m, 'reference code')} ops ran reference code, "
                           f"{table.count(m, 'no library')} called no library where this machine called one"
                           f"{default}"), highlight=False)


def print_coverage(cov: WorkloadCoverage, implement: Figure, console: Console) -> None:
    """A user's workload: its must-implement list op by op, and which built-in cases reach each."""
    what = (f"what reached the {cov.device} device, INCOMPLETE (not a must-implement list)" if cov.incomplete
            else f"what a {cov.framework} backend must implement")
    table = Table(title=f"{cov.workload}: {what} ({implement.value} "
                        f"{implement.unit or 'entries'}; {implement.evidence or 'evidence as the report says'})",
                  title_justify="left")
    for col in ("op", "overload", "passes", "calls", "also reached by (built-in)"):
        table.add_column(col, overflow="fold")
    for r in cov.rows:
        table.add_row(Text(clip(r.name)), Text(clip(r.overload)), ", ".join(r.passes), str(r.calls),
                      Text(", ".join(r.also_in)) if r.also_in else Text("no built-in case", style="yellow"))
    console.print(table)
    if cov.incomplete:
        console.print(Text(clip(f"incomplete: {cov.incomplete}", 2000), style="yellow"), highlight=False)
    if cov.host:
        console.print(Text(clip("placed on the host by its graphs (a port would lose them to the host unseen): "
                                + "; ".join(f"{op} ({', '.join(p)})" for op, p in cov.host.items()), 2000),
                           style="yellow"), highlight=False)
    known = "built-in traces given" if any(r.also_in for r in cov.rows) else "no built-in trace to compare with"
    console.print(Text(f"{len(cov.beyond)} of {len(cov.rows)} reached by no built-in case ({known})"), highlight=False)
    for c in cov.costs:
        untraced = "not timed" if c.untraced_s is None else f"{c.untraced_s * 1e3:.2f} ms"
        console.print(Text(f"{c.pass_}: untraced step {untraced}; recording cost (median of paired steps, "
                           f"quartiles): python {c.python.said}, op {c.op.said}, native {c.native.said}",
                           style="dim"), highlight=False,
                      soft_wrap=True)  # one line per pass, whatever the terminal's width

"""The porting audit in the terminal (`dltrace audit`): the same data as the
report's audit section, for an engineer who wants the list, not the page."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from tracer.process.portability import LAYER_NAMES, FrameworkReport


def print_audit(rep: FrameworkReport, console: Console) -> None:
    console.print(f"[bold]{rep.name} {', '.join(rep.versions)}[/]  paths traced: {', '.join(rep.sides)}"
                  + ("" if rep.has_gpu else "  [dim](no GPU trace: add one with --traces)[/]"), highlight=False)
    points = Table(title="Dispatch points: where a new backend hooks in", title_justify="left", show_lines=False)
    for col in ("frame", "layer", "decision", "primitives", "A side", "B side"):
        points.add_column(col, overflow="fold")
    for d in rep.dispatch_points:
        where = f"{d.frame}\n[dim]{d.file}:{d.line}[/]" if d.file else d.frame
        points.add_row(where, LAYER_NAMES[d.layer], d.classification, ", ".join(d.primitives),
                       "\n".join(d.a_names), "\n".join(d.b_names))
    if rep.dispatch_points:
        console.print(points)
    else:
        console.print("[dim]No split points between the traced paths.[/]")
    needs = Table(title="What each primitive needs from a backend", title_justify="left")
    for col in ("primitive", "CPU libraries", "GPU libraries", "ISA-specific code", "a port must provide"):
        needs.add_column(col, overflow="fold")
    for r in rep.audit:
        gpu = "no GPU trace" if r.gpu_libraries is None else ", ".join(r.gpu_libraries) or "-"
        needs.add_row(r.primitive, ", ".join(r.cpu_libraries) or "-", gpu, ", ".join(r.isa) or "-",
                      "\n".join(r.provide[:8]) + (f"\n… {len(r.provide) - 8} more" if len(r.provide) > 8 else ""))
    console.print(needs)
    if rep.gaps:
        console.print(f"[yellow]{len(rep.gaps)} case(s) could not be traced[/]: "
                      + "; ".join(f"{g.primitive} {g.api} {g.device}/{g.variant}: {g.error}" for g in rep.gaps[:5]), highlight=False)

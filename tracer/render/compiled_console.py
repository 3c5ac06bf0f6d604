"""The compiled door in the terminal: what a torch.compile backend must lower for a step
(each op with its input variations), the graph breaks and what ran eagerly because of
them, and, beside the eager list, every op only one door needs with why
(tracer.analysis.compiled_needs)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracer.analysis.compiled_needs import CompiledNeeds
from tracer.render.terminal import clip


def print_compiled(needs: CompiledNeeds, console: Console, title: str) -> None:
    """The compiled list of ``title`` (a workload, a model), one row per op and variation."""
    kinds = ", ".join(f"{g['kind']} ({g['pass']} pass, {g['nodes']} nodes)" for g in needs.graphs) or "none"
    console.print(Text(f"{title}: what a torch.compile backend must lower: {len(needs.ops)} ops, "
                       f"{len(needs.variations)} input variations, in {len(needs.graphs)} graphs ({kinds}); "
                       f"decompositions: {needs.table}; recorded in {needs.seconds:.1f} s"), highlight=False,
                  soft_wrap=True)
    table = Table(title_justify="left")
    for col in ("op", "graphs", "inputs (dtype[shape], other arguments)", "nodes"):
        table.add_column(col, overflow="fold")
    for v in needs.variations:
        table.add_row(Text(clip(v.op)), ", ".join(needs.kinds_of(v.op)), Text(clip(v.inputs, 200)), str(v.count))
    if needs.variations:
        console.print(table)
    print_breaks(needs, console)


def print_breaks(needs: CompiledNeeds, console: Console) -> None:
    if not needs.breaks:
        console.print(Text("graph breaks: none (each pass is whole graphs)"), highlight=False)
        return
    console.print(Text(f"graph breaks: {needs.break_count}"), highlight=False)
    for b in needs.breaks:
        console.print(Text(clip(f"  ×{b.get('count', 0)} {b.get('reason', '')}: ran eagerly: {b.get('eager', '')}",
                                400)), highlight=False, soft_wrap=True)
    if needs.resumed:
        console.print(Text(clip(f"  compiled again after them in: {'; '.join(needs.resumed)}", 400)), highlight=False,
                      soft_wrap=True)


def print_beside(needs: CompiledNeeds, console: Console) -> None:
    """The two doors' lists side by side: their sizes, and each op only one needs, why."""
    if needs.eager is None:
        return
    both = [op for op in needs.ops if op in needs.eager]
    compiled = [d for d in needs.differences if d.door == "compiled only"]
    eager = [d for d in needs.differences if d.door == "eager only"]
    console.print(Text(f"the two doors: eager {len(needs.eager)} ops, compiled {len(needs.ops)} ops; both "
                       f"{len(both)}, compiled only {len(compiled)}, eager only {len(eager)}"), highlight=False)
    table = Table(title="ops only one door needs, and why", title_justify="left")
    for col in ("op", "door", "why"):
        table.add_column(col, overflow="fold")
    for d in [*compiled, *eager]:
        table.add_row(Text(clip(d.op)), d.door, Text(clip(d.why, 300)))
    if needs.differences:
        console.print(table)

"""Terminal rendering of a diff (rich): the first decision first, its consequences
indented under it, the deciding code syntax-highlighted with the lines that ran
on one side only marked. Also the single-trace candidates."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.syntax import Syntax
from rich.text import Text

from tracer.processing.candidates import Candidate
from tracer.processing.diff.evidence import MIN_SAMPLES
from tracer.processing.diff.result import Branch, DiffResult, Fragment, LayerDiff, Split
from tracer.processing.symbols import display
from tracer.render.terminal import NAME_WIDTH, clip

A_STYLE, B_STYLE = "bold cyan", "bold magenta"
A_BG, B_BG = "on #10303a", "on #3a1030"
CLASS_STYLE = {"device dispatch": "bold red", "library choice": "bold yellow", "ISA-specific code": "bold blue",
               "compilation": "bold green", "allocation/transfer": "bold white", "other": "dim",
               "model context": "dim italic", "version difference": "dim italic",
               "stand-in implementation": "dim italic", "evidence shape": "dim italic"}
PATH_HEAD, PATH_TAIL = 2, 3  # path frames kept at each end when the common path is long
INDENT = 4


def _describe(side: dict[str, Any]) -> str:
    shape = "x".join(map(str, side.get("shape") or []))
    return (f"{side.get('framework', '?')} {side.get('framework_version', '')}  {side.get('primitive', '?')} "
            f"({side.get('api', '')})  {side.get('device', '')}/{side.get('variant', '')}  shape={shape}  "
            f"{side.get('arch', '')}").rstrip()


def _path(path: list[str]) -> Text:
    shown = path if len(path) <= PATH_HEAD + PATH_TAIL + 1 else [*path[:PATH_HEAD], "…", *path[-PATH_TAIL:]]
    text = Text("path: ", style="dim")
    for i, label in enumerate(shown):
        if i:
            text.append(" › ", style="dim")
        text.append(clip(label), style="bold" if i == len(shown) - 1 else "")
    return text


def _branch(side: str, b: Branch, show_calls: bool) -> Text:
    text = Text.assemble((f"{side} only: ", A_STYLE if side == "A" else B_STYLE),
                         (display(b.label, NAME_WIDTH), "bold"))
    facts = []
    if b.share is not None:
        facts.append(f"{b.share:.1%} of samples" + (f" (other side {b.other_share:.1%})" if b.other_share else ""))
    elif b.count > 1:
        facts.append(f"×{b.count}")
    facts.append(f"{b.nodes} frame{'s' if b.nodes != 1 else ''}")
    if b.libraries:
        facts.append("libraries: " + ", ".join(b.libraries))
    if b.isa:
        facts.append("ISA: " + ", ".join(b.isa))
    if b.call_lines and show_calls:
        facts.append("called at line " + ", ".join(map(str, b.call_lines[:4])))
    text.append("  " + " · ".join(facts), style="dim")
    if b.nodes > 1 and b.hot and b.hot != [b.label]:
        text.append("\n    reaches: " + ", ".join(display(h) for h in b.hot), style="dim")
    return text


def _side_style(side: str) -> str:
    return {"A": A_STYLE, "B": B_STYLE, "AB": "bold"}.get(side, "")


def fragment_view(fragment: Fragment) -> RenderableType:
    """The deciding code: highlighted source with side marks, or the names on each side."""
    title = Text.assemble(("deciding code", "underline"), "  ", (clip(fragment.function), "bold"))
    if fragment.file:
        title.append(f"  {fragment.file}:{fragment.first_line}", style="dim")
    if fragment.side != "AB":
        title.append(f"  (side {fragment.side}'s version of the source)", style="dim")
    parts: list[RenderableType] = [title]
    if fragment.kind == "source" and fragment.lines:
        parts.append(_source(fragment))
        parts.append(Text("        A/B: ran on that side only · ◆ the deciding statement · →A/→B: call site of a "
                          "frame on that side only", style="dim"))
    else:
        for side, names in (("A", fragment.a_names), ("B", fragment.b_names)):
            if names:
                parts.append(Text.assemble((f"  {side}: ", A_STYLE if side == "A" else B_STYLE),
                                           ", ".join(map(clip, names))))
    if fragment.note:
        parts.append(Text(f"  ({fragment.note})", style="dim italic"))
    return Group(*parts)


def _source(fragment: Fragment) -> Text:
    lines = fragment.lines
    texts = [cl.text for cl in lines]
    indent = min((len(t) - len(t.lstrip()) for t in texts if t.strip()), default=0)
    code = "\n".join(t[indent:] for t in texts)
    highlighted = Syntax(code, "python", theme="monokai", background_color="default").highlight(code)
    rows = highlighted.split("\n", allow_blank=True)
    out = Text()
    for cl, row in zip(lines, rows):
        if cl.gap_before:
            out.append("        ⋮\n", style="dim")
        only = cl.ran if cl.ran in ("A", "B") else ""
        mark = Text(f"{only or ' ':>2}", style=_side_style(only))
        call = Text(f"→{cl.call}" if cl.call else "", style=_side_style(cl.call))
        out.append(f"  {cl.line:>5} ", style="dim")
        out.append_text(mark)
        out.append(" ◆ " if cl.decision else "   ", style="bold yellow")
        row = row.copy()
        row.rstrip()
        if only:
            row.stylize(A_BG if only == "A" else B_BG)
        out.append_text(row)
        if cl.call:
            out.append("  ")
            out.append_text(call)
        out.append("\n")
    out.rstrip()
    return out


def split_view(split: Split, number: str) -> RenderableType:
    head = Text.assemble((f"{number}  ", "bold"), "split in ", (clip(split.frame), "bold"), "  ",
                         (f"[{split.classification}]", CLASS_STYLE.get(split.classification, "")))
    if split.file:
        head.append(f"  {split.file}:{split.line}", style="dim")
    parts: list[RenderableType] = [head, Text("   " + split.reason, style="italic"),
                                   Padding(_path(split.path), (0, 0, 0, 3))]
    for b in split.only_a:
        parts.append(Padding(_branch("A", b, split.kind == "python"), (0, 0, 0, 3)))
    for b in split.only_b:
        parts.append(Padding(_branch("B", b, split.kind == "python"), (0, 0, 0, 3)))
    for fragment in split.fragments:
        parts.append(Padding(fragment_view(fragment), (0, 0, 0, 3)))
    return Group(*parts)


def set_aside(layer: LayerDiff) -> str:
    """What a sampled layer's diff did not report, and why ("" if nothing)."""
    parts = []
    if layer.underpowered:
        parts.append(f"too few samples to decide (A {layer.samples_a}, B {layer.samples_b}; each side needs "
                     f"{MIN_SAMPLES})")
    if layer.consequences:
        parts.append(f"{layer.consequences} difference(s) follow the decision the python or op layer shows, "
                     "or lead to the same kernels")
    if layer.unreplicated:
        parts.append(f"{layer.unreplicated} not seen in every independent sampling")
    return ("set aside: " + "; ".join(parts)) if parts else ""


def layer_header(layer: LayerDiff) -> Text:
    n = sum(1 for _ in layer.all_splits())
    first = len(layer.splits)
    text = Text.assemble((f"{layer.layer} layer", "bold underline"), "  ")
    count = f"{n} split point{'s' if n != 1 else ''}"
    if n != first:
        count += f" ({first} first decision{'s' if first != 1 else ''})"
    text.append(count, style="bold" if n else "green")
    text.append(f"  ·  A {layer.nodes_a} frames, B {layer.nodes_b}, {layer.shared} aligned", style="dim")
    if layer.sampled:
        text.append(f"\n  sampled: A {layer.samples_a} samples, B {layer.samples_b}; threshold {layer.threshold:.1%}: "
                    f"frames in fewer samples, or on one side by chance (p ≥ {layer.alpha:g}), ignored "
                    f"(A {layer.ignored_a}, B {layer.ignored_b} frames)", style="dim")
    return text


def print_diff(result: DiffResult, console: Console, names: tuple[str, str] = ("", "")) -> None:
    """The whole diff: header, then per layer its splits, nested ones indented."""
    for side, desc, name in (("A", result.a, names[0]), ("B", result.b, names[1])):
        console.print(Text.assemble((f"{side}  ", A_STYLE if side == "A" else B_STYLE), (_describe(desc), "bold"),
                                    (f"  {name}" if name else "", "dim")), highlight=False)
    if result.differs:
        what = "; ".join(f"{k} ({a or '?'} → {b or '?'})" for k, (a, b) in result.differs.items())
        console.print(Text(f"   differ in: {what}", style="dim"), highlight=False)
    sampled = any(layer.sampled for layer in result.layers)
    applies = "(applied to the sampled layers)" if sampled else "(only applies to sampled layers; none here)"
    console.print(Text(f"   {result.pass_} pass, {result.phase} phase · threshold {result.threshold:.1%} {applies}",
                       style="dim"), highlight=False)
    for warning in result.warnings:
        console.print(Text(f"   warning: {warning}", style="yellow"), highlight=False)
    for layer in result.layers:
        console.print(Rule(style="dim"))
        console.print(layer_header(layer), highlight=False)
        aside = set_aside(layer)
        if aside:
            console.print(Text(f"  {aside}", style="dim"))
        if not layer.splits:
            same = "no difference stands in this layer" if aside else "the two paths are the same in this layer"
            console.print(Text(f"  {same}", style="green"))
        numbers: list[int] = []
        for level, split in layer.all_splits():
            del numbers[level + 1:]
            if len(numbers) <= level:
                numbers.append(0)
            numbers[level] += 1
            number = ".".join(map(str, numbers))
            if level:
                parent = number.rsplit(".", 1)[0]
                console.print(Padding(Text(f"consequence of {parent}:", style="dim"), (0, 0, 0, INDENT * level)))
            console.print(Padding(split_view(split, number), (0 if level else 1, 0, 0, INDENT * level)),
                          highlight=False)


# ----------------------------------------------------------------------------- single trace


def candidate_view(cand: Candidate, number: int) -> RenderableType:
    head = Text.assemble((f"{number}  ", "bold"), (cand.function, "bold"), (f"  {cand.file}:{cand.line}", "dim"))
    if cand.count > 1:
        head.append(f"  ×{cand.count}", style="dim")
    cond = Text.assemble(("   " + {"if": "if ", "ifexp": "… if ", "try": ""}[cand.kind], "bold"),
                         (cand.condition, "yellow"), (f"   ({', '.join(cand.matched)})", "dim"))
    parts: list[RenderableType] = [head, cond]
    for arm in cand.arms:
        if arm.ran:
            mark, style = "✓ taken    ", "green"
        elif arm.ran is False:
            mark, style = "✗ not taken", "red"
        else:
            mark, style = "? unknown  ", "dim"
        text = Text.assemble(("   " + mark + "  ", style), (arm.label, "bold"))
        if arm.first_line:
            lo, hi = arm.first_line, arm.last_line
            text.append(f"  lines {lo}-{hi}" if hi > lo else f"  line {lo}", style="dim")
        if arm.calls:
            text.append("  calls: ", style="dim")
            for i, call in enumerate(arm.calls[:6]):
                text.append(", " if i else "")
                text.append(call, style="bold" if call in arm.observed else "")
            if len(arm.calls) > 6:
                text.append(f", … {len(arm.calls) - 6} more", style="dim")
        parts.append(text)
        if arm.source:
            code = "\n".join(t for _, t in arm.source[:4])
            syntax = Syntax(code, "python", theme="monokai", background_color="default", line_numbers=True,
                            start_line=arm.source[0][0], dedent=True, word_wrap=False)
            parts.append(Padding(syntax, (0, 0, 0, 8)))
            if len(arm.source) > 4:
                parts.append(Text(f"        … {len(arm.source) - 4} more lines", style="dim"))
    return Group(*parts)


def print_candidates(candidates: list[Candidate], console: Console, description: dict[str, Any] | None = None,
                     pass_: str = "forward", phase: str = "warm") -> None:
    """Candidate split points of one trace, in the order their functions first ran."""
    title = Text("Candidate split points", style="bold underline")
    if description:
        title.append(f"  {_describe(description)}", style="bold")
    title.append(f"  ·  {pass_} pass, {phase} phase", style="dim")
    console.print(title, highlight=False)
    guards = [c for c in candidates if c.guard]
    candidates = [c for c in candidates if not c.guard]
    functions = len({(c.file, c.first_line) for c in candidates})
    branches = f"{len(candidates)} branch{'es' if len(candidates) != 1 else ''}"
    executed = f"{functions} executed function{'s' if functions != 1 else ''}"
    console.print(Text(f"   {branches} on the device or backend in {executed}; bold calls were seen in this run",
                       style="dim"), highlight=False)
    if guards:
        console.print(Text(f"   {len(guards)} more only raise on the arm not taken (input checks), not shown",
                           style="dim"), highlight=False)
    dispatching = [c for c in candidates if c.dispatches]
    if dispatching:
        console.print(Text("   branches that call a different implementation on each arm:", style="bold"))
        for c in dispatching:
            taken, other = c.alternatives
            console.print(Text.assemble("     ", (c.function, "bold"), (f" ({c.file}:{c.line})  ", "dim"),
                                        (", ".join(taken), "green"), " taken, ",
                                        (", ".join(other), "red"), " not taken"), highlight=False)
    if not candidates:
        console.print(Text("   no executed Python function branches on the device or backend; the decision is below "
                           "Python (see the op and native layers, or diff against a second trace)", style="green"))
    for i, cand in enumerate(candidates, 1):
        console.print()
        console.print(candidate_view(cand, i), highlight=False)

"""Terminal rendering of a call tree (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from tracer.process.summary import summarize
from tracer.trace import Node, Trace

_KIND_STYLE = {"python": "bold", "c": "magenta", "ext": "yellow", "op": "cyan", "native": "green", "root": "bold underline"}
_HANDOFF = {"c": "→ C ", "ext": "→ lib "}


def _fmt_time(ns: int) -> str:
    if ns >= 1_000_000:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e3:.1f} µs"


def node_label(node: Node) -> Text:
    f = node.frame
    text = Text()
    if f.kind in _HANDOFF:
        text.append(_HANDOFF[f.kind], style=_KIND_STYLE[f.kind])
    text.append(f.label, style=_KIND_STYLE.get(f.kind, ""))
    extra = []
    if f.file and f.kind in ("python", "ext"):
        extra.append(f"{f.file}:{f.line}")
    if node.count > 1:
        extra.append(f"×{node.count}")
    if node.time_ns:
        extra.append(_fmt_time(node.time_ns))
    if extra:
        text.append("  " + "  ".join(extra), style="dim")
    return text


def tree_view(root: Node, title: Text | str | None = None, max_depth: int = 40, max_nodes: int = 400) -> Tree:
    """A rich Tree; deeper or further nodes are summarised, not silently dropped."""
    view = Tree(title if title is not None else node_label(root))
    shown = 0
    stack = [(view, root, 0)]
    while stack:
        branch, node, depth = stack.pop()
        kids = node.children
        if depth >= max_depth and kids:
            hidden = sum(c.size() for c in kids)
            branch.add(Text(f"… {hidden} deeper frames (raise --max-depth)", style="dim"))
            continue
        added = []
        for child in kids:
            if shown >= max_nodes:
                branch.add(Text(f"… more frames not shown (raise --max-nodes)", style="dim"))
                break
            shown += 1
            added.append((branch.add(node_label(child)), child, depth + 1))
        stack.extend(reversed(added))
    return view


def print_trace(trace: Trace, console: Console, phase: str = "warm", layers: tuple[str, ...] = ("python",),
                max_depth: int = 40, max_nodes: int = 400) -> None:
    m = trace.meta
    console.print(
        Text.assemble(
            (f"{m['framework']} {m.get('framework_version', '')}", "bold"),
            f"  {m['primitive']} ({m['api']})  device={m['device']}  variant={m['variant']}  "
            f"shape={'x'.join(map(str, m['shape']))}  phase={phase}",
        )
    )
    for run in trace.runs:
        if run.phase != phase:
            continue
        for layer in layers:
            tree = run.layers.get(layer)
            if tree is None:
                continue
            s = summarize(tree)
            title = Text.assemble((f"{run.pass_}", "bold underline"), f"  [{layer}]  ", (
                f"{s.python_functions} framework Python functions, {s.c_handoffs} C hand-offs, "
                f"{s.ext_handoffs} library calls", "dim"))
            console.print(tree_view(tree, title, max_depth, max_nodes))
            st = run.stats
            if st.get("untraced_s"):
                console.print(Text(
                    f"  per call: {st['untraced_s'] * 1e6:.1f} µs untraced, {st['traced_s'] * 1e6:.1f} µs traced "
                    f"(×{st['overhead']:.2f})", style="dim"))

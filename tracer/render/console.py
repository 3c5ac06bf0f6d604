"""Terminal rendering of a trace's layers (rich): the Python tree as recorded, the op
tree, and the native tree compacted (plumbing libraries hidden, rare branches
pruned, C++ templates shortened), each with what it hid."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from tracer.analysis.workload_coverage import LayerCost
from tracer.knowledge import Knowledge
from tracer.processing.compact import hide_plumbing, prune, short_symbol
from tracer.processing.summary import summarize
from tracer.processing.tags import isa_of, library_of
from tracer.render.terminal import clip
from tracer.trace import Node, Run, Trace
from tracer.trace_meta import LayerStats

#: The native tree hides branches under this share of the samples.
NATIVE_MIN_SHARE = 0.02

_KIND_STYLE = {"python": "bold", "c": "magenta", "ext": "yellow", "op": "cyan", "native": "green",
               "root": "bold underline"}
_HANDOFF = {"c": "→ C ", "ext": "→ lib "}


def _fmt_time(ns: int) -> str:
    if ns >= 1_000_000:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e3:.1f} µs"


def node_label(node: Node, total: int = 0, *, k: Knowledge) -> Text:
    """One node; ``total`` (the root's samples) marks a sampled layer: counts are
    shown as shares, native frames with their library and ISA tags (read with ``k``)."""
    f = node.frame
    text = Text()
    if f.kind in _HANDOFF:
        text.append(_HANDOFF[f.kind], style=_KIND_STYLE[f.kind])
    if total:
        text.append(clip(short_symbol(f.label) if f.kind == "native" else f.label), style=_KIND_STYLE.get(f.kind, ""))
        tags = [t for t in (library_of(f, k), isa_of(f, k)) if t] if f.kind in ("native", "op") else []
        extra = [f"{100 * node.count / total:.0f}%"] + ([f.lib] if f.lib and f.kind == "native" else []) + tags
        text.append("  " + "  ".join(extra), style="dim")
        return text
    text.append(clip(f.label), style=_KIND_STYLE.get(f.kind, ""))
    if f.kind == "op":
        tags = [t for t in (library_of(f, k), isa_of(f, k)) if t]
        if tags:
            text.append("  [" + ", ".join(tags) + "]", style="cyan dim")
    extra = []
    if f.file and f.kind in ("python", "ext"):
        extra.append(f"{clip(f.file)}:{f.line}")
    if node.count > 1:
        extra.append(f"×{node.count}")
    if node.time_ns:
        extra.append(_fmt_time(node.time_ns))
    if extra:
        text.append("  " + "  ".join(extra), style="dim")
    return text


def untimed(node: Node) -> Node:
    """``node``'s tree without its times (an emulated run's: they are QEMU's, not the chip's)."""
    return Node(node.frame, node.count, 0, node.call_lines, node.lines, [untimed(c) for c in node.children])


def tree_view(root: Node, title: Text | str | None = None, max_depth: int = 40, max_nodes: int = 400,
              total: int = 0, *, k: Knowledge) -> Tree:
    """A rich Tree; deeper or further nodes are summarised, not silently dropped."""
    view = Tree(title if title is not None else node_label(root, total, k=k))
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
                branch.add(Text("… more frames not shown (raise --max-nodes)", style="dim"))
                break
            shown += 1
            added.append((branch.add(node_label(child, total, k=k)), child, depth + 1))
        stack.extend(reversed(added))
    return view


def _python_layer(run: Run, tree: Node, console: Console, max_depth: int, max_nodes: int, k: Knowledge) -> None:
    s = summarize(tree)
    title = Text.assemble((f"{run.pass_}", "bold underline"), "  [python]  ", (
        f"{s.python_functions} framework Python functions, {s.c_handoffs} C hand-offs, "
        f"{s.ext_handoffs} library calls", "dim"))
    console.print(tree_view(tree, title, max_depth, max_nodes, k=k))
    st = run.info
    if st.untraced_s and st.traced_s is not None and st.overhead is not None:
        pairs = run.stats.get("pairs")
        medians = f", medians of {pairs} paired steps" if type(pairs) is int else ""
        console.print(Text(
            f"  per call: {st.untraced_s * 1e6:.1f} µs untraced, {st.traced_s * 1e6:.1f} µs traced{medians}; "
            f"recording cost (quartiles): {LayerCost.of(run).python.said}", style="dim"))


def _op_layer(run: Run, tree: Node, console: Console, max_depth: int, max_nodes: int, k: Knowledge) -> None:
    info = run.info.layers.get("op")
    source = info.source if info is not None and info.source is not None else "the framework"
    ops = sum(1 for _, n in tree.walk() if n.frame.kind == "op")
    title = Text.assemble((f"{run.pass_}", "bold underline"), "  [op]  ", (f"{ops} op records, from {source}", "dim"))
    console.print(tree_view(tree, title, max_depth, max_nodes, k=k))
    cost = LayerCost.of(run).op
    if cost.factor is not None:
        console.print(Text(f"  recording cost (the step under the profiler, median of paired steps, quartiles): "
                           f"{cost.said}", style="dim"))


def _library_layer(run: Run, tree: Node, console: Console, max_depth: int, max_nodes: int, k: Knowledge) -> None:
    calls = len(tree.children)
    what = f"{calls} calls the vendor libraries reported (oneDNN, MKL, NVPL verbose)" if calls else \
        "no oneDNN, MKL or NVPL call reported: the kernels are the framework's own or another library's"
    title = Text.assemble((f"{run.pass_}", "bold underline"), "  [library]  ", (what, "dim"))
    console.print(tree_view(tree, title, max_depth, max_nodes, k=k))


def _native_layer(run: Run, tree: Node, console: Console, max_depth: int, max_nodes: int, k: Knowledge) -> None:
    st = run.info.layers.get("native") or LayerStats()
    total = tree.count or sum(c.count for c in tree.children)
    compact, dropped = prune(hide_plumbing(tree, k=k), NATIVE_MIN_SHARE)
    slow = f", recording cost {LayerCost.of(run).native.said} (the sampled loop over the unsampled)" \
        if st.slowdown else ""
    title = Text.assemble((f"{run.pass_}", "bold underline"), "  [native]  ", (
        f"{total} samples at {'?' if st.rate is None else st.rate}/s, {st.errors} unwinding errors{slow}; "
        f"libc/libstdc++/libpython frames hidden, {dropped} frames under {NATIVE_MIN_SHARE:.0%} not shown", "dim"))
    console.print(tree_view(compact, title, max_depth, max_nodes, total=total or 1, k=k))


_LAYER_VIEWS = {"python": _python_layer, "op": _op_layer, "library": _library_layer, "native": _native_layer}


def print_trace(trace: Trace, console: Console, phase: str = "warm", layers: tuple[str, ...] = ("python",),
                max_depth: int = 40, max_nodes: int = 400, *, k: Knowledge) -> None:
    """``trace``'s ``layers`` of its ``phase`` runs on ``console``, tagged with the knowledge ``k``."""
    m = trace.info
    console.print(
        Text.assemble(
            (f"{m.framework} {m.framework_version or ''}", "bold"),
            f"  {m.primitive} ({m.api})  device={m.device}  variant={m.variant}  "
            f"shape={'x'.join(map(str, m.shape))}  phase={phase}",
        )
    )
    if "native" in layers and m.native_env:
        console.print(Text(f"  native capture env: {dict(m.native_env)}", style="dim"))
    collector = m.collector
    if "python" in layers and collector is not None and collector.python == "python" and collector.why:
        # the C core did not run: the tree is the same, the overhead figures are not
        console.print(Text(clip(f"  python layer: pure-Python collector ({collector.why})"), style="dim"))
    if m.emulated is not None:  # QEMU's clock says nothing of the chip: no time is shown as one
        console.print(Text(f"  emulated ({m.emulated.cpu or 'aarch64'}, QEMU user mode): which code ran is real; "
                           "its times are not shown", style="dim"))
    for run in trace.runs:
        if run.phase != phase:
            continue
        if m.emulated is not None:
            run = Run(run.pass_, run.phase, {name: untimed(tree) for name, tree in run.layers.items()},
                      {key: why for key, why in run.stats.items() if key.endswith("_error")})
        for layer in layers:
            tree = run.layers.get(layer)
            if tree is None:
                why = run.info.not_captured.get(layer)
                if why:
                    console.print(Text.assemble((f"{run.pass_}", "bold underline"), f"  [{layer}]  ",
                                                (f"not captured: {why}", "yellow")))
                continue
            _LAYER_VIEWS[layer](run, tree, console, max_depth, max_nodes, k)

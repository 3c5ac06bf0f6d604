"""What the export formats share: which trees of a trace to write, and each tree
as weighted stacks (root first), so that every format writes the same numbers.

Weights: a sampled layer (native) counts samples; a timed layer (python, op) its
self time in nanoseconds; a layer without times its calls. A node's self weight
is its inclusive weight minus its children's, never below zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from tracer.trace import Frame, Node, Trace


@dataclass(frozen=True)
class Tree:
    """One layer of one run, ready to export."""

    name: str  # "conv2d.forward [native]"
    layer: str
    pass_: str
    phase: str
    root: Node
    unit: str  # "samples" | "nanoseconds" | "calls"


def _unit(layer: str, root: Node) -> str:
    if layer == "native":
        return "samples"
    return "nanoseconds" if any(n.time_ns for _, n in root.walk()) else "calls"


def select_trees(trace: Trace, layers: tuple[str, ...], passes: tuple[str, ...], phase: str = "warm") -> list[Tree]:
    """The trees of ``layers`` x ``passes`` in the ``phase`` runs, in that order."""
    out = []
    for layer in layers:
        for pass_ in passes:
            root = trace.layer(pass_, layer, phase)
            if root is not None:
                out.append(Tree(f"{root.frame.name} [{layer}]", layer, pass_, phase, root, _unit(layer, root)))
    return out


def _own(node: Node, unit: str) -> int:
    return node.count if unit in ("samples", "calls") else node.time_ns


def weighted_stacks(tree: Tree) -> Iterator[tuple[list[Frame], int]]:
    """(frames from the root, self weight) for every node with a positive self weight."""
    inclusive: dict[int, int] = {}
    order = [n for _, n in tree.root.walk()]
    for node in reversed(order):  # children before parents
        kids = sum(inclusive[id(c)] for c in node.children)
        inclusive[id(node)] = max(_own(node, tree.unit), kids)
    stack: list[tuple[Node, list[Frame]]] = [(tree.root, [tree.root.frame])]
    while stack:
        node, path = stack.pop()
        own = inclusive[id(node)] - sum(inclusive[id(c)] for c in node.children)
        if own > 0:
            yield path, own
        stack.extend((c, path + [c.frame]) for c in reversed(node.children))


def frame_name(frame: Frame, tree: Tree) -> str:
    """A frame's display name; the root names its layer, native frames their library."""
    if frame.kind == "root":
        return tree.name
    if frame.kind == "native" and frame.lib:
        return f"{frame.label} ({frame.lib})"
    return frame.label

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


def inclusive_weights(tree: Tree) -> dict[int, int]:
    """id(node) -> inclusive weight: its own, or its children's if they add up to more."""
    inclusive: dict[int, int] = {}
    order = [n for _, n in tree.root.walk()]
    for node in reversed(order):  # children before parents
        kids = sum(inclusive[id(c)] for c in node.children)
        inclusive[id(node)] = max(_own(node, tree.unit), kids)
    return inclusive


def walk_events(tree: Tree, inclusive: dict[int, int] | None = None) -> Iterator[tuple[bool, Node, int]]:
    """(True, node, self weight) on entering a node, (False, node, 0) on leaving it,
    depth first. Iterative and without copying paths, so that a trace 200,000 frames
    deep costs memory in proportion to its frames, not to frames x depth."""
    if inclusive is None:
        inclusive = inclusive_weights(tree)
    stack: list[tuple[Node, bool]] = [(tree.root, True)]
    while stack:
        node, entering = stack.pop()
        if not entering:
            yield False, node, 0
            continue
        yield True, node, inclusive[id(node)] - sum(inclusive[id(c)] for c in node.children)
        stack.append((node, False))
        stack.extend((c, True) for c in reversed(node.children))



def frame_name(frame: Frame, tree: Tree) -> str:
    """A frame's display name; the root names its layer, native frames their library."""
    if frame.kind == "root":
        return tree.name
    if frame.kind == "native" and frame.lib:
        return f"{frame.label} ({frame.lib})"
    return frame.label

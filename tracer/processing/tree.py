"""Helpers over call trees that several processing stages share (the diff, the
graphs, the portability view): sample totals, children grouped by identity, and
which children count as present in a sampled layer. Pure."""

from __future__ import annotations

from typing import Any, Callable, Iterable

from tracer.knowledge import Knowledge
from tracer.processing.normalize import identity
from tracer.trace import Frame, Node


#: Child groups by identity key (an identity, or its number in a diff): each a Node, or
#: the aligned Nodes of one calling context in several trees (a list).
Groups = dict[Any, Any]


def looks_sampled(root: Node) -> bool:
    """Native stack frames are sampled, whatever the stats say."""
    return any(c.frame.kind == "native" for c in root.children)


def total_samples(root: Node) -> int:
    """A sampled layer's sample count: the root's count (or its children's, if unset)."""
    return root.count or sum(c.count for c in root.children)


def size(groups: Iterable[Any]) -> int:
    """Frames in the subtrees of some groups (Nodes or lists of Nodes)."""
    n, stack = 0, [x for g in groups for x in as_list(g)]
    while stack:
        node = stack.pop()
        n += 1
        stack.extend(node.children)
    return n


def as_list(group: Any) -> list[Node]:
    return group if group.__class__ is list else [group]


def group_count(group: Any) -> int:
    return sum(n.count for n in group) if group.__class__ is list else group.count


def above(groups: Groups, minimum: float) -> tuple[Groups, Groups]:
    """Split child groups into those with at least ``minimum`` samples and the rest."""
    keep: Groups = {}
    low: Groups = {}
    for k, g in groups.items():
        (keep if group_count(g) >= minimum else low)[k] = g
    return keep, low


def children_groups(nodes: list[Node], k: Knowledge) -> dict[tuple[str, str, str], list[Node]]:
    """Children of a group of aligned nodes, grouped by identity (for the graph module)."""
    out: dict[tuple[str, str, str], list[Node]] = {}
    for n in nodes:
        for c in n.children:
            out.setdefault(identity(c.frame, k), []).append(c)
    return out


def present(groups: Groups, total: int, threshold: float, sampled: bool) -> Groups:
    """The child groups that count as present (all of them unless the layer is sampled)."""
    return above(groups, threshold * total)[0] if sampled else groups


def splice(root: Node, hidden: Callable[[Frame], bool]) -> Node:
    """A copy without the frames ``hidden`` says to look through: their children move
    up to the nearest kept ancestor, merging with its children of the same frame
    (counts and times add). A branch made only of hidden frames disappears into its
    parent's count: in a sampled tree, its samples still count at the parent."""
    out = Node(root.frame, root.count, root.time_ns, list(root.call_lines), list(root.lines))
    stack = [(root, out)]
    while stack:
        src, dst = stack.pop()
        index = {c.frame: c for c in dst.children}
        pending = list(src.children)
        while pending:
            child = pending.pop(0)
            if hidden(child.frame):
                pending[:0] = child.children
                continue
            have = index.get(child.frame)
            if have is None:
                have = index[child.frame] = Node(child.frame, 0, 0, list(child.call_lines), list(child.lines))
                dst.children.append(have)
            have.count += child.count
            have.time_ns += child.time_ns
            stack.append((child, have))
    return out

"""Call graphs as networkx DiGraphs, for the report's drawings (Graphviz).

A merged graph lays two aligned trees over each other: each node is a calling
context, on both sides or on one. Traces can have a million frames and a drawing
shows a few hundred, so the trees are walked once into flat arrays
(:class:`MergedWalk`: a parent index and a few facts per node, no per-node
objects) and a networkx graph is built only of the nodes that are drawn: all of
them for a small graph (:func:`merged_graph`), or the paths to the splits and the
first frames of each side below them (:func:`focused_graph`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

import networkx as nx

from tracer.knowledge import Knowledge
from tracer.processing.diff.result import DiffResult, LayerDiff
from tracer.processing.normalize import identity_label
from tracer.processing.sampling import DEFAULT_THRESHOLD
from tracer.processing.tags import isa_of, library_of
from tracer.processing.tree import children_groups, looks_sampled, present, total_samples
from tracer.trace import Frame, Node

ROOT_KEY = 0
SHARED, A_ONLY, B_ONLY = "shared", "A-only", "B-only"
_Group = Optional[list[Node]]
_SIDE = (SHARED, A_ONLY, B_ONLY)


def _attrs(frame: Frame, k: Knowledge) -> dict[str, Any]:
    return {"label": frame.label, "kind": frame.kind, "lib": frame.lib, "library": library_of(frame, k),
            "isa": isa_of(frame, k), "file": frame.file, "line": frame.line}


def call_graph(tree: Node, k: Knowledge) -> nx.DiGraph[tuple[str, ...]]:
    """One layer's call tree as a graph (same-identity siblings merged, as in the diff),
    read with the knowledge ``k``. Node attributes: label, kind, lib, library, isa, file, line, count, depth."""
    g: nx.DiGraph[tuple[str, ...]] = nx.DiGraph()
    stack: list[tuple[list[Node], tuple[str, ...], tuple[str, ...] | None]] = [([tree], ("root",), None)]
    while stack:
        group, key, parent = stack.pop()
        count = sum(n.count for n in group)
        g.add_node(key, **_attrs(group[0].frame, k), count=count, depth=len(key) - 1)
        if parent is not None:
            g.add_edge(parent, key, count=count)
        for ident, kids in reversed(children_groups(group, k).items()):
            stack.append((kids, key + (identity_label(ident),), key))
    return g


@dataclass
class MergedWalk:
    """Two aligned trees, walked once, in flat arrays indexed by node number (the
    root is 0, parents come before their children)."""

    parent: list[int] = field(default_factory=list)
    side: list[int] = field(default_factory=list)  # index into (shared, A-only, B-only)
    split: list[bool] = field(default_factory=list)
    frame: list[Frame] = field(default_factory=list)
    count_a: list[int] = field(default_factory=list)
    count_b: list[int] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    #: nodes within reach of a split, kept for the focused drawing: node -> levels left below it
    near: dict[int, int] = field(default_factory=dict)
    k: Knowledge = field(kw_only=True)  # what the stages know (tracer.knowledge): the walk's frames' tags

    def __len__(self) -> int:
        return len(self.parent)

    def whole(self) -> nx.DiGraph[int]:
        """Every node of the walk as a networkx graph."""
        return self.graph(list(range(len(self))))

    def graph(self, nodes: list[int]) -> nx.DiGraph[int]:
        """A networkx graph of ``nodes`` (in walk order) and the edges between them."""
        g: nx.DiGraph[int] = nx.DiGraph()
        keep = set(nodes)
        for i in nodes:
            g.add_node(i, **_attrs(self.frame[i], self.k), side=_SIDE[self.side[i]], split=self.split[i],
                       count_a=self.count_a[i], count_b=self.count_b[i], depth=self.depth[i])
            p = self.parent[i]
            if p >= 0 and p in keep:
                g.add_edge(p, i, side=_SIDE[self.side[i]])
        return g


def _trees(a: Union[Node, LayerDiff, DiffResult], b: Node | None, layer: str | None, threshold: float,
           sampled: bool | None) -> tuple[Node, Node, float, bool]:
    if isinstance(a, DiffResult):
        chosen = [d for d in a.layers if layer is None or d.layer == layer]
        if not chosen:
            raise ValueError(f"the diff has no {layer} layer")
        a = chosen[0]
    if isinstance(a, LayerDiff):
        diff = a
        if diff.a_root is None or diff.b_root is None:
            raise ValueError("this diff result does not hold its trees (loaded from JSON?)")
        a, b, threshold, sampled = diff.a_root, diff.b_root, diff.threshold, diff.sampled
    if b is None:
        raise TypeError("a merged graph needs two trees or a diff result")
    if sampled is None:
        sampled = looks_sampled(a) or looks_sampled(b)
    return a, b, threshold, sampled


def merged_walk(a: Union[Node, LayerDiff, DiffResult], b: Node | None = None, *, layer: str | None = None,
                threshold: float = DEFAULT_THRESHOLD, sampled: bool | None = None, per_side: int = 6,
                below: int = 1, k: Knowledge) -> MergedWalk:
    """Walk both trees (or a diff result's, whose threshold and sampling then apply, so
    that graph and diff agree). A node is a split where the two sides' present
    children differ. ``per_side`` differing children of each split, and ``below``
    levels under them (two children per level), are marked :attr:`MergedWalk.near`."""
    a, b, threshold, sampled = _trees(a, b, layer, threshold, sampled)
    total_a, total_b = (total_samples(a), total_samples(b)) if sampled else (0, 0)
    w = MergedWalk(k=k)
    # (A's group, B's group, parent, depth, levels to keep below it if near a split)
    stack: list[tuple[_Group, _Group, int, int, int | None]] = [([a], [b], -1, 0, None)]
    while stack:
        ga, gb, parent, depth, mark = stack.pop()
        me = len(w.parent)
        ca = present(children_groups(ga, k), total_a, threshold, sampled) if ga else {}
        cb = present(children_groups(gb, k), total_b, threshold, sampled) if gb else {}
        split = bool(ga and gb and ca.keys() != cb.keys())
        w.parent.append(parent)
        w.side.append(0 if ga and gb else (1 if ga else 2))
        w.split.append(split)
        group = ga or gb
        assert group  # a child group's key came from ca or cb, so one side holds it
        w.frame.append(group[0].frame)
        w.count_a.append(sum(n.count for n in ga) if ga else 0)
        w.count_b.append(sum(n.count for n in gb) if gb else 0)
        w.depth.append(depth)
        if mark is not None:
            w.near[me] = mark
        kids = [(ca.get(key), cb.get(key)) for key in [*ca, *(key for key in cb if key not in ca)]]
        marks: list[int | None] = [None] * len(kids)
        if split:
            taken = [0, 0, 0]
            for i, (ka, kb) in enumerate(kids):
                s = 0 if ka and kb else (1 if ka else 2)
                if s and taken[s] < per_side:
                    taken[s] += 1
                    marks[i] = below
        elif mark:
            marks[:2] = [mark - 1] * min(2, len(kids))
        for (ka, kb), m in zip(reversed(kids), reversed(marks)):
            stack.append((ka, kb, me, depth + 1, m))
    return w


def merged_graph(a: Union[Node, LayerDiff, DiffResult], b: Node | None = None, *, layer: str | None = None,
                 threshold: float = DEFAULT_THRESHOLD, sampled: bool | None = None, k: Knowledge) -> "nx.DiGraph[Any]":
    """Both trees in one graph, every node. Each node has ``side`` in {"shared",
    "A-only", "B-only"}, ``count_a``/``count_b``, and ``split=True`` where the two
    sides' children differ. For drawing a large pair, see :func:`focused_graph`."""
    return merged_walk(a, b, layer=layer, threshold=threshold, sampled=sampled, k=k).whole()


def focused_graph(w: MergedWalk) -> "nx.DiGraph[Any]":
    """The part of a merged walk that shows the splits: the paths from the root to
    each split and the nodes near a split (:func:`merged_walk`'s ``per_side`` and
    ``below``). Empty when nothing splits."""
    path: set[int] = set()
    for i, is_split in enumerate(w.split):
        if is_split:
            while i >= 0 and i not in path:
                path.add(i)
                i = w.parent[i]
    if not path:
        return nx.DiGraph()
    return w.graph(sorted(path | w.near.keys()))

"""Call graphs as networkx DiGraphs, for the report's drawings (Graphviz).

Nodes are keyed by their identity path: the tuple of normalised identities from
the root, so that the same calling context has the same key in both traces and
in the merged graph. (Keys grow with depth; these graphs are meant for drawing,
at report scale, not for million-frame trees: the diff itself does not use them.)
"""

from __future__ import annotations

from typing import Optional, Union

import networkx as nx

from tracer.process.diff import (DEFAULT_THRESHOLD, DiffResult, LayerDiff, children_groups, looks_sampled, present,
                                 total_samples)
from tracer.process.normalize import identity_label
from tracer.process.tags import isa_of, library_of
from tracer.trace import Node

ROOT_KEY: tuple[str, ...] = ("root",)
SHARED, A_ONLY, B_ONLY = "shared", "A-only", "B-only"
_Group = Optional[list[Node]]


def _attrs(group: list[Node]) -> dict:
    f = group[0].frame
    return {"label": f.label, "kind": f.kind, "lib": f.lib, "library": library_of(f), "isa": isa_of(f),
            "file": f.file, "line": f.line}


def call_graph(tree: Node) -> nx.DiGraph:
    """One layer's call tree as a graph (same-identity siblings merged, as in the diff).
    Node attributes: label, kind, lib, library, isa, file, line, count, depth."""
    g = nx.DiGraph()
    stack: list[tuple[list[Node], tuple[str, ...], tuple[str, ...] | None]] = [([tree], ROOT_KEY, None)]
    while stack:
        group, key, parent = stack.pop()
        count = sum(n.count for n in group)
        g.add_node(key, **_attrs(group), count=count, depth=len(key) - 1)
        if parent is not None:
            g.add_edge(parent, key, count=count)
        for ident, kids in reversed(children_groups(group).items()):
            stack.append((kids, key + (identity_label(ident),), key))
    return g


def merged_graph(a: Union[Node, LayerDiff, DiffResult], b: Node | None = None, *, layer: str | None = None,
                 threshold: float = DEFAULT_THRESHOLD, sampled: bool | None = None) -> nx.DiGraph:
    """Both trees in one graph. Each node has ``side`` in {"shared", "A-only", "B-only"},
    ``count_a``/``count_b``, and ``split=True`` where the two sides' children differ.

    Takes two trees, or a diff result (then ``layer`` picks one of its layers, default
    the first), whose threshold and sampling then apply, so that graph and diff agree.
    """
    if isinstance(a, DiffResult):
        chosen = [d for d in a.layers if layer is None or d.layer == layer]
        if not chosen:
            raise ValueError(f"the diff has no {layer} layer")
        a = chosen[0]
    if isinstance(a, LayerDiff):
        if a.a_root is None or a.b_root is None:
            raise ValueError("this diff result does not hold its trees (loaded from JSON?)")
        a, b, threshold, sampled = a.a_root, a.b_root, a.threshold, a.sampled
    if b is None:
        raise TypeError("merged_graph needs two trees or a diff result")
    if sampled is None:
        sampled = looks_sampled(a) or looks_sampled(b)
    total_a, total_b = (total_samples(a), total_samples(b)) if sampled else (0, 0)

    g = nx.DiGraph()
    stack: list[tuple[_Group, _Group, tuple[str, ...], tuple[str, ...] | None]] = [([a], [b], ROOT_KEY, None)]
    while stack:
        ga, gb, key, parent = stack.pop()
        side = SHARED if ga and gb else (A_ONLY if ga else B_ONLY)
        ca = present(children_groups(ga), total_a, threshold, sampled) if ga else {}
        cb = present(children_groups(gb), total_b, threshold, sampled) if gb else {}
        g.add_node(key, **_attrs(ga or gb), side=side, split=bool(ga and gb and ca.keys() != cb.keys()),
                   count_a=sum(n.count for n in ga) if ga else 0, count_b=sum(n.count for n in gb) if gb else 0,
                   depth=len(key) - 1)
        if parent is not None:
            g.add_edge(parent, key, side=side)
        order = list(ca) + [k for k in cb if k not in ca]
        for ident in reversed(order):
            stack.append((ca.get(ident), cb.get(ident), key + (identity_label(ident),), key))
    return g

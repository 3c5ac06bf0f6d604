"""Aligning two call trees of one layer (see tracer.processing.diff for the design):
top-down, children matched by normalised identity regardless of order, with fast
paths for the common shapes. Returns a LayerDiff with the split points nested
under the first decisions."""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter
from typing import Any

from tracer.knowledge import Knowledge
from tracer.processing.diff.result import LayerDiff, Split
from tracer.processing.diff.split import SplitBuilder
from tracer.processing.normalize import identity
from tracer.processing.sampling import ALPHA, DEFAULT_THRESHOLD, family_alpha, significant
from tracer.processing.tree import above, looks_sampled, size, total_samples
from tracer.trace import Frame, Node

_CHILDREN, _COUNT = attrgetter("children"), attrgetter("count")


def diff_trees(a_root: Node, b_root: Node, layer: str = "python", threshold: float = DEFAULT_THRESHOLD, *,
               sampled: bool | None = None, sources_a: dict[tuple[str, int], list[str]] | None = None,
               sources_b: dict[tuple[str, int], list[str]] | None = None,
               python_elsewhere: bool = False, devices_differ: bool = True,
               k: Knowledge) -> LayerDiff:
    """Align two trees of one layer and return their split points.

    ``sampled`` (default: guessed from the frames) makes ``threshold`` apply: a child
    counts as present only when ``count >= threshold * samples`` on its side, and one
    side's frame is a split only if the other's miss is not chance. With
    ``python_elsewhere`` (the traces have a python layer) a sampled layer's Python
    frames never split. The roots are aligned whatever their names (both are the
    probe step). ``k``: what the stages know (tracer.knowledge), handed down by the caller.
    """
    if sampled is None:
        sampled = looks_sampled(a_root) or looks_sampled(b_root)
    total_a, total_b = (total_samples(a_root), total_samples(b_root)) if sampled else (0, 0)
    min_a, min_b = threshold * total_a, threshold * total_b
    # every frame above the threshold is tested once at most: the family's significance
    alpha = family_alpha(_above_count(a_root, min_a) + _above_count(b_root, min_b)) if sampled else ALPHA
    ctx = SplitBuilder(layer, sampled, total_a, total_b, sources_a or {}, sources_b or {},
                       devices_differ=devices_differ, k=k)

    # Identities are numbered: int keys hash and compare faster than tuples of strings.
    # keyof maps id(Frame) to that number: Frame objects are shared by all the nodes
    # of a loaded trace, and hashing a frozen dataclass costs more than id().
    keyof: dict[int, int] = {}
    numbers: dict[tuple[str, str, str], int] = {}
    idents = ctx.idents
    kget = keyof.get

    # identity numbers of frames that run wherever they happen to be triggered, not
    # where the code decides (tracer.knowledge: noise): aligned when both sides have
    # them in the same place, otherwise ignored
    noise: set[int] = set()
    is_noise = k.is_noise
    python_keys: set[int] = set()  # identity numbers of Python frames

    def key_slow(f: Frame) -> int:
        ident = identity(f, k)
        n = numbers.get(ident)
        if n is None:
            n = numbers[ident] = len(idents)
            idents.append(ident)
            if is_noise(f.label):
                noise.add(n)
            if f.kind == "python":
                python_keys.add(n)
        keyof[id(f)] = n
        return n

    top: list[Split] = []
    shared = extra_a = extra_b = ignored_a = ignored_b = 0
    # entry: (A side, B side, parent entry, enclosing split). A side is one Node, or a
    # list of Nodes when same-identity siblings were merged.
    stack: list[tuple[Any, Any, Any, Split | None]] = [(a_root, b_root, None, None)]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        entry = pop()
        a, b, _, enclosing = entry
        shared += 1
        if a.__class__ is list:
            extra_a += len(a) - 1
            ka = [c for n in a for c in n.children]
        else:
            ka = a.children
        if b.__class__ is list:
            extra_b += len(b) - 1
            kb = [c for n in b for c in n.children]
        else:
            kb = b.children
        if not ka and not kb:
            continue
        # fast paths for the common cases, without building groups; a sampled layer
        # takes them where every child is above the threshold (checked in C)
        fast = not sampled or ((not ka or min(map(_COUNT, ka)) >= min_a)
                               and (not kb or min(map(_COUNT, kb)) >= min_b))
        if fast:
            if len(ka) == 1 and len(kb) == 1:  # a chain of single calls
                x, y = ka[0], kb[0]
                num = kget(id(x.frame))
                if num is None:
                    num = key_slow(x.frame)
                m = kget(id(y.frame))
                if m is None:
                    m = key_slow(y.frame)
                if num == m:
                    if x.children or y.children:
                        push((x, y, entry, enclosing))
                    else:  # two leaves: aligned, nothing below
                        shared += 1
                    continue
        ia = [kget(id(c.frame)) for c in ka]
        if None in ia:
            ia = [num if num is not None else key_slow(c.frame) for num, c in zip(ia, ka)]
        ib = [kget(id(c.frame)) for c in kb]
        if None in ib:
            ib = [num if num is not None else key_slow(c.frame) for num, c in zip(ib, kb)]
        if fast and ia == ib and len(set(ia)) == len(ia):
            # the same children in the same order, one per identity
            n = len(ka)
            if any(map(_CHILDREN, ka)) or any(map(_CHILDREN, kb)):
                extend(zip(reversed(ka), reversed(kb), repeat(entry, n), repeat(enclosing, n)))
            else:  # leaves only (checked in C): aligned, nothing below
                shared += n
            continue
        # no None is left in ia and ib (replaced above); mypy cannot narrow a list by `None in`,
        # and a cast would cost a call per node in this loop
        da = _group(ia, ka)  # type: ignore[arg-type]
        db = _group(ib, kb)  # type: ignore[arg-type]
        if noise:
            da, low = _without(da, noise)
            ignored_a += size(low)
            db, low = _without(db, noise)
            ignored_b += size(low)
        if sampled:
            da, low_a = above(da, min_a)
            db, low_b = above(db, min_b)
            if da.keys() != db.keys():
                da, db = significant(da, db, low_a, low_b, total_a, total_b,
                                     python_keys if python_elsewhere else _NONE, alpha)
            ignored_a += size(low_a.values()) if low_a else 0
            ignored_b += size(low_b.values()) if low_b else 0
        else:
            low_a = low_b = {}
        split = enclosing
        if da.keys() != db.keys():
            only_a = [(num, g) for num, g in da.items() if num not in db]
            only_b = [(num, g) for num, g in db.items() if num not in da]
            split = ctx.split(entry, only_a, only_b, low_a, low_b)
            extra_a += sum(side.nodes for side in split.only_a)
            extra_b += sum(side.nodes for side in split.only_b)
            (enclosing.children if enclosing is not None else top).append(split)
        for num, g in reversed(da.items()):
            h = db.get(num)
            if h is not None:
                push((g, h, entry, split))
    # First decisions first: independent splits nearest the root lead (the sort is
    # stable, so splits at one depth keep their depth-first order).
    top.sort(key=lambda s: s.depth)
    return LayerDiff(layer, sampled, threshold, alpha, total_a, total_b, shared + extra_a + ignored_a,
                     shared + extra_b + ignored_b, shared, ignored_a, ignored_b, top, a_root=a_root, b_root=b_root)


_NONE: frozenset[int] = frozenset()


def _above_count(root: Node, minimum: float) -> int:
    """Frames of a sampled tree in at least ``minimum`` samples (the root left out)."""
    n, stack = 0, list(root.children)
    while stack:
        node = stack.pop()
        if node.count >= minimum:
            n += 1
            stack.extend(node.children)
    return n


def _group(keys: list[int], nodes: list[Node]) -> dict[int, Any]:
    """Children by identity number: a Node, or a list of Nodes for repeated identities."""
    out: dict[int, Any] = {}
    get = out.get
    for k, c in zip(keys, nodes):
        g = get(k)
        if g is None:
            out[k] = c
        elif g.__class__ is list:
            g.append(c)
        else:
            out[k] = [g, c]
    return out


def _without(groups: dict[int, Any], noise: set[int]) -> tuple[dict[int, Any], list[Any]]:
    if noise.isdisjoint(groups):
        return groups, []
    return {k: g for k, g in groups.items() if k not in noise}, [g for k, g in groups.items() if k in noise]



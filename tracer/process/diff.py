"""The diff engine: where two execution paths of the same primitive split.

Two call trees (CPU vs GPU, default vs a variant, one machine vs another) are
aligned top-down: the children of two aligned nodes are matched by normalised
identity (:func:`tracer.process.normalize.identity`), regardless of order. A
**split point** is a node present in both trees whose children differ: some
child frames run on one side only. For each split the result carries the common
path from the root, each side's differing first frames with a summary of what
they reach (libraries, ISA-specific code), the deciding code fragment and a
classification of the decision.

Design choices, each for a reason:

* Siblings with the same identity are merged into one group (their counts add
  up, their children are pooled). Normalisation makes ``f.isra.0`` and
  ``f.cold`` the same function, and two ``<genexpr>`` of one function are
  consequences of the same parent; comparing groups keeps alignment one-to-one.
* Sampled layers (native stacks: ``Node.count`` = samples containing the frame,
  the root's count = all samples) are noisy. A child is present only if its
  share of its side's samples is at least ``threshold``; a frame seen in 3 of 800
  samples is not a split. A frame above the threshold on one side only is a split
  only if its absence on the other side is not chance either: the binomial
  probability that the other side's samples would miss a frame of that share
  must be under ``ALPHA`` (3 of 138 samples against 0 of 50 is chance, p = 0.33;
  66 of 138 against 0 of 50 is not). Both are carried in the result. And when
  the traces have a python layer, a sampled layer's Python frames on one side
  only are not splits either: the python layer records every call, so it alone
  says whether the Python path differs; in a sampled stack a short Python call
  is there or not by chance.
* Splits below a common node that lies under an earlier split are nested in that
  split's ``children``: the reader sees the first decision, then its
  consequences. Independent splits (in disjoint subtrees) stay side by side, in
  the order of a depth-first walk of side A.
* Frames that run wherever they are triggered (garbage-collector callbacks,
  :data:`NOISE`) never make a split.
* Everything is iterative (traces can be thousands of frames deep) and linear:
  each node is visited once, identities are numbered once per Frame object, and
  the common cases (same children in the same order, single-call chains, leaves)
  are aligned without building groups, mostly in C (itertools, operator).

Pure: no I/O, no framework imported.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter
from typing import Any, Iterable, Iterator, Sequence

from tracer.errors import DltraceError
from tracer.process.normalize import identity, identity_label
from tracer.process.tags import (GPU_LIBS, JIT, MKL, ONEDNN, OPENBLAS, SYSTEM_LIBS, VENDOR_LIBS, is_jit, is_unnamed, isa_of,
                                 library_of, vendor_named)
from tracer.trace import Frame, Node, Run, Trace

LAYERS = ("python", "op", "native")
DEFAULT_THRESHOLD = 0.02
#: Sampled layers: a one-sided frame whose absence on the other side has at least this
#: probability under the binomial model is not a split (see the module docstring).
ALPHA = 0.01
CLASSES = ("device dispatch", "library choice", "ISA-specific code", "compilation", "allocation/transfer", "other")
#: Meta fields that must agree unless forced: diffing conv2d against relu finds nothing useful.
MUST_MATCH = ("framework", "primitive")
#: Meta fields whose difference is the point of the diff, shown in the header.
COMPARED = ("framework_version", "api", "device", "variant", "shape")

_CHILDREN, _COUNT = attrgetter("children"), attrgetter("count")
#: Frames that run wherever they happen to be triggered, not where the code decides:
#: they are aligned when both sides have them in the same place, otherwise ignored.
NOISE = re.compile(
    r"gc_callback"  # gc.callbacks (jaxlib's _xla_gc_callback): run wherever the collector triggers
)
HOT = 5  # most-sampled / most-called leaf frames shown per branch
CONTEXT = 2  # source lines shown around each marked line


class DiffError(DltraceError):
    """Traces that cannot be diffed as asked (mismatched, missing run or layer, bad threshold)."""


# ----------------------------------------------------------------------------- result


@dataclass
class Branch:
    """One side's first differing frame at a split, and what its subtree reaches."""

    label: str
    kind: str
    identity: str
    file: str
    line: int
    library: str  # tag of the frame itself
    count: int  # calls (traced layers) or samples (sampled layers)
    share: float | None  # sampled layers: share of this side's samples
    other_share: float | None  # sampled layers: the same frame's share on the other side (below threshold)
    call_lines: list[int]  # lines of the split frame that called it
    nodes: int  # frames in its subtree, itself included
    libraries: list[str]  # library tags reached in the subtree
    isa: list[str]  # ISA tags reached in the subtree
    hot: list[str]  # the most counted leaf frames (the kernels, for native layers)


@dataclass
class CodeLine:
    line: int
    text: str
    ran: str = ""  # "A", "B", "AB" (ran on both) or "" (did not run, or unknown)
    call: str = ""  # "A" / "B" / "AB": a call site of a differing child
    decision: bool = False  # the statement that chose the path
    gap_before: bool = False  # lines were left out before this one


@dataclass
class Fragment:
    """The deciding code. Python: the function's source around the deciding lines.
    Op/native/C: no source exists in the trace, so the names on each side."""

    kind: str  # "source" | "symbols"
    side: str  # "AB" (one source for both), "A" or "B" (the sources differ)
    function: str
    file: str = ""
    first_line: int = 0
    lines: list[CodeLine] = field(default_factory=list)
    decision_line: int | None = None
    a_names: list[str] = field(default_factory=list)
    b_names: list[str] = field(default_factory=list)
    note: str = ""


@dataclass
class Split:
    layer: str
    frame: str  # label of the split frame
    kind: str
    file: str
    line: int
    depth: int
    path: list[str]  # labels from the root to the split frame, both included
    only_a: list[Branch]
    only_b: list[Branch]
    fragments: list[Fragment]
    classification: str
    reason: str
    children: list["Split"] = field(default_factory=list)  # splits further down, consequences of this one


@dataclass
class LayerDiff:
    layer: str
    sampled: bool
    threshold: float  # applies to sampled layers only
    alpha: float  # sampled layers: the significance a one-sided frame needs (ALPHA)
    samples_a: int
    samples_b: int
    nodes_a: int
    nodes_b: int
    shared: int  # aligned frames
    ignored_a: int  # frames under the threshold, or one-sided by chance (sampled layers)
    ignored_b: int
    splits: list[Split]  # first decisions; nested ones in Split.children
    a_root: Node | None = field(default=None, repr=False, compare=False, metadata={"json": False})
    b_root: Node | None = field(default=None, repr=False, compare=False, metadata={"json": False})

    def all_splits(self) -> Iterator[tuple[int, Split]]:
        """(nesting level, split) in reading order, without recursion."""
        stack = [(0, s) for s in reversed(self.splits)]
        while stack:
            level, s = stack.pop()
            yield level, s
            stack.extend((level + 1, c) for c in reversed(s.children))


@dataclass
class DiffResult:
    a: dict[str, Any]  # what A is: framework, version, primitive, api, device, variant, shape, arch
    b: dict[str, Any]
    pass_: str
    phase: str
    threshold: float
    differs: dict[str, list[Any]]  # meta fields that differ: name -> [A's value, B's value]
    layers: list[LayerDiff]
    warnings: list[str] = field(default_factory=list)

    @property
    def split_count(self) -> int:
        return sum(1 for layer in self.layers for _ in layer.all_splits())

    def to_json(self) -> dict[str, Any]:
        """Plain types only (dicts, lists, str, numbers): what ``dltrace diff --json`` prints."""
        doc = _plain(self)
        doc["pass"] = doc.pop("pass_")
        doc["split_count"] = self.split_count
        return doc


def _plain(obj: Any) -> Any:
    """dataclasses.asdict without recursion through nested splits (which can be deep),
    skipping fields marked ``json: False`` (the retained trees)."""
    if isinstance(obj, Split):
        return _splits_json([obj])[0]
    if dataclasses.is_dataclass(obj):
        return {f.name: (_splits_json(getattr(obj, f.name)) if f.name == "splits" else _plain(getattr(obj, f.name)))
                for f in dataclasses.fields(obj) if f.metadata.get("json", True)}
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [_plain(v) for v in obj]
    return obj


def _splits_json(splits: list[Split]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    stack = [(s, out) for s in reversed(splits)]
    while stack:
        s, dest = stack.pop()
        doc = {f.name: _plain(getattr(s, f.name)) for f in dataclasses.fields(s) if f.name != "children"}
        doc["children"] = []
        dest.append(doc)
        stack.extend((c, doc["children"]) for c in reversed(s.children))
    return out


# ----------------------------------------------------------------------------- traces


def describe(trace: Trace) -> dict[str, Any]:
    """What a trace is, in the fields a diff header shows."""
    m = trace.meta
    machine = m.get("machine") or {}
    return {
        "framework": m.get("framework", ""),
        "framework_version": m.get("framework_version", ""),
        "primitive": m.get("primitive", ""),
        "api": m.get("api", ""),
        "device": m.get("device", ""),
        "variant": m.get("variant", ""),
        "shape": list(m.get("shape") or []),
        "arch": machine.get("arch", "") if isinstance(machine, dict) else "",
        "cpu": machine.get("cpu", "") if isinstance(machine, dict) else "",
    }


def is_sampled(run: Run, layer: str, root: Node | None) -> bool:
    """Whether a layer's counts are samples: its run's stats say so (``{"sampled": true}``,
    per layer or for the run) or its frames are native stack frames."""
    st = run.stats or {}
    for holder in (st.get("layers"), st):
        if isinstance(holder, dict):
            per = holder.get(layer)
            if isinstance(per, dict) and per.get("sampled"):
                return True
    flag = st.get("sampled")
    if flag is True or (isinstance(flag, (list, tuple)) and layer in flag):
        return True
    return root is not None and looks_sampled(root)


def looks_sampled(root: Node) -> bool:
    """Native stack frames are sampled, whatever the stats say."""
    return any(c.frame.kind == "native" for c in root.children)


def diff_traces(a: Trace, b: Trace, pass_: str = "forward", phase: str = "warm",
                layers: Sequence[str] = LAYERS, threshold: float = DEFAULT_THRESHOLD,
                force: bool = False) -> DiffResult:
    """Diff the ``pass_``/``phase`` run of two loaded traces, layer by layer.

    Traces of a different framework or primitive are refused (DiffError) unless
    ``force``. Layers missing on both sides are skipped; a layer on one side only is
    a warning; no layer in common is an error.
    """
    if not 0 <= threshold < 1:
        raise DiffError(f"threshold {threshold} is not a share of samples (0 <= threshold < 1)")
    da, db = describe(a), describe(b)
    warnings: list[str] = []
    for key in MUST_MATCH:
        if da[key] != db[key]:
            msg = f"the traces are of different {key}s (A: {da[key] or '?'}, B: {db[key] or '?'})"
            if not force:
                raise DiffError(f"{msg}; use --force to diff them anyway")
            warnings.append(msg)
    differs = {k: [da[k], db[k]] for k in (*COMPARED, "arch", "cpu") if da[k] != db[k]}
    ra, rb = a.run(pass_, phase), b.run(pass_, phase)
    for side, run, trace in (("A", ra, a), ("B", rb, b)):
        if run is None:
            have = ", ".join(f"{r.phase} {r.pass_}" for r in trace.runs) or "none"
            raise DiffError(f"trace {side} has no {phase} {pass_} run (it has: {have})")
    assert ra is not None and rb is not None
    results = []
    for layer in layers:
        ta, tb = ra.layers.get(layer), rb.layers.get(layer)
        if ta is None and tb is None:
            continue
        if ta is None or tb is None:
            warnings.append(f"the {layer} layer is only in trace {'A' if tb is None else 'B'}; not diffed")
            continue
        sampled = is_sampled(ra, layer, ta) or is_sampled(rb, layer, tb)
        python_elsewhere = layer != "python" and "python" in ra.layers and "python" in rb.layers
        results.append(diff_trees(ta, tb, layer, threshold, sampled=sampled, sources_a=a.sources, sources_b=b.sources,
                                  python_elsewhere=python_elsewhere))
    if not results:
        have_a = ", ".join(ra.layers) or "none"
        have_b = ", ".join(rb.layers) or "none"
        raise DiffError(f"no {'/'.join(layers)} layer in both traces (A has: {have_a}; B has: {have_b})")
    return DiffResult(da, db, pass_, phase, threshold, differs, results, warnings)


# ----------------------------------------------------------------------------- trees


def total_samples(root: Node) -> int:
    """A sampled layer's sample count: the root's count (or its children's, if unset)."""
    return root.count or sum(c.count for c in root.children)


def _size(groups: Iterable[Any]) -> int:
    """Frames in the subtrees of some groups (Nodes or lists of Nodes)."""
    n, stack = 0, [x for g in groups for x in _as_list(g)]
    while stack:
        node = stack.pop()
        n += 1
        stack.extend(node.children)
    return n


def diff_trees(a_root: Node, b_root: Node, layer: str = "python", threshold: float = DEFAULT_THRESHOLD, *,
               sampled: bool | None = None, sources_a: dict[tuple[str, int], list[str]] | None = None,
               sources_b: dict[tuple[str, int], list[str]] | None = None,
               python_elsewhere: bool = False) -> LayerDiff:
    """Align two trees of one layer and return their split points.

    ``sampled`` (default: guessed from the frames) makes ``threshold`` apply: a child
    counts as present only when ``count >= threshold * samples`` on its side, and one
    side's frame is a split only if the other's miss is not chance. With
    ``python_elsewhere`` (the traces have a python layer) a sampled layer's Python
    frames never split. The roots are aligned whatever their names (both are the
    probe step).
    """
    if sampled is None:
        sampled = looks_sampled(a_root) or looks_sampled(b_root)
    total_a, total_b = (total_samples(a_root), total_samples(b_root)) if sampled else (0, 0)
    min_a, min_b = threshold * total_a, threshold * total_b
    ctx = _Context(layer, sampled, total_a, total_b, sources_a or {}, sources_b or {})

    # Identities are numbered: int keys hash and compare faster than tuples of strings.
    # keyof maps id(Frame) to that number: Frame objects are shared by all the nodes
    # of a loaded trace, and hashing a frozen dataclass costs more than id().
    keyof: dict[int, int] = {}
    numbers: dict[tuple[str, str, str], int] = {}
    idents = ctx.idents
    kget = keyof.get

    noise: set[int] = set()  # identity numbers of frames that never decide (NOISE)
    python_keys: set[int] = set()  # identity numbers of Python frames

    def key_slow(f: Frame) -> int:
        ident = identity(f)
        n = numbers.get(ident)
        if n is None:
            n = numbers[ident] = len(idents)
            idents.append(ident)
            if NOISE.search(f.label):
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
                k = kget(id(x.frame))
                if k is None:
                    k = key_slow(x.frame)
                m = kget(id(y.frame))
                if m is None:
                    m = key_slow(y.frame)
                if k == m:
                    if x.children or y.children:
                        push((x, y, entry, enclosing))
                    else:  # two leaves: aligned, nothing below
                        shared += 1
                    continue
        ia = [kget(id(c.frame)) for c in ka]
        if None in ia:
            ia = [k if k is not None else key_slow(c.frame) for k, c in zip(ia, ka)]
        ib = [kget(id(c.frame)) for c in kb]
        if None in ib:
            ib = [k if k is not None else key_slow(c.frame) for k, c in zip(ib, kb)]
        if fast and ia == ib and len(set(ia)) == len(ia):
            # the same children in the same order, one per identity
            n = len(ka)
            if any(map(_CHILDREN, ka)) or any(map(_CHILDREN, kb)):
                extend(zip(reversed(ka), reversed(kb), repeat(entry, n), repeat(enclosing, n)))
            else:  # leaves only (checked in C): aligned, nothing below
                shared += n
            continue
        da = _group(ia, ka)
        db = _group(ib, kb)
        if noise:
            da, low = _without(da, noise)
            ignored_a += _size(low)
            db, low = _without(db, noise)
            ignored_b += _size(low)
        if sampled:
            da, low_a = _above(da, min_a)
            db, low_b = _above(db, min_b)
            if da.keys() != db.keys():
                da, db = _significant(da, db, low_a, low_b, total_a, total_b,
                                      python_keys if python_elsewhere else _NONE)
            ignored_a += _size(low_a.values()) if low_a else 0
            ignored_b += _size(low_b.values()) if low_b else 0
        else:
            low_a = low_b = {}
        split = enclosing
        if da.keys() != db.keys():
            only_a = [(k, g) for k, g in da.items() if k not in db]
            only_b = [(k, g) for k, g in db.items() if k not in da]
            split = ctx.split(entry, only_a, only_b, low_a, low_b)
            extra_a += sum(side.nodes for side in split.only_a)
            extra_b += sum(side.nodes for side in split.only_b)
            (enclosing.children if enclosing is not None else top).append(split)
        for k, g in reversed(da.items()):
            h = db.get(k)
            if h is not None:
                push((g, h, entry, split))
    # First decisions first: independent splits nearest the root lead (the sort is
    # stable, so splits at one depth keep their depth-first order).
    top.sort(key=lambda s: s.depth)
    return LayerDiff(layer, sampled, threshold, ALPHA, total_a, total_b, shared + extra_a + ignored_a,
                     shared + extra_b + ignored_b, shared, ignored_a, ignored_b, top, a_root, b_root)


_NONE: frozenset[int] = frozenset()


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


def _as_list(group: Any) -> list[Node]:
    return group if group.__class__ is list else [group]


def _count(group: Any) -> int:
    return sum(n.count for n in group) if group.__class__ is list else group.count


def _above(groups: dict, minimum: float) -> tuple[dict, dict]:
    """Split child groups into those with at least ``minimum`` samples and the rest."""
    keep, low = {}, {}
    for k, g in groups.items():
        (keep if _count(g) >= minimum else low)[k] = g
    return keep, low


def miss_chance(hits: int, samples: int, share: float) -> float:
    """P(at most ``hits`` of ``samples`` samples contain a frame that takes ``share``
    of the time): the binomial CDF, how likely a side's miss is sampling chance."""
    if share <= 0:
        return 1.0
    if share >= 1:
        return 0.0 if hits < samples else 1.0
    lp, lq = math.log(share), math.log1p(-share)
    lg = math.lgamma(samples + 1)
    return min(1.0, sum(math.exp(lg - math.lgamma(i + 1) - math.lgamma(samples - i + 1) + i * lp + (samples - i) * lq)
                        for i in range(min(hits, samples) + 1)))


def _significant(da: dict, db: dict, low_a: dict, low_b: dict, total_a: int, total_b: int,
                 python_keys: set[int]) -> tuple[dict, dict]:
    """Move the one-sided groups whose absence on the other side could be chance
    (:func:`miss_chance` >= ALPHA), and those of Python frames in ``python_keys``
    (compared in the python layer), to their side's ``low`` dict: not a split."""
    out = []
    for mine, theirs, low, their_low, total, their_total in ((da, db, low_a, low_b, total_a, total_b),
                                                             (db, da, low_b, low_a, total_b, total_a)):
        keep = {}
        for k, g in mine.items():
            if k not in theirs and total:
                other = their_low.get(k)
                if k in python_keys or miss_chance(_count(other) if other is not None else 0, their_total,
                                                   _count(g) / total) >= ALPHA:
                    low[k] = g
                    continue
            keep[k] = g
        out.append(keep)
    return out[0], out[1]


def children_groups(nodes: list[Node]) -> dict[tuple[str, str, str], list[Node]]:
    """Children of a group of aligned nodes, grouped by identity (for the graph module)."""
    out: dict[tuple[str, str, str], list[Node]] = {}
    for n in nodes:
        for c in n.children:
            out.setdefault(identity(c.frame), []).append(c)
    return out


def present(groups: dict, total: int, threshold: float, sampled: bool) -> dict:
    """The child groups that count as present (all of them unless the layer is sampled)."""
    return _above(groups, threshold * total)[0] if sampled else groups


# ----------------------------------------------------------------------------- one split


def _label(frame: Frame) -> str:
    """A frame's label for people: run-time generated code has only an address."""
    return JIT if is_jit(frame) and is_unnamed(frame) else frame.label


@dataclass
class _Context:
    layer: str
    sampled: bool
    total_a: int
    total_b: int
    sources_a: dict[tuple[str, int], list[str]]
    sources_b: dict[tuple[str, int], list[str]]
    idents: list[tuple[str, str, str]] = field(default_factory=list)  # identity number -> identity

    def split(self, entry: tuple, only_a: list, only_b: list, low_a: dict, low_b: dict) -> Split:
        ga, gb = _as_list(entry[0]), _as_list(entry[1])
        path = []
        e = entry
        while e is not None:
            path.append(_label(_as_list(e[0])[0].frame))
            e = e[2]
        path.reverse()
        depth = len(path) - 1
        only_a = [(k, _as_list(g)) for k, g in only_a]
        only_b = [(k, _as_list(g)) for k, g in only_b]
        frames_a: dict[int, Frame] = {}
        frames_b: dict[int, Frame] = {}
        branches_a = [self._branch(k, g, self.total_a, low_b, self.total_b, frames_a) for k, g in only_a]
        branches_b = [self._branch(k, g, self.total_b, low_a, self.total_a, frames_b) for k, g in only_b]
        cls, reason = classify(list(frames_a.values()), list(frames_b.values()))
        frame = ga[0].frame
        return Split(self.layer, frame.label, frame.kind, frame.file, frame.line, depth, path, branches_a, branches_b,
                     self._fragments(ga, gb, only_a, only_b), cls, reason)

    def _branch(self, key: int, group: list[Node], total: int, other_low: dict, other_total: int,
                seen: dict[int, Frame]) -> Branch:
        frame = group[0].frame
        count = sum(n.count for n in group)
        nodes = 0
        leaves: dict[str, int] = {}
        mine: dict[int, Frame] = {}
        stack = list(group)
        while stack:
            node = stack.pop()
            nodes += 1
            mine[id(node.frame)] = node.frame
            if node.children:
                stack.extend(node.children)
            else:
                label = _label(node.frame)
                leaves[label] = leaves.get(label, 0) + node.count
        seen.update(mine)
        subtree = list(mine.values())
        libs = sorted({t for t in map(library_of, subtree) if t})
        isas = sorted({t for t in map(isa_of, subtree) if t})
        hot = [label for label, _ in sorted(leaves.items(), key=lambda kv: -kv[1])[:HOT]]
        share = other = None
        if self.sampled:
            share = count / total if total else 0.0
            low = other_low.get(key)
            other = (_count(low) / other_total if other_total else 0.0) if low is not None else 0.0
        call_lines = sorted({ln for n in group for ln in n.call_lines})
        return Branch(_label(frame), frame.kind, identity_label(self.idents[key]), frame.file, frame.line,
                      library_of(frame), count, share, other, call_lines, nodes, libs, isas, hot)

    def _fragments(self, ga: list[Node], gb: list[Node], only_a: list, only_b: list) -> list[Fragment]:
        fa, fb = ga[0].frame, gb[0].frame
        a_names = [_label(g[0].frame) for _, g in only_a]
        b_names = [_label(g[0].frame) for _, g in only_b]
        if fa.kind == "python":
            src_a = self.sources_a.get((fa.file, fa.line))
            src_b = self.sources_b.get((fb.file, fb.line))
            ran_a = {ln for n in ga for ln in n.lines}
            ran_b = {ln for n in gb for ln in n.lines}
            call_a = {ln for _, g in only_a for n in g for ln in n.call_lines}
            call_b = {ln for _, g in only_b for n in g for ln in n.call_lines}
            if src_a is not None and (src_b is None or (src_a == src_b and fa.line == fb.line)):
                return [source_fragment(fa, src_a, ran_a, ran_b, call_a, call_b, "AB", a_names, b_names)]
            if src_b is not None and src_a is None:
                return [source_fragment(fb, src_b, ran_a, ran_b, call_a, call_b, "AB", a_names, b_names)]
            if src_a is not None and src_b is not None:  # two versions of the function
                return [source_fragment(fa, src_a, ran_a, set(), call_a, set(), "A", a_names, []),
                        source_fragment(fb, src_b, set(), ran_b, set(), call_b, "B", [], b_names)]
            note = "the source of this function was not recorded in the traces"
        elif fa.kind == "root":
            note = "split at the probe step itself: the first frames the probes reach differ"
        elif fa.kind == "c":
            note = "a C function: its source is not part of the wheel; the callees on each side are shown"
        elif fa.kind == "op":
            note = "op-level records carry no source: the ops and kernels on each side are shown"
        else:
            note = "native source is not available in wheels: the symbols on each side are shown"
        return [Fragment("symbols", "AB", fa.label, fa.file, fa.line, a_names=a_names, b_names=b_names, note=note)]


_BRANCHING = re.compile(r"^\s*(?:if|elif|else|try|except|case|match|while|for|with)\b|\sif\s.*\selse\s")


def source_fragment(frame: Frame, source: list[str], ran_a: set[int], ran_b: set[int], call_a: set[int],
                    call_b: set[int], side: str, a_names: list[str], b_names: list[str]) -> Fragment:
    """The function's source around the lines that ran on one side only and the call
    sites of the differing children, with the deciding statement found."""
    first, last = frame.line, frame.line + len(source) - 1
    only = (ran_a - ran_b) | (ran_b - ran_a)
    calls = call_a | call_b
    decision = None
    if only:
        start = min(only)
        for ln in range(start - 1, first - 1, -1):
            if ln in ran_a and ln in ran_b and _BRANCHING.search(source[ln - first]):
                decision = ln
                break
        if decision is None:
            decision = start
    elif calls:
        decision = min(calls)  # same lines ran, different callee: the call dispatches dynamically
    marked = only | calls | ({decision} if decision else set())
    marked = {ln for ln in marked if first <= ln <= last}
    if marked:
        show = {first}
        for ln in marked:
            show.update(range(max(first, ln - CONTEXT), min(last, ln + CONTEXT) + 1))
    else:
        show = set(range(first, min(last, first + 14) + 1))
    lines = []
    prev = None
    for ln in sorted(show):
        ran = ("A" if ln in ran_a else "") + ("B" if ln in ran_b else "")
        call = ("A" if ln in call_a else "") + ("B" if ln in call_b else "")
        lines.append(CodeLine(ln, source[ln - first], ran, call, ln == decision,
                              prev is not None and ln != prev + 1))
        prev = ln
    note = "" if ran_a or ran_b else "no line events were recorded for this function"
    return Fragment("source", side, frame.label, frame.file, first, lines, decision, a_names, b_names, note)


# ----------------------------------------------------------------------------- classification

_GPU = re.compile(r"(?<![a-z])(?:cuda\w*|cudnn|cublas\w*|cupy|cupyx|gpu|cutlass|nccl|nvrtc|rocm|hip|miopen|ptx)"
                  r"(?![a-z])")
# Only words that eager execution does not use: eager JAX also builds jaxprs and
# lowers single primitives, so "jaxpr", "lower" and "xla" do not tell the two apart.
_COMPILE = re.compile(r"(?<![a-z])(?:p?jit|jitted|jit_compile|compile[dr]?|compilation|dynamo|inductor|torchscript|"
                      r"tf_function|polymorphic_function|__inference|xla_computation)(?![a-z])")
_ALLOC = re.compile(r"memcpy|memmove|malloc|calloc|realloc|allocat|device_put|device_get|transfer|htod|dtoh|"
                    r"(?<![a-z])(?:h2d|d2h)(?![a-z])|pin_memory|pinned|empty_strided|to_copy")
_ALLOC_NAME = re.compile(r"^(?:to|copy_|free|empty|empty_like|asarray|asnumpy|alloc|copyto)$")
_DEVICE = re.compile(r"(?<![a-z])(?:cpu|device|xpu|mps|tpu|backend|intel64|ideep|mkldnn)(?![a-z])")
_CODEGEN_LIBS = frozenset({ONEDNN, MKL, OPENBLAS, JIT})


def _text(f: Frame) -> str:
    return f"{f.module}.{f.name} {f.lib}".lower()


def _markers(frames: list[Frame], pattern: re.Pattern[str]) -> set[str]:
    return {m.group(0) for f in frames for m in pattern.finditer(_text(f))}


def _codegen(f: Frame) -> bool:
    """A kernel generator's frame (oneDNN's jit_* kernels, BLAS): not model compilation."""
    return library_of(f) in _CODEGEN_LIBS or vendor_named(f) in _CODEGEN_LIBS


def _last_name(f: Frame) -> str:
    return re.split(r"[.:]", f.name.split("(")[0])[-1].lower()


def classify(frames_a: list[Frame], frames_b: list[Frame]) -> tuple[str, str]:
    """Classify a split from the frames reached on each side only. First rule that fires:

    1. device dispatch: GPU code (cuda/gpu/cudnn/cublas/cupy names, GPU library tags) on one side only;
    2. compilation: jit/pjit/compile/dynamo/tf.function frames on one side only (oneDNN's and BLAS's
       generated kernels excluded: those are ISA-specific code, not compiling the model);
    3. library choice: the vendor libraries reached differ (oneDNN vs Eigen vs BLAS...);
    4. ISA-specific code: the ISA tags reached differ (avx512_core vs avx2, jit code), libc's
       and libpython's own variants (glibc's AVX memcpy) left out;
    5. allocation/transfer: memcpy/alloc/transfer/device_put frames on one side only;
    6. device dispatch: cpu/device/backend names on one side only (forward_cpu vs forward_ideep);
    7. other.
    """
    gpu_a = _markers(frames_a, _GPU) | {t for t in map(library_of, frames_a) if t in GPU_LIBS}
    gpu_b = _markers(frames_b, _GPU) | {t for t in map(library_of, frames_b) if t in GPU_LIBS}
    if bool(gpu_a) != bool(gpu_b):
        side, words = ("A", gpu_a) if gpu_a else ("B", gpu_b)
        return "device dispatch", f"{side} reaches GPU code ({_names(words)}); the other side does not"
    comp_a = _markers([f for f in frames_a if not _codegen(f)], _COMPILE)
    comp_b = _markers([f for f in frames_b if not _codegen(f)], _COMPILE)
    if bool(comp_a) != bool(comp_b):
        side, words = ("A", comp_a) if comp_a else ("B", comp_b)
        return "compilation", f"{side} goes through compilation ({_names(words)}); the other side runs eagerly"
    libs_a = {t for t in map(library_of, frames_a) if t in VENDOR_LIBS}
    libs_b = {t for t in map(library_of, frames_b) if t in VENDOR_LIBS}
    if libs_a != libs_b:
        return "library choice", f"A reaches {_names(libs_a)}; B reaches {_names(libs_b)}"
    # glibc picks its own AVX memcpy at load time: not ISA-specific code a port must provide
    isa_a = {isa_of(f) for f in frames_a if isa_of(f) and library_of(f) not in SYSTEM_LIBS}
    isa_b = {isa_of(f) for f in frames_b if isa_of(f) and library_of(f) not in SYSTEM_LIBS}
    if isa_a != isa_b:
        none = "no ISA-specific"
        return "ISA-specific code", f"A runs {_names(isa_a, none)} code; B runs {_names(isa_b, none)} code"
    alloc_a = _markers(frames_a, _ALLOC) | {n for n in map(_last_name, frames_a) if _ALLOC_NAME.match(n)}
    alloc_b = _markers(frames_b, _ALLOC) | {n for n in map(_last_name, frames_b) if _ALLOC_NAME.match(n)}
    if bool(alloc_a) != bool(alloc_b):
        side, words = ("A", alloc_a) if alloc_a else ("B", alloc_b)
        return "allocation/transfer", f"{side} allocates or moves data ({_names(words)}); the other side does not"
    dev_a, dev_b = _markers(frames_a, _DEVICE), _markers(frames_b, _DEVICE)
    if dev_a != dev_b:
        return "device dispatch", f"device or backend names differ (A: {_names(dev_a)}; B: {_names(dev_b)})"
    return "other", "no device, library, ISA, compilation or allocation difference in the frame names"


def _names(items: set[str], none: str = "no vendor library", most: int = 4) -> str:
    return ", ".join(sorted(items)[:most]) if items else none

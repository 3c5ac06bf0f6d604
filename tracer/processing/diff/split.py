"""One split point, built from the aligned nodes where two paths part: the common
path from the root, each side's branches with what their subtrees reach
(libraries, ISA-specific code, the hottest leaves), the deciding code and the
classification."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracer.contract import STANDIN_LIB
from tracer.processing.cpu_kernel import attribute
from tracer.processing.diff.classify import classify
from tracer.processing.diff.fragment import fragments
from tracer.processing.diff.result import Branch, Split
from tracer.processing.normalize import identity, identity_label
from tracer.processing.sampling import miss_chance
from tracer.knowledge import Knowledge
from tracer.processing.tags import JIT, is_jit, is_unnamed, isa_of, library_of
from tracer.processing.tree import Groups, as_list, group_count
from tracer.trace import Frame, Node

HOT = 5  # most-sampled / most-called leaf frames shown per branch
#: The layer whose leaves are machine code: its "reaches" names the frames that
#: computed, by the rule a kernel cell names one (tracer.processing.cpu_kernel.computes).
NATIVE = "native"


def _label(frame: Frame) -> str:
    """A frame's label for people: run-time generated code has only an address."""
    return JIT if is_jit(frame) and is_unnamed(frame) else frame.label


@dataclass
class SplitBuilder:
    """What one alignment knows that each of its splits needs."""

    layer: str
    sampled: bool
    total_a: int
    total_b: int
    sources_a: dict[tuple[str, int], list[str]]
    sources_b: dict[tuple[str, int], list[str]]
    idents: list[tuple[str, str, str]] = field(default_factory=list)  # identity number -> identity
    devices_differ: bool = True  # the traces ran on different devices (see classify)
    k: Knowledge = field(kw_only=True)  # what the stages know (tracer.knowledge), handed down

    def split(self, entry: tuple[Any, ...], only_a: list[Any], only_b: list[Any], low_a: Groups,
              low_b: Groups) -> Split:
        ga, gb = as_list(entry[0]), as_list(entry[1])
        path, idents = [], []
        e = entry
        while e is not None:
            frame = as_list(e[0])[0].frame
            path.append(_label(frame))
            idents.append(identity(frame, self.k))
            e = e[2]
        path.reverse()
        idents.reverse()
        depth = len(path) - 1
        only_a = [(k, as_list(g)) for k, g in only_a]
        only_b = [(k, as_list(g)) for k, g in only_b]
        frames_a: dict[int, Frame] = {}
        frames_b: dict[int, Frame] = {}
        branches_a = [self._branch(k, g, self.total_a, low_b, self.total_b, frames_a) for k, g in only_a]
        branches_b = [self._branch(k, g, self.total_b, low_a, self.total_a, frames_b) for k, g in only_b]
        # an op that reached the stand-in backend on one side is itself the device's kernel
        # there (aten::relu as the backend's leaf, against CPU's relu calling clamp_min)
        backend_a = [g.frame for g in ga[:1] if g.frame.lib == STANDIN_LIB and gb and gb[0].frame.lib != STANDIN_LIB]
        backend_b = [g.frame for g in gb[:1] if g.frame.lib == STANDIN_LIB and ga and ga[0].frame.lib != STANDIN_LIB]
        cls, reason = classify(list(frames_a.values()) + backend_a, list(frames_b.values()) + backend_b,
                               self.devices_differ, k=self.k)
        frame = ga[0].frame
        return Split(self.layer, frame.label, frame.kind, frame.file, frame.line, depth, path, branches_a, branches_b,
                     fragments(ga, gb, only_a, only_b, [_label(g[0].frame) for _, g in only_a],
                               [_label(g[0].frame) for _, g in only_b], self.sources_a, self.sources_b), cls, reason,
                     library=library_of(frame, self.k), ident_path=tuple(idents[1:]))


    def _branch(self, key: int, group: list[Node], total: int, other_low: Groups, other_total: int,
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
        libs = sorted({t for f in subtree if (t := library_of(f, self.k))})
        isas = sorted({t for f in subtree if (t := isa_of(f, self.k))})
        hot = self._hot(group, leaves)
        share = other = p = None
        if self.sampled:
            share = count / total if total else 0.0
            low = other_low.get(key)
            other_hits = group_count(low) if low is not None else 0
            other = other_hits / other_total if other_total else 0.0
            p = miss_chance(other_hits, other_total, share) if other_total else None
        call_lines = sorted({ln for n in group for ln in n.call_lines})
        return Branch(_label(frame), frame.kind, identity_label(self.idents[key]), frame.file, frame.line,
                      library_of(frame, self.k), count, share, other, call_lines, nodes, libs, isas, hot,
                      p if self.sampled else None, self.idents[key])

    def _hot(self, group: list[Node], leaves: dict[str, int]) -> list[str]:
        """What the branch reaches, most counted first. A python or op layer's leaves
        are the calls it made. A native layer's are often helpers (a write, a refcount,
        a log check, the engine's push lambda) or unnamed code, so there each stack
        counts for the innermost frame below the branch that computes, by the kernel
        cells' one rule (cpu_kernel.attribute, cpu_kernel.computes), and a stack that
        reaches none counts for nothing: a helper is never said to be what a path reaches."""
        if self.layer != NATIVE:
            return [label for label, _ in sorted(leaves.items(), key=lambda kv: -kv[1])[:HOT]]
        found, _ = attribute(group, self.k)
        return [a.frame.label for a in sorted(found, key=lambda a: (-(a.own + a.below), a.frame.label))[:HOT]]


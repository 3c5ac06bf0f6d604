"""From py-spy's samples to a native tree per sampled loop: each sample belongs to
the loop whose marker frame is on its stack (only the frames below the marker are
kept), raw frames become trace Frames (Python frames with their module, unplaced
addresses classified by tracer.collect.maps), and the stacks merge into a tree.
Stdlib only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from tracer.collect.costs import quartiles
from tracer.collect.maps import JIT_LIB, UNKNOWN_NAME, Maps
from tracer.collect.pyspy_format import RawFrame
from tracer.trace import Frame, Node

#: dltrace's own code (the tracer package, its probes included), never part of a trace:
#: the package's folder as imported and as resolved (the runner puts it on the probe's
#: path through a link)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OWN = tuple(dict.fromkeys(p + os.sep for p in (_PACKAGE, os.path.realpath(_PACKAGE))))
_ADDR = re.compile(r"^0x[0-9a-fA-F]+$")


@dataclass
class Window:
    """One sampled loop: which marker, when (epoch seconds), how it ran."""

    marker: str
    t0: float
    t1: float
    iterations: int
    seconds: float
    baseline_s: float  # seconds per iteration without py-spy (mean of before and after)
    per_iter_s: float = 0.0  # seconds per iteration while sampled (median over blocks)


def joined(windows: list[Window], baseline_s: float) -> Window:
    """The windows one loop was sampled in, taken in turn with other loops, as one:
    the time it ran and its iterations add up; its time per iteration is the median
    of theirs (as within a window, one preempted slice does not decide it)."""
    per_iter = sorted(w.per_iter_s for w in windows)
    return Window(windows[0].marker, windows[0].t0, windows[-1].t1, sum(w.iterations for w in windows),
                  sum(w.seconds for w in windows), baseline_s, per_iter[len(per_iter) // 2])


@dataclass
class _Acc:
    samples: int = 0
    bad_frames: int = 0  # samples from which bogus frames were dropped
    jit: int = 0  # samples with JIT code
    jit_orphans: int = 0  # ... whose native callers were lost (the unwind failed at the JIT frame)
    stacks: list[tuple[list[Frame], int]] = field(default_factory=list)
    jit_code: dict[int, tuple[str, int]] = field(default_factory=dict)  # start -> (kernel, bytes) of JIT code reached


class FrameNamer:
    """Turns raw frames into trace Frames. Python frames get the module name from
    their file (the sys.path entry stripped, as the Python collector does)."""

    def __init__(self, maps: Maps, paths: Iterable[str] = ()):
        self.maps = maps
        self._bases = sorted({os.path.realpath(p) + os.sep for p in paths if p}, key=len, reverse=True)
        self._cache: dict[RawFrame, Frame | None] = {}
        #: shared-object basename -> its path, as mapped: where the scorecard reads the
        #: symbol sizes of the code each path reached (tracer.elf_code)
        self.lib_paths: dict[str, str] = {}

    def relative(self, filename: str) -> str:
        if filename.startswith("<") or not os.path.isabs(filename):
            return filename
        real = os.path.realpath(filename)
        for base in self._bases:
            if real.startswith(base):
                return real[len(base):]
        return os.path.basename(filename)

    def frame(self, raw: RawFrame) -> Frame | None:
        """None drops the frame (a bogus address)."""
        if raw in self._cache:
            return self._cache[raw]
        if raw.python:
            rel = self.relative(raw.where)
            module = rel[:-3].replace("/", ".") if rel.endswith(".py") and not rel.startswith("<") else ""
            if module.endswith(".__init__"):
                module = module[: -len(".__init__")]
            out: Frame | None = Frame("python", module, raw.name, rel, raw.line)
        elif _ADDR.match(raw.name):
            if raw.where in ("?", ""):
                placed = self.maps.classify(int(raw.name, 16))
                out = Frame("native", "", placed[0], lib=placed[1]) if placed else None
            else:
                out = Frame("native", "", UNKNOWN_NAME, lib=os.path.basename(raw.where))
        elif raw.line:  # debug info gave a source file, not the library; the line would split nodes
            out = Frame("native", "", raw.name, file=os.path.basename(raw.where))
        else:
            out = Frame("native", "", raw.name, lib=os.path.basename(raw.where) if raw.where != "?" else "")
        if out is not None and out.lib and os.path.isabs(raw.where):
            self.lib_paths.setdefault(out.lib, raw.where)
        self._cache[raw] = out
        return out


def _own(raw: RawFrame) -> bool:
    return raw.python and raw.where.startswith(_OWN)


def split_by_marker(samples: list[tuple[tuple[RawFrame, ...], int]], markers: Iterable[str],
                    namer: FrameNamer) -> tuple[dict[str, _Acc], int]:
    """Group samples by the loop marker on their stack, keeping the frames below it
    (without dltrace's own Python frames and bogus addresses). Returns the groups and
    the number of samples outside every marker."""
    wanted = set(markers)
    groups = {m: _Acc() for m in wanted}
    outside = 0
    for stack, count in samples:
        idx = next((i for i in range(len(stack) - 1, -1, -1) if stack[i].python and stack[i].name in wanted), None)
        if idx is None:
            outside += count
            continue
        acc = groups[stack[idx].name]
        acc.samples += count
        frames, bad = [], False
        for raw in stack[idx + 1 :]:
            if _own(raw):
                continue
            f = namer.frame(raw)
            if f is None:
                bad = True
                continue
            if f.lib == JIT_LIB and raw.where in ("?", ""):
                entry = namer.maps.perfmap.entry(int(raw.name, 16))
                if entry is not None:
                    acc.jit_code[entry[0]] = (entry[2], entry[1])
            frames.append(f)
        acc.bad_frames += count if bad else 0
        jit = [i for i, f in enumerate(frames) if f.lib == JIT_LIB]
        if jit:
            acc.jit += count
            acc.jit_orphans += count if jit[0] == 0 or frames[jit[0] - 1].kind != "native" else 0
        acc.stacks.append((frames, count))
    return groups, outside


def build_tree(stacks: list[tuple[list[Frame], int]], root: Frame) -> Node:
    """Merge stacks into a tree: root count = samples, node count = samples that
    passed through that frame in that calling context."""
    top = Node(root)
    index: dict[int, dict[Frame, Node]] = {}
    for frames, count in stacks:
        top.count += count
        node = top
        for f in frames:
            kids = index.setdefault(id(node), {})
            child = kids.get(f)
            if child is None:
                child = kids[f] = Node(f)
                node.children.append(child)
            child.count += count
            node = child
    return top


def layer_stats(acc: _Acc, window: Window, errors: dict[str, int], rate: int) -> dict[str, Any]:
    """What Run.stats["layers"]["native"] records for one sampled loop."""
    per_iter = window.per_iter_s
    return {
        "sampled": True,
        "samples": acc.samples,
        "errors": sum(errors.values()),
        "error_kinds": errors,
        "bad_frames": acc.bad_frames,
        "jit_samples": acc.jit,
        "jit_orphan_samples": acc.jit_orphans,
        "rate": rate,
        # the generated kernels this loop reached, one per instance: [kernel, bytes, start]
        "jit_code": [[name, size, start] for start, (name, size) in sorted(acc.jit_code.items())],
        "duration_s": round(window.seconds, 4),
        "iterations": window.iterations,
        "slowdown": round(per_iter / window.baseline_s, 3) if per_iter and window.baseline_s else None,
    }


def merge_trees(trees: list[Node]) -> Node:
    """Trees of one loop sampled in several windows, as one: counts of the same frame in
    the same calling context add up (the windows' roots are the same step)."""
    top = Node(trees[0].frame)
    stack = [(top, t) for t in trees]
    index: dict[int, dict[Frame, Node]] = {}
    while stack:
        dst, src = stack.pop()
        dst.count += src.count
        kids = index.get(id(dst))
        if kids is None:
            kids = index[id(dst)] = {c.frame: c for c in dst.children}
        for child in src.children:
            have = kids.get(child.frame)
            if have is None:
                have = kids[child.frame] = Node(child.frame)
                dst.children.append(have)
            stack.append((have, child))
    return top


def merge_stats(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`layer_stats` of several windows of one loop, as one."""
    out = dict(parts[0])
    for key in ("samples", "errors", "bad_frames", "jit_samples", "jit_orphan_samples", "iterations"):
        out[key] = sum(p.get(key) or 0 for p in parts)
    out["duration_s"] = round(sum(p.get("duration_s") or 0 for p in parts), 4)
    kinds: dict[str, int] = {}
    for p in parts:
        for k, n in (p.get("error_kinds") or {}).items():
            kinds[k] = kinds.get(k, 0) + n
    out["error_kinds"] = kinds
    instances = {row[2]: row for p in parts for row in (p.get("jit_code") or [])}  # one process: starts are unique
    out["jit_code"] = [instances[k] for k in sorted(instances)]
    slow = [p["slowdown"] for p in parts if p.get("slowdown")]
    out["slowdown"] = round(sum(slow) / len(slow), 3) if slow else None
    ratios = [r for p in parts for r in p.get("slowdowns") or []]
    out["slowdowns"] = ratios
    if len(ratios) >= 2:  # the spread a cost is said with (tracer.analysis.workload_coverage.Cost)
        low, high = quartiles(ratios)
        out["slowdown_low"], out["slowdown_high"] = round(low, 3), round(high, 3)
    out["replicas"] = len(parts)
    return out

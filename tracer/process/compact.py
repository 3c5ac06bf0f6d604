"""Compact views of the sampled native layer, for reading in a terminal.

A native tree is deep (torch's conv2d: ~30 frames of dispatcher glue before the
kernel) and wide (every sample that landed in malloc makes a branch). These pure
functions keep the frames that say where the work goes, and say what they hid.
"""

from __future__ import annotations

import re

from tracer.process.tags import LIBC, LIBPYTHON, LIBSTDCXX, library_of
from tracer.trace import Node

#: Libraries whose frames are plumbing between the interesting ones.
PLUMBING = frozenset({LIBC, LIBSTDCXX, LIBPYTHON, "libgcc"})


def hide_plumbing(root: Node, hidden_libs: frozenset[str] = PLUMBING) -> Node:
    """A copy without native frames of ``hidden_libs`` (libc, libstdc++, libpython):
    their children move up to the nearest kept ancestor, merging with siblings of
    the same frame. A branch made only of such frames disappears into its parent's
    count (the samples still count at the parent)."""
    out = Node(root.frame, root.count, root.time_ns, list(root.call_lines), list(root.lines))
    stack = [(root, out)]
    while stack:
        src, dst = stack.pop()
        index = {c.frame: c for c in dst.children}
        pending = list(src.children)
        while pending:
            child = pending.pop(0)
            if child.frame.kind == "native" and library_of(child.frame) in hidden_libs:
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


def prune(root: Node, min_share: float) -> tuple[Node, int]:
    """A copy without subtrees below ``min_share`` of the root's samples; also
    returns how many frames were dropped."""
    total = root.count or sum(c.count for c in root.children) or 1
    dropped = 0
    out = Node(root.frame, root.count, root.time_ns)
    stack = [(root, out)]
    while stack:
        src, dst = stack.pop()
        for child in sorted(src.children, key=lambda c: -c.count):
            if child.count / total < min_share:
                dropped += child.size()
                continue
            copy = Node(child.frame, child.count, child.time_ns)
            dst.children.append(copy)
            stack.append((child, copy))
    return out, dropped


_TEMPLATE = re.compile(r"<[^<>]*>")


def short_symbol(name: str, width: int = 110) -> str:
    """A C++ symbol without template arguments (``Conv2DOp<Eigen::ThreadPoolDevice,
    float>::Compute`` -> ``Conv2DOp<…>::Compute``), cut to ``width``."""
    prev = None
    while prev != name:  # innermost first; the placeholder has no angle brackets
        prev, name = name, _TEMPLATE.sub("\x00", name)
    name = name.replace("\x00", "<…>")
    return name if len(name) <= width else name[: width - 1] + "…"

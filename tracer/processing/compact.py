"""Compact views of the sampled native layer, for reading in a terminal.

A native tree is deep (torch's conv2d: ~30 frames of dispatcher glue before the
kernel) and wide (every sample that landed in malloc makes a branch). These pure
functions keep the frames that say where the work goes, and say what they hid.
"""

from __future__ import annotations

import re

from tracer.knowledge import Knowledge
from tracer.processing.tags import LIBC, LIBPYTHON, LIBSTDCXX, library_of
from tracer.processing.tree import splice
from tracer.trace import Node

#: Libraries whose frames are plumbing between the interesting ones.
PLUMBING = frozenset({LIBC, LIBSTDCXX, LIBPYTHON, "libgcc"})


def hide_plumbing(root: Node, hidden_libs: frozenset[str] = PLUMBING, *, k: Knowledge) -> Node:
    """A copy without native frames of ``hidden_libs`` (libc, libstdc++, libpython; tagged
    with the knowledge ``k``), looked through as :func:`tracer.processing.tree.splice` does."""
    return splice(root, lambda f: f.kind == "native" and library_of(f, k) in hidden_libs)


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

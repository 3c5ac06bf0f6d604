"""Brendan Gregg's collapsed stacks, as flamegraph.pl reads them: one line per
stack, ``root;caller;callee WEIGHT``. Each tree's root is named after its pass and
layer, so several trees in one file stay apart. Written line by line: the text of a
deep trace is large, its memory need not be."""

from __future__ import annotations

from tracer.render.export import Tree, frame_name, walk_events
from tracer.render.terminal import TextSink
from tracer.trace import Trace


def _clean(name: str) -> str:
    """';' separates frames and a newline ends the stack: neither may be in a name."""
    return name.replace(";", ":").replace("\n", " ").replace("\r", " ")


#: The most frames a stack line names: a deeper one keeps its outermost and innermost
#: frames and names how many were left out between them. Each line repeats its whole
#: stack, so a chain 30,000 deep written in full was 3.7 GB of text.
MAX_STACK = 256


def _stack(names: list[str]) -> str:
    if len(names) <= MAX_STACK:
        return ";".join(names)
    half = MAX_STACK // 2
    return ";".join([*names[:half], f"… {len(names) - 2 * half + 1} frames …", *names[-half + 1:]])


def write(trace: Trace, trees: list[Tree], out: TextSink) -> None:
    for tree in trees:
        names: list[str] = []
        for entering, node, own in walk_events(tree):
            if not entering:
                names.pop()
                continue
            names.append(_clean(frame_name(node.frame, tree)))
            if own > 0:
                out.write(_stack(names))
                out.write(f" {own}\n")

"""Brendan Gregg's collapsed stacks, as flamegraph.pl reads them: one line per
stack, ``root;caller;callee WEIGHT``. Each tree's root is named after its pass and
layer, so several trees in one file stay apart."""

from __future__ import annotations

from tracer.render.export import Tree, frame_name, weighted_stacks
from tracer.trace import Trace


def _clean(name: str) -> str:
    """';' separates frames and a newline ends the stack: neither may be in a name."""
    return name.replace(";", ":").replace("\n", " ").replace("\r", " ")


def collapsed_lines(trees: list[Tree]) -> list[str]:
    lines = []
    for tree in trees:
        for path, weight in weighted_stacks(tree):
            lines.append(";".join(_clean(frame_name(f, tree)) for f in path) + f" {weight}")
    return lines


def render(trace: Trace, trees: list[Tree]) -> str:
    lines = collapsed_lines(trees)
    return "\n".join(lines) + ("\n" if lines else "")

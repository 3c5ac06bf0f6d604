"""Counts that answer "how much framework code runs on this path"."""

from __future__ import annotations

from dataclasses import dataclass

from tracer.trace import Node


@dataclass(frozen=True)
class PathSummary:
    python_functions: int  # distinct framework Python functions
    python_calls: int
    c_handoffs: int  # distinct C functions the framework's Python hands off to
    lines: int  # distinct (function, line) pairs that ran
    nodes: int


def summarize(tree: Node) -> PathSummary:
    py, c, lines = set(), set(), set()
    calls = nodes = 0
    for _, node in tree.walk():
        nodes += 1
        f = node.frame
        if f.kind == "python":
            py.add(f.key)
            calls += node.count
            lines.update((f.key, ln) for ln in node.lines)
        elif f.kind == "c":
            c.add(f.key)
    return PathSummary(len(py), calls, len(c), len(lines), nodes)

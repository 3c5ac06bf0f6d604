"""Counts that answer "how much framework code runs on this path"."""

from __future__ import annotations

from dataclasses import dataclass

from tracer.trace import Node


@dataclass(frozen=True)
class PathSummary:
    python_functions: int  # distinct framework Python functions
    python_calls: int
    c_handoffs: int  # distinct C functions the framework's Python hands off to
    ext_handoffs: int  # distinct functions of other Python libraries (numpy...) it calls
    lines: int  # distinct (function, line) pairs that ran
    nodes: int


def summarize(tree: Node) -> PathSummary:
    py: set[tuple[str, str, str]] = set()
    c: set[tuple[str, str, str]] = set()
    ext: set[tuple[str, str, str]] = set()
    lines: set[tuple[tuple[str, str, str], int]] = set()
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
        elif f.kind == "ext":
            ext.add(f.key)
    return PathSummary(len(py), calls, len(c), len(ext), len(lines), nodes)

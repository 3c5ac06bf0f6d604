"""What every importer checks of a recorded time before it becomes a trace's.

A trace holds counts and times as non-negative integers of nanoseconds, and every
command refuses a trace that does not. A profiler file from elsewhere may say
anything: a NaN, an infinity, a timestamp of 1e308 whose nanoseconds overflow, an
operator that ends before it begins. Each is refused here, naming the record, so
that an import either writes a trace every later command reads or writes nothing.
"""

from __future__ import annotations

import math
from typing import Any

from tracer.trace import Node, Trace

#: The largest time in microseconds a record may give: 2**63 nanoseconds (292 years),
#: the most a signed 64-bit counter of nanoseconds holds. A real profile's absolute
#: timestamps (microseconds since the epoch, ~1.7e15) lie well inside it.
MAX_US = float(2**63) / 1000.0


def bad_time(value: Any) -> str:
    """Why ``value`` is not a recorded time in microseconds ("" when it is one): a
    finite int or float (no bool), at most :data:`MAX_US` either way."""
    if value.__class__ not in (int, float):
        return f"is {type(value).__name__}, not a number"
    if not math.isfinite(value):
        return f"is {value}, not a finite time"
    if abs(value) > MAX_US:
        return f"is {value:.3g}, beyond any real clock"
    return ""


def bad_span(start: float, end: float) -> str:
    """Why ``start``..``end`` is not an interval ("" when it is one)."""
    if end < start:
        return f"ends at {end:g} before it begins at {start:g}"
    if end - start > MAX_US:
        return f"lasts {end - start:.3g} µs, beyond any real clock"
    return ""


def unreadable_tree(trace: Trace) -> str:
    """Where ``trace`` holds what no command reads back (a negative or non-integer
    count or time), else "": the last check before an import returns it."""
    for run in trace.runs:
        for name, root in run.layers.items():
            stack: list[Node] = [root]
            while stack:
                node = stack.pop()
                for what, value in (("count", node.count), ("time", node.time_ns)):
                    if value.__class__ is not int or value < 0:
                        return f"{run.pass_} {name} layer: {node.frame.name[:60]!r} has {what} {value!r}"
                stack.extend(node.children)
    return ""

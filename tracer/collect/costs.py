"""What recording a layer costs, measured as a benchmark measures it: the untraced step
and the recorded step timed in turn (A B A B ...), so that a change of the machine's load
falls on both sides alike, and the cost is the median of the pairs' ratios with its
spread (the quartiles), never one timing of each side. Stdlib only: it runs in the
probe process, around the framework's own step."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def quartiles(values: list[float]) -> tuple[float, float]:
    """(first, third) quartile; both the value itself where there is one."""
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def paired(untraced: Callable[[], float], traced: Callable[[], float], sync: Callable[[], None],
           first: float | None = None, least: int = 5, most: int = 15, budget_s: float = 0.2) -> dict[str, Any]:
    """Time ``untraced`` and ``traced`` (each returns the seconds of its own step) in turn,
    at least ``least`` pairs and up to ``most`` within ``budget_s``; ``first``: the traced
    step already timed (the trace keeps it), paired with an untraced step timed next.
    The stats a run keeps: each side's median, and the cost as the median of the pairs'
    ratios with its quartiles (``overhead_spread``)."""
    plain: list[float] = []
    recorded: list[float] = []
    t_end = time.perf_counter() + budget_s
    if first is not None:
        plain.append(untraced())
        sync()
        recorded.append(first)
    while len(plain) < least or (len(plain) < most and time.perf_counter() < t_end):
        plain.append(untraced())
        sync()
        recorded.append(traced())
        sync()
    ratios = [r / p for r, p in zip(recorded, plain) if p > 0]
    out: dict[str, Any] = {"untraced_s": statistics.median(plain), "traced_s": statistics.median(recorded),
                           "pairs": len(plain)}
    if ratios:
        low, high = quartiles(ratios)
        out.update(overhead=statistics.median(ratios), overhead_spread=[low, high])
    return out

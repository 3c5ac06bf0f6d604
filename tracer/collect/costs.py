"""What recording a layer costs, measured as a benchmark measures it: the untraced step
and the recorded step timed in pairs whose order alternates (A B, B A, A B, ...: ABBA),
so that a drift of the machine's load, and what one step leaves to the next (the
recorded step's processing, its garbage, its cache misses), fall on both sides alike;
the cost is the median, over each two pairs of opposite order, of their ratios'
geometric mean (in which an order's bias cancels), with its spread (the quartiles),
never one timing of each side. As timeit and pyperf do, the cyclic garbage collector
is off while the pairs are timed (a collection that the other side's garbage started
lands on whichever step runs next), and a side not yet run is warmed up first, untimed.
Stdlib only: it runs in the probe process, around the framework's own step."""

from __future__ import annotations

import gc
import math
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


def _even(n: int) -> int:
    return n + n % 2


def paired(untraced: Callable[[], float], traced: Callable[[], float], sync: Callable[[], None],
           first: float | None = None, least: int = 5, most: int = 15, budget_s: float = 0.2,
           warmup: int = 1) -> dict[str, Any]:
    """Time ``untraced`` and ``traced`` (each returns the seconds of its own step) in
    pairs of alternating order, at least ``least`` pairs and up to ``most`` within
    ``budget_s``, both rounded up to an even count (each two pairs one ABBA block).
    ``first``: the traced step already timed (the trace keeps it), the first pair's
    traced-first side, paired with an untraced step timed next; without it, ``warmup``
    steps of each side run untimed first. The stats a run keeps: each side's median, and
    the cost as the median of the blocks' ratios with their quartiles
    (``overhead_spread``)."""
    least, most = _even(max(least, 2)), _even(max(most, least))
    plain: list[float] = []
    recorded: list[float] = []
    was_on = gc.isenabled()
    gc.disable()
    try:
        if first is None:
            for _ in range(warmup):
                untraced()
                sync()
                traced()
                sync()
        t_end = time.perf_counter() + budget_s
        while len(plain) < least or (len(plain) < most and time.perf_counter() < t_end):
            if (len(plain) % 2 == 0) == (first is not None):  # traced first in this pair
                recorded.append(first if first is not None and not recorded else traced())
                sync()
                plain.append(untraced())
                sync()
            else:
                plain.append(untraced())
                sync()
                recorded.append(traced())
                sync()
    finally:
        if was_on:
            gc.enable()
    ratios = [r / p if p > 0 else math.nan for r, p in zip(recorded, plain)]
    blocks = [math.sqrt(a * b) for a, b in zip(ratios[::2], ratios[1::2]) if a > 0 and b > 0]
    out: dict[str, Any] = {"untraced_s": statistics.median(plain), "traced_s": statistics.median(recorded),
                           "pairs": len(plain)}
    if blocks:
        low, high = quartiles(blocks)
        out.update(overhead=statistics.median(blocks), overhead_spread=[low, high])
    return out

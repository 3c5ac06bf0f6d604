"""When a sampled frame counts: in at least a threshold share of its side's samples,
and, when it is on one side only, absent from the other side by more than chance
(a binomial test). Pure."""

from __future__ import annotations

import math
from collections.abc import Set

from tracer.processing.tree import Groups, group_count

DEFAULT_THRESHOLD = 0.02
#: Sampled layers: a one-sided frame whose absence on the other side has at least this
#: probability under the binomial model is not a split (see tracer.processing.diff).
ALPHA = 0.01


def miss_chance(hits: int, samples: int, share: float) -> float:
    """P(at most ``hits`` of ``samples`` samples contain a frame that takes ``share``
    of the time): the binomial CDF, how likely a side's miss is sampling chance."""
    if share <= 0:
        return 1.0
    if share >= 1:
        return 0.0 if hits < samples else 1.0
    lp, lq = math.log(share), math.log1p(-share)
    lg = math.lgamma(samples + 1)
    return min(1.0, sum(math.exp(lg - math.lgamma(i + 1) - math.lgamma(samples - i + 1) + i * lp + (samples - i) * lq)
                        for i in range(min(hits, samples) + 1)))


def family_alpha(tests: int) -> float:
    """The significance each of ``tests`` one-sided frames needs so that the whole
    diff has at most an ALPHA chance of one false split (Bonferroni): a layer tests
    every frame above the threshold, and at ALPHA each, one in a hundred would split
    by chance."""
    return ALPHA / max(1, tests)


def significant(da: Groups, db: Groups, low_a: Groups, low_b: Groups, total_a: int, total_b: int,
                python_keys: Set[int], alpha: float = ALPHA) -> tuple[Groups, Groups]:
    """Move the one-sided groups whose absence on the other side could be chance
    (:func:`miss_chance` >= ``alpha``), and those of Python frames in ``python_keys``
    (compared in the python layer), to their side's ``low`` dict: not a split."""
    out = []
    for mine, theirs, low, their_low, total, their_total in ((da, db, low_a, low_b, total_a, total_b),
                                                             (db, da, low_b, low_a, total_b, total_a)):
        keep = {}
        for k, g in mine.items():
            if k not in theirs and total:
                other = their_low.get(k)
                if k in python_keys or miss_chance(group_count(other) if other is not None else 0, their_total,
                                                   group_count(g) / total) >= alpha:
                    low[k] = g
                    continue
            keep[k] = g
        out.append(keep)
    return out[0], out[1]



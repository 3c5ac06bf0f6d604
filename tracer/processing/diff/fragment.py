"""The deciding code of a split: for Python frames, the function's source around
the lines that ran on one side only, with the deciding statement found; below
Python (ops, native symbols, C functions), the names on each side."""

from __future__ import annotations

import re
from typing import Any

from tracer.processing.diff.result import CodeLine, Fragment
from tracer.trace import Frame, Node

CONTEXT = 2  # source lines shown around each marked line


def fragments(ga: list[Node], gb: list[Node], only_a: list[Any], only_b: list[Any], a_names: list[str],
              b_names: list[str],
              sources_a: dict[tuple[str, int], list[str]],
              sources_b: dict[tuple[str, int], list[str]]) -> list[Fragment]:
    """The deciding code at a split between the aligned groups ``ga`` and ``gb``, whose
    children groups ``only_a`` / ``only_b`` (named ``a_names`` / ``b_names``) differ."""
    fa, fb = ga[0].frame, gb[0].frame
    if fa.kind == "python":
        src_a = sources_a.get((fa.file, fa.line))
        src_b = sources_b.get((fb.file, fb.line))
        ran_a = {ln for n in ga for ln in n.lines}
        ran_b = {ln for n in gb for ln in n.lines}
        call_a = {ln for _, g in only_a for n in g for ln in n.call_lines}
        call_b = {ln for _, g in only_b for n in g for ln in n.call_lines}
        if src_a is not None and (src_b is None or (src_a == src_b and fa.line == fb.line)):
            return [source_fragment(fa, src_a, ran_a, ran_b, call_a, call_b, "AB", a_names, b_names)]
        if src_b is not None and src_a is None:
            return [source_fragment(fb, src_b, ran_a, ran_b, call_a, call_b, "AB", a_names, b_names)]
        if src_a is not None and src_b is not None:  # two versions of the function
            return [source_fragment(fa, src_a, ran_a, set(), call_a, set(), "A", a_names, []),
                    source_fragment(fb, src_b, set(), ran_b, set(), call_b, "B", [], b_names)]
        note = "the source of this function was not recorded in the traces"
    elif fa.kind == "root":
        note = "split at the probe step itself: the first frames the probes reach differ"
    elif fa.kind == "c":
        note = "a C function: its source is not part of the wheel; the callees on each side are shown"
    elif fa.kind == "op":
        note = "op-level records carry no source: the ops and kernels on each side are shown"
    else:
        note = "native source is not available in wheels: the symbols on each side are shown"
    return [Fragment("symbols", "AB", fa.label, fa.file, fa.line, a_names=a_names, b_names=b_names, note=note)]



_BRANCHING = re.compile(r"^\s*(?:if|elif|else|try|except|case|match|while|for|with)\b|\sif\s.*\selse\s")


def source_fragment(frame: Frame, source: list[str], ran_a: set[int], ran_b: set[int], call_a: set[int],
                    call_b: set[int], side: str, a_names: list[str], b_names: list[str]) -> Fragment:
    """The function's source around the lines that ran on one side only and the call
    sites of the differing children, with the deciding statement found."""
    first, last = frame.line, frame.line + len(source) - 1
    only = (ran_a - ran_b) | (ran_b - ran_a)
    calls = call_a | call_b
    decision = None
    if only:
        start = min(only)
        for ln in range(start - 1, first - 1, -1):
            if ln in ran_a and ln in ran_b and _BRANCHING.search(source[ln - first]):
                decision = ln
                break
        if decision is None:
            decision = start
    elif calls:
        decision = min(calls)  # same lines ran, different callee: the call dispatches dynamically
    marked = only | calls | ({decision} if decision else set())
    marked = {ln for ln in marked if first <= ln <= last}
    if marked:
        show = {first}
        for ln in marked:
            show.update(range(max(first, ln - CONTEXT), min(last, ln + CONTEXT) + 1))
    else:
        show = set(range(first, min(last, first + 14) + 1))
    lines = []
    prev = None
    for ln in sorted(show):
        ran = ("A" if ln in ran_a else "") + ("B" if ln in ran_b else "")
        call = ("A" if ln in call_a else "") + ("B" if ln in call_b else "")
        lines.append(CodeLine(ln, source[ln - first], ran, call, ln == decision,
                              prev is not None and ln != prev + 1))
        prev = ln
    note = "" if ran_a or ran_b else "no line events were recorded for this function"
    return Fragment("source", side, frame.label, frame.file, first, lines, decision, a_names, b_names, note)



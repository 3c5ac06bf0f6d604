"""Single-trace mode: candidate split points without the second device.

Porting teams often have one machine only (no GPU, no target chip). From one
trace we can still point at the code that would decide: each executed framework
Python function whose source has a branch on the device or backend (an ``if``,
``elif``, conditional expression or ``try``), with the arm this run took (from
the lines that ran) and the arm it did not take (from the source, via ast), and
the calls in each: ``forward_cpu`` taken, ``forward_gpu`` not taken.

Pure: works on the trace's recorded sources, imports no framework.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from tracer.processing.vocabulary import DEVICE_CONDITION
from tracer.trace import Node, Trace


@dataclass
class Arm:
    label: str  # "if", "else", "elif", "then" (conditional expression), "try", "except ImportError"
    first_line: int  # file lines; 0 for an implicit empty else
    last_line: int
    ran: bool | None  # None: cannot tell (a conditional expression whose calls were not seen)
    calls: list[str]  # calls written in the arm
    observed: list[str]  # of those, the ones seen as children of the function in this run
    source: list[tuple[int, str]] = field(default_factory=list)
    raises: bool = False  # the arm only raises (or asserts): an error path, nothing to implement


@dataclass
class Candidate:
    function: str
    file: str
    first_line: int
    line: int  # the condition's line in the file
    kind: str  # "if" | "ifexp" | "try"
    condition: str
    matched: list[str]  # the device/backend words found in the condition
    arms: list[Arm]
    count: int  # calls of the function in this run

    @property
    def taken(self) -> list[str]:
        return [a.label for a in self.arms if a.ran]

    @property
    def untaken(self) -> list[str]:
        return [a.label for a in self.arms if a.ran is False]

    @property
    def alternatives(self) -> tuple[list[str], list[str]]:
        """(calls made only in the arms taken, calls only in the arms not taken), raising
        an exception left out: when both are non-empty the branch picks an implementation
        (forward_cpu vs forward_gpu), which is what a port has to provide."""
        taken = [c for a in self.arms if a.ran for c in a.calls if not _RAISING.search(c)]
        other = [c for a in self.arms if a.ran is False for c in a.calls if not _RAISING.search(c)]
        return [c for c in dict.fromkeys(taken) if c not in other], [c for c in dict.fromkeys(other) if c not in taken]

    @property
    def dispatches(self) -> bool:
        taken, other = self.alternatives
        return bool(taken and other)

    @property
    def guard(self) -> bool:
        """Input validation, not dispatch: every arm not taken only raises
        (``if callable(device_name): raise RuntimeError(...)``)."""
        untaken = [a for a in self.arms if a.ran is False]
        return bool(untaken) and all(a.raises for a in untaken)

    def to_json(self) -> dict[str, Any]:
        taken_calls, untaken_calls = self.alternatives
        return {**dataclasses.asdict(self), "taken": self.taken, "untaken": self.untaken,
                "taken_calls": taken_calls, "untaken_calls": untaken_calls, "dispatches": self.dispatches,
                "guard": self.guard}


_RAISING = re.compile(r"(?:Error|Exception|Warning)$")


@dataclass
class _Function:
    node: Node
    lines: set[int] = field(default_factory=set)
    callees: dict[str, set[int]] = field(default_factory=dict)  # callee's last name -> call lines
    count: int = 0


def find_candidates(trace: Trace, pass_: str = "forward", phase: str = "warm") -> list[Candidate]:
    """Device/backend branches in the executed Python functions of one run, in the
    order the functions were first called (guards included: see Candidate.guard)."""
    tree = trace.layer(pass_, "python", phase)
    if tree is None:
        return []
    functions: dict[tuple[str, int], _Function] = {}
    for _, node in tree.walk():
        f = node.frame
        if f.kind != "python" or (f.file, f.line) not in trace.sources:
            continue
        fn = functions.setdefault((f.file, f.line), _Function(node))
        fn.lines.update(node.lines)
        fn.count += node.count
        for c in node.children:
            fn.callees.setdefault(_last(c.frame.name), set()).update(c.call_lines)
    out: list[Candidate] = []
    for key, fn in functions.items():
        out.extend(_analyse(fn, trace.sources[key]))
    return out


def _last(name: str) -> str:
    return re.split(r"[.:]", name.split("(")[0])[-1]


def _parse(source: list[str]) -> ast.Module | None:
    """Parse a function's source, which is indented as in its class or module."""
    text = "\n".join(source)
    for attempt in (textwrap.dedent(text), _strip_first_indent(source)):
        try:
            return ast.parse(attempt)
        except SyntaxError:
            continue
    return None


def _strip_first_indent(source: list[str]) -> str:
    # dedent gives up when a multi-line string sits at column 0; strip the def's own indent instead
    indent = source[0][: len(source[0]) - len(source[0].lstrip())] if source else ""
    return "\n".join(line[len(indent):] if line.startswith(indent) else line for line in source)


def _own_nodes(root: ast.AST) -> Iterator[ast.AST]:
    """ast.walk that does not enter nested functions, lambdas or classes (their lines
    belong to other frames) except the top-level function itself."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            stack.append(child)


def _calls(nodes: Sequence[ast.AST]) -> list[str]:
    seen: dict[str, None] = {}
    for n in nodes:
        for sub in _own_nodes(n):
            if isinstance(sub, ast.Call):
                name = ast.unparse(sub.func)
                seen[name if len(name) <= 60 else name[:28] + "…" + name[-28:]] = None
    return list(seen)


def _analyse(fn: _Function, source: list[str]) -> list[Candidate]:
    shape = _branches(tuple(source))
    if shape is None:
        return []
    branches, following = shape
    offset = fn.node.frame.line - 1  # ast line L is file line L + offset
    out = []
    for node, condition in branches:
        if isinstance(node, ast.If):
            cand = _if(node, fn, source, offset, following.get(id(node)), condition)
        elif isinstance(node, ast.IfExp):
            cand = _ifexp(node, fn, source, offset, condition)
        else:
            cand = _try(node, fn, source, offset, condition)
        if cand is not None:
            out.append(cand)
    return out


#: The statements and expressions that branch: the candidates' kinds.
_Branch = ast.If | ast.IfExp | ast.Try


@functools.lru_cache(maxsize=8192)
def _branches(source: tuple[str, ...]) -> tuple[list[tuple[_Branch, str]], dict[int, ast.stmt]] | None:
    """A function's branches on the device or backend (an if, conditional expression or
    try whose condition names one), with their conditions, in source order, and the
    statement after each statement: all from the source alone, so parsed once per source
    (a survey's report met one function in hundreds of traces, and built the arms of
    every branch it ran before asking whether its condition named a device: 9.3 s of 90).
    None: not a function's source."""
    module = _parse(list(source))
    if module is None or not module.body:
        return None
    top = module.body[0]
    if not isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    nodes = sorted(_own_nodes(top), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
    branches: list[tuple[_Branch, str]] = []
    for node in nodes:
        if isinstance(node, (ast.If, ast.IfExp)):
            condition = ast.unparse(node.test)
        elif isinstance(node, ast.Try):
            condition = _try_condition(node)
        else:
            continue
        if DEVICE_CONDITION.search(condition):
            branches.append((node, condition))
    return branches, _following(nodes)


def _following(nodes: list[ast.AST]) -> dict[int, ast.stmt]:
    """The statement after each statement in its block (id -> next statement)."""
    out: dict[int, ast.stmt] = {}
    for node in nodes:
        for _, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                for here, after in zip(value, value[1:]):
                    out[id(here)] = after
    return out


def _span(stmts: list[ast.stmt]) -> tuple[int, int]:
    return stmts[0].lineno, max(getattr(s, "end_lineno", s.lineno) or s.lineno for s in stmts)


def _arm(label: str, stmts: Sequence[ast.AST], first: int, last: int, fn: _Function, source: list[str],
         offset: int, ran: bool | None = None) -> Arm:
    lo, hi = first + offset, last + offset
    if ran is None and first:
        ran = any(lo <= ln <= hi for ln in fn.lines)
    calls = _calls(stmts)
    observed = [c for c in calls if _last(c) in fn.callees]
    src = [(ln, source[ln - offset - 1]) for ln in range(lo, hi + 1)] if first else []
    raises = bool(stmts) and all(isinstance(st, (ast.Raise, ast.Assert)) for st in stmts)
    return Arm(label, lo if first else 0, hi if first else 0, ran, calls, observed, src, raises)


def _candidate(kind: str, node: ast.stmt | ast.expr, condition: str, arms: list[Arm], fn: _Function,
               offset: int) -> Candidate | None:
    matched = sorted({m.group(0).lower() for m in DEVICE_CONDITION.finditer(condition)})
    if not matched:
        return None
    f = fn.node.frame
    return Candidate(f.label, f.file, f.line, node.lineno + offset, kind, condition, matched, arms, fn.count)


def _if(node: ast.If, fn: _Function, source: list[str], offset: int, after: ast.stmt | None,
        condition: str) -> Candidate | None:
    if node.lineno + offset not in fn.lines:
        return None  # the condition was not evaluated in this run
    first, last = _span(node.body)
    arms = [_arm("if", node.body, first, last, fn, source, offset)]
    if node.orelse:
        o_first, o_last = _span(node.orelse)
        is_elif = (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)
                   and source[node.orelse[0].lineno - 1].lstrip().startswith("elif"))
        arms.append(_arm("elif" if is_elif else "else", node.orelse, o_first, o_last, fn, source, offset))
    elif after is not None and isinstance(node.body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break)):
        # `if cond: return forward_gpu(x)` then `return forward_cpu(x)`: the next
        # statement is the other arm
        a_first, a_last = _span([after])
        arms.append(_arm("after the if", [after], a_first, a_last, fn, source, offset))
    else:
        arms.append(_arm("else (implicit)", [], 0, 0, fn, source, offset, ran=not arms[0].ran))
    label = "elif" if source[node.lineno - 1].lstrip().startswith("elif") else "if"
    arms[0].label = label
    return _candidate("if", node, condition, arms, fn, offset)


def _ifexp(node: ast.IfExp, fn: _Function, source: list[str], offset: int, condition: str) -> Candidate | None:
    lines = range(node.lineno + offset, (node.end_lineno or node.lineno) + offset + 1)
    if not any(ln in fn.lines for ln in lines):
        return None
    arms = []
    for label, expr in (("then", node.body), ("else", node.orelse)):
        calls = _calls([expr])
        observed = [c for c in calls if any(ln in lines for ln in fn.callees.get(_last(c), ()))]
        ran = True if observed else None
        arms.append(Arm(label, expr.lineno + offset, (expr.end_lineno or expr.lineno) + offset, ran, calls, observed,
                        [(expr.lineno + offset, ast.unparse(expr))]))
    if arms[0].ran and arms[1].ran is None:
        arms[1].ran = False
    elif arms[1].ran and arms[0].ran is None:
        arms[0].ran = False
    return _candidate("ifexp", node, condition, arms, fn, offset)


def _try(node: ast.Try, fn: _Function, source: list[str], offset: int, condition: str) -> Candidate | None:
    if node.lineno + offset not in fn.lines and not any(s.lineno + offset in fn.lines for s in node.body):
        return None
    first, last = _span(node.body)
    arms = [_arm("try", node.body, first, last, fn, source, offset)]
    for h in node.handlers:
        t = ast.unparse(h.type) if h.type is not None else ""
        h_first, h_last = h.lineno, _span(h.body)[1]
        arms.append(_arm(f"except {t}".strip(), h.body, h_first, h_last, fn, source, offset))
    if node.orelse:
        o_first, o_last = _span(node.orelse)
        arms.append(_arm("else", node.orelse, o_first, o_last, fn, source, offset))
    return _candidate("try", node, condition, arms, fn, offset)


def _try_condition(node: ast.Try) -> str:
    """What a try stands for as a condition: its first statement and what it catches."""
    types = [(ast.unparse(h.type) if h.type is not None else "") or "everything" for h in node.handlers]
    head = ast.unparse(node.body[0]).splitlines()[0]
    head = head if len(head) <= 80 else head[:77] + "…"
    return f"try: {head} … except {', '.join(types) or '(finally only)'}"

"""C++ symbols as people read them. A demangled kernel symbol runs to hundreds of
characters (``at::internal::invoke_parallel<at::parallel_for<at::native::(anonymous
namespace)::cpu_max_pool<float, false>(…)::{lambda(long, long)#1}>(…)``); the
report shows :func:`display` (``cpu_max_pool (lambda)``) and keeps the full symbol
for hover and in every file it writes. Pure."""

from __future__ import annotations

import re
from functools import lru_cache

_NOISE = re.compile(r"\(anonymous namespace\)::|\{anonymous\}::|`anonymous namespace'::|\s*\[clone [^\]]*\]|"
                    r"\[abi:\w+\]|\bstd::__(?:cxx11|1)::")
#: A lambda's enclosing function: ``scope::name<targs>(params) [const]::{lambda(...)#N}``.
_LAMBDA = re.compile(r"((?:[A-Za-z_~][\w~]*(?:<[^()]*?>)?::)*[A-Za-z_~][\w~]*)(?:<[^()]*?>)?"
                     r"\((?:[^()]|\([^()]*\))*\)(?:\s*const)?::\{lambda")
#: Functions that only run a lambda they are given: the lambda's author is the one to name.
_RUNNERS = frozenset({"parallel_for", "invoke_parallel", "parallel_reduce", "_M_invoke", "operator()", "__invoke_impl",
                      "callback_fn", "parallelFor", "run"})
_RETURN_TYPE = re.compile(r"^(?:void|int|bool|float|double|long|unsigned|auto)\s+(?=[A-Za-z_])")
_SIMPLE_ARG = re.compile(r"^[A-Za-z_][\w ]*$")


def _top_level(text: str, open_: str, close: str) -> list[tuple[int, int]]:
    """Spans (start, end) of the outermost ``open_ ... close`` groups."""
    spans, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == open_:
            if depth == 0:
                start = i
            depth += 1
        elif ch == close and depth:
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1))
    return spans


def _without_parameters(name: str) -> str:
    """``f<T>(int, float) const`` -> ``f<T>``: the last top-level parameter list and
    what follows it go."""
    spans = _top_level(name, "(", ")")
    if spans and not name[spans[-1][1]:].strip().startswith("::"):
        return name[: spans[-1][0]].rstrip()
    return name


def _short_templates(name: str) -> str:
    """Template arguments kept only when they are one simple type: ``<float>``;
    anything longer is ``<…>``."""
    out, last = [], 0
    for start, end in _top_level(name, "<", ">"):
        inner = name[start + 1: end - 1]
        first = inner.split(",")[0].strip()
        out.append(name[last:start])
        out.append(f"<{first}>" if _SIMPLE_ARG.match(first) and "<" not in inner else "<…>")
        last = end
    out.append(name[last:])
    return "".join(out)


@lru_cache(maxsize=1 << 14)
def display(symbol: str, width: int = 90) -> str:
    """A short form of a C++ symbol for tables and drawings (see module doc); other
    names come back as they are, cut to ``width``."""
    text = _RETURN_TYPE.sub("", _NOISE.sub("", symbol).strip())
    if "::{lambda" in text:
        for scope in _LAMBDA.findall(text):
            parts = _short_templates(scope).split("::")
            if parts[-1] in _RUNNERS:
                continue
            # a method names its class (jit_uni_softmax_fwd_t::execute), a function only itself
            owner = parts[-2] if len(parts) > 1 and (parts[-2][:1].isupper() or parts[-2].endswith("_t")) else ""
            return f"{owner + '::' if owner else ''}{parts[-1]} (lambda)"
    if "(" in text or "<" in text:
        text = _short_templates(_without_parameters(text))
    if len(text) > width:
        text = "…" + text[-(width - 1):]
    return text

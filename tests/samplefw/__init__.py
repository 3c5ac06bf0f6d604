"""A tiny pure-Python "framework" whose call patterns the tracer tests check."""

import ctypes

import markupsafe
from markupsafe._speedups import _escape_inner  # a C function outside the standard library

from tests.samplefw import backend

_LIB = ctypes.CDLL(None)  # as mxnet reaches libmxnet: through ctypes


def forward(x, device="cpu"):
    if device == "gpu":
        return backend.forward_gpu(x)
    return backend.forward_cpu(x)


def recurse(n):
    return 0 if n == 0 else recurse(n - 1) + 1


def through_callback(fn, x):
    """Framework -> user code -> framework: the user frame must be transparent."""
    return fn(x)


def handoff(text):
    len(text)  # a builtin: standard library, not a hand-off
    return _escape_inner(text)


def via_ctypes(n):
    return _LIB.abs(n)


def via_library(text):
    """markupsafe.escape is another library's Python code (an "ext" hand-off)."""
    return markupsafe.escape(text)


def failing():
    raise ValueError("boom")


def catches():
    try:
        failing()
    except ValueError:
        return "caught"


def gen(n):
    for i in range(n):
        yield backend.double(i)


GENERATED = {}
exec(compile("def generated(x):\n    return x + 1\n", "<string>", "exec"), {"__name__": "tests.samplefw.gen_ops"},
     GENERATED)
generated = GENERATED["generated"]

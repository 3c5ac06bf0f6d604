"""The Python-level collector with its per-event work in C (``_ctrace.c``).

A :class:`CTracer` is a :class:`~tracer.collect.pytrace.PythonTracer` whose
``record`` runs the C core: the decisions stay PythonTracer's (which code is the
framework's, which C function is a hand-off, which lines a function reports, where
it calls ctypes), made once per code object or C function and called back from C;
the events, the open nodes and the tree are handled in C. So both collectors
build the same tree (tests/test_ctrace.py checks it node by node on real
frameworks), and everything after recording cannot tell them apart, except by the
trace's ``meta.collector``.
"""

from __future__ import annotations

import gc
from types import ModuleType
from typing import Any, Callable, Iterable

from tracer.collect.pytrace import PythonTracer
from tracer.trace import Frame, Node


class CTracer(PythonTracer):
    """Records one call tree per :meth:`record` call, with the C core ``module``
    (tracer.collect.cbuild.load())."""

    def __init__(self, module: ModuleType, roots: Iterable[str], root_name: str = "probe"):
        super().__init__(roots, root_name)
        self.collector = {"python": "c"}
        self._core = module.Core(Node)

    def record(self, fn: Callable[[], Any], label: str | None = None) -> tuple[Node, Any]:
        """Call ``fn()`` under the C hooks; return (call tree, fn's result). The
        cyclic GC is off meanwhile, as in PythonTracer.record."""
        root = self._kind(Frame("root", "", label or self.root_name))
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._core.record(fn, root, self._classify_code, self._classify_c, self._ctypes)
        finally:
            if gc_was_enabled:
                gc.enable()

"""The Python-level collector with its per-event work in C (tracer/collect/ctrace/).

A :class:`CTracer` is a :class:`~tracer.collect.pytrace.PythonTracer` whose
``record`` runs the C core: the decisions stay PythonTracer's (which code is the
framework's, which C function is a hand-off, which lines a function reports, where
it calls ctypes), made once per code object or C function and called back from C;
the events, the open nodes and the tree are handled in C. So both collectors
build the same tree (tests/test_ctrace.py checks it node by node on real
frameworks), and everything after recording cannot tell them apart, except by the
trace's ``meta.collector``. One difference in where a line comes from: a framework
function passed itself as ``fn`` is called by the collector's own code, so its
calling line is a line of pytrace.py there and of this module here (the harness
passes the probe's steps, never framework functions).

Beside other tools: one recording at a time, per thread on 3.11 (profile functions
are per thread), per process on 3.12+ (sys.monitoring's events are the process's);
a recording started inside another is refused with a RuntimeError, not allowed to
cut the outer tree short. Another tool's profile and trace functions (coverage.py,
a debugger) miss the recording's events and are there again after it. Code objects
and the classes of C methods are not kept: the core's cache entry of one leaves with it.
"""

from __future__ import annotations

import dataclasses
import gc
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any, Callable, Iterable

from tracer.collect.pytrace import PythonTracer, _Kind
from tracer.trace import Frame, Node

if TYPE_CHECKING:  # the module itself is built and loaded at run time (tracer/collect/cbuild.py)
    from tracer.collect._ctrace import Core, _How


class CTracer(PythonTracer):
    """Records one call tree per :meth:`record` call, with the C core ``module``
    (tracer.collect.cbuild.load())."""

    def __init__(self, module: ModuleType, roots: Iterable[str], root_name: str = "probe"):
        super().__init__(roots, root_name)
        self.collector = {"python": "c"}
        core_type: type[Core[Node]] = module.Core
        self._core = core_type(Node, _node_fields())
        self._roots: dict[str | None, _Kind] = {}  # label -> the root's kind (a Frame costs µs to make)

    def record(self, fn: Callable[[], Any], label: str | None = None) -> tuple[Node, Any]:
        """Call ``fn()`` under the C hooks; return (call tree, fn's result). The
        cyclic GC is off meanwhile, as in PythonTracer.record."""
        root = self._roots.get(label)
        if root is None:
            root = self._roots[label] = self._kind(Frame("root", "", label or self.root_name))
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:  # not a generator-based context manager: its exit allocates after gc.enable(),
            # starting a collection while the new tree is alive (60 µs a step on chainer's relu)
            return self._core.record(fn, root, self._classify_new_code, self._classify_new_c)
        finally:
            if gc_was_enabled:
                gc.enable()


    def _classify_new_code(self, frame: FrameType) -> tuple[_Kind, _How] | None:
        """PythonTracer's classification of a code object the core has not seen, as the
        core caches it: where the code calls ctypes, the calls themselves. The core keeps
        its answer for as long as the code object lives; PythonTracer's own caches by
        id(code), and the code objects it keeps alive for them, would only grow."""
        hit = self._classify_code(frame)
        key = id(frame.f_code)
        self._code.pop(key, None)
        self._alive.clear()
        calls = self._ctypes.pop(key, None)
        if hit is not None and hit[1] == "ctypes" and calls is not None:
            return hit[0], calls
        return hit

    def _classify_new_c(self, fn: Any) -> tuple[_Kind | None, _Kind | None]:
        """PythonTracer's classification of a C function the core has not seen; the core
        keeps its answer for as long as the function's owner (a class, a module) lives,
        PythonTracer's own cache would keep every class whose methods ran."""
        hit = self._classify_c(fn)
        self._cfn.clear()
        return hit


#: Node's fields, in the order of its generated __init__, as the C core sets them.
_FIELDS = ("frame", "count", "time_ns", "call_lines", "lines", "children")


def _node_fields() -> tuple[str, ...] | None:
    """Node's field names where the C core may create a node as object.__new__(Node)
    plus its six attributes (a plain dataclass with these fields, nothing run after
    __init__); None makes it call Node(...) itself."""
    names = tuple(f.name for f in dataclasses.fields(Node))
    plain = (names == _FIELDS and not hasattr(Node, "__post_init__")
             and Node.__setattr__ is object.__setattr__)  # the core sets them as object.__setattr__ does
    return names if plain else None

"""Python-level collector: sys.setprofile for calls (Python and C), sys.settrace for
the lines that ran inside framework functions.

Only frames inside the framework's source roots become nodes; other frames (the
probe, the standard library, a library's internals) are transparent, so a
framework function called through them still hangs under its nearest framework
ancestor. The decision is cached per code object, and line events are only
switched on for framework frames, which keeps the cost per event small.

Three kinds of hand-off out of the framework are recorded, because each is where
a port has to look:
  c    a builtin or extension function (torch._C..., _pywrap_tfe...), seen as c_call;
  c    a ctypes call (mxnet's ``_LIB.MXImperativeInvokeEx``), which raises no
       profiler event: found in the bytecode of framework functions, recorded when
       its line runs;
  ext  a direct call from framework code into another library's Python code
       (numpy.tensordot from chainer: numpy >= 1.25 dispatchers raise no c_call),
       kept one level deep, with the C functions it calls.
"""

from __future__ import annotations

import dis
import gc
import inspect
import os
import sys
import time
from types import CodeType, FrameType, ModuleType
from typing import Any, Callable, Iterable, Literal

from tracer.trace import Frame, Node

_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"builtins"}
_NEVER = ("tracer",)  # dltrace's own code (its probes are tracer.probes) is never part of a trace
_SKIP = None


def _ctypes_calls(frame: FrameType) -> dict[int, list[tuple[int, str, str]]]:
    """Where this frame's code calls a function of a ctypes library held in a global
    (``_LIB.MXNDArrayWaitToRead(...)``): offset of the line start -> [(line, library,
    symbol)]. Keyed by offset, not line: a call spread over several lines re-enters
    its first line after the arguments, and must still count once."""
    import ctypes
    import dis

    code, g = frame.f_code, frame.f_globals
    libs = {n: g[n] for n in code.co_names if isinstance(g.get(n), ctypes.CDLL)}
    if not libs:
        return {}
    found: dict[int, list[tuple[int, str, str]]] = {}
    line, start = code.co_firstlineno, 0
    pending = None
    for ins in dis.get_instructions(code):
        if ins.starts_line is not None:
            line, start = ins.starts_line, ins.offset
        if ins.opname == "LOAD_GLOBAL" and ins.argval in libs:
            pending = libs[ins.argval]
        elif pending is not None and ins.opname in ("LOAD_ATTR", "LOAD_METHOD"):
            lib = os.path.basename(getattr(pending, "_name", "") or "") or "ctypes"
            found.setdefault(start, []).append((line, lib, ins.argval))
            pending = None
        elif ins.opname not in ("PRECALL", "CACHE", "NOP"):
            pending = None
    return found


# Opcodes after which different lines may run: a function without any of them (and
# without exception handlers) runs all its lines whenever it runs to completion.
_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)
_RESUME = dis.opmap["RESUME"]
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE


def _may_branch(code: CodeType) -> bool:
    """Whether which lines run can differ between calls: only such functions need
    line events (which cost a Python callback per line), the others' lines are known
    from the code itself."""
    return (bool(code.co_exceptiontable)
            or bool(code.co_flags & _RESUMABLE) or not _JUMPS.isdisjoint(code.co_code[::2]))


def _static_lines(code: CodeType) -> frozenset[int]:
    """The lines a branch-free function reports when it runs (all but RESUME's);
    one that raises part-way is credited with them all, the price of not tracing
    it. co_positions() has one entry per code unit, as co_code has two bytes."""
    positions = code.co_positions()
    return frozenset(pos[0] for op, pos in zip(code.co_code[::2], positions)
                     if op != _RESUME and pos[0] is not None)


class _Kind:
    """One distinct Frame while recording: children are keyed by it (identity hash,
    no dataclass __hash__ per event)."""

    __slots__ = ("frame", "is_c", "is_ext")

    def __init__(self, frame: Frame):
        self.frame = frame
        self.is_c = frame.kind == "c"
        self.is_ext = frame.kind == "ext"


class _Rec:
    """Mutable node used while recording. A node is open at most once at a time (a
    recursive call is a child node), so its start time and the frame that opened it
    live on the node itself: no per-event allocation of stack entries."""

    __slots__ = ("kind", "count", "time_ns", "call_lines", "lines", "static", "kids", "owner", "t0", "is_c", "is_ext")

    def __init__(self, kind: _Kind):
        self.kind = kind
        self.is_c = kind.is_c
        self.is_ext = kind.is_ext
        self.count = 0
        self.time_ns = 0
        self.t0 = 0
        self.owner: FrameType | None = None  # the frame running it (for a C call: its caller)
        self.call_lines: set[int] = set()
        self.lines: set[int] = set()
        # The line sets of the branch-free code objects that ran as this node (one
        # Frame can have several, e.g. dataclass-generated __init__s): known statically.
        self.static: set[frozenset[int]] = set()
        self.kids: dict[_Kind, _Rec] = {}

    def to_node(self) -> Node:
        """The finished tree (GC off, few calls per node: this runs once per record)."""
        lines = self.lines.union(*self.static) if self.static else self.lines
        root = Node(self.kind.frame, self.count, self.time_ns, sorted(self.call_lines), sorted(lines))
        stack = [(self, root)]
        while stack:
            rec, node = stack.pop()
            children = node.children
            for kid in rec.kids.values():
                lines = kid.lines.union(*kid.static) if kid.static else kid.lines
                calls = kid.call_lines
                child = Node(kid.kind.frame, kid.count, kid.time_ns, sorted(calls) if len(calls) > 1 else [*calls],
                             sorted(lines) if len(lines) > 1 else [*lines])
                children.append(child)
                if kid.kids:
                    stack.append((kid, child))
        return root


class Roots:
    """Which code counts as "inside the framework": by module name (needed for code
    generated with exec, whose file is '<string>') or by file under a root package."""

    def __init__(self, modules: Iterable[str]):
        self.modules = tuple(modules)
        self.dirs: tuple[str, ...] = ()
        dirs = []
        for name in self.modules:
            mod = sys.modules.get(name)
            for d in getattr(mod, "__path__", None) or ():
                dirs.append(os.path.realpath(d) + os.sep)
        self.dirs = tuple(dirs)
        # Relative file names: strip the sys.path entry so traces compare across machines.
        self._bases = sorted({os.path.realpath(p) + os.sep for p in sys.path if p}, key=len, reverse=True)
        self._real: dict[str, str] = {}  # realpath costs a stat per path component: once per file

    def _realpath(self, filename: str) -> str:
        real = self._real.get(filename)
        if real is None:
            real = self._real[filename] = os.path.realpath(filename)
        return real

    def module_in(self, module: str | None) -> bool:
        if not module:
            return False
        top = module.partition(".")[0]
        if top in _NEVER:
            return False
        return any(module == m or module.startswith(m + ".") for m in self.modules)

    def file_in(self, filename: str) -> bool:
        return bool(self.dirs) and self._realpath(filename).startswith(self.dirs)

    def relative(self, filename: str) -> str:
        if filename.startswith("<"):
            return filename
        real = self._realpath(filename)
        for base in self._bases:
            if real.startswith(base):
                return real[len(base):]
        return os.path.basename(filename)


def _c_identity(fn: Any) -> tuple[Any, str, str]:
    """(cache key, owning module, qualified name) of a builtin or C method."""
    owner = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", None) or repr(fn)
    if owner is None or isinstance(owner, ModuleType):
        module = getattr(fn, "__module__", None) or (owner.__name__ if owner is not None else "")
        return fn, module or "", getattr(fn, "__qualname__", name)
    cls = owner if isinstance(owner, type) else type(owner)
    module = getattr(fn, "__module__", None) or cls.__module__
    if cls.__name__.startswith("pybind11_") or cls.__name__ == "PyCapsule":
        # pybind11 module functions are bound to an internal object (a function record,
        # or a PyCapsule in older pybind11): they are module functions.
        return fn, module, name
    return (cls, name), module, f"{cls.__qualname__}.{name}"


class PythonTracer:
    """Records one call tree per :meth:`record` call.

    ``roots`` are the framework's top-level module names; ``sources`` collects the
    source of every framework function seen, for the report's code fragments.
    """

    def __init__(self, roots: Iterable[str], root_name: str = "probe"):
        #: which collector this is, for the trace's meta (tracer/collect/collector.py)
        self.collector: dict[str, str] = {"python": "python"}
        self.roots = Roots(roots)
        self.root_name = root_name
        self._kinds: dict[Frame, _Kind] = {}
        # Caches keyed by id(code): hashing a code object hashes its constants, names
        # and line table each time (~0.5 µs), an id costs nothing. The code objects are
        # kept alive in _alive, so that an id is never reused while cached.
        self._code: dict[int, tuple[_Kind, str | frozenset[int]] | None] = {}
        self._alive: list[CodeType] = []
        self._cfn: dict[Any, tuple[_Kind | None, _Kind | None]] = {}
        self._ctypes: dict[int, dict[int, list[tuple[int, _Kind]]]] = {}
        self.sources: dict[tuple[str, int], list[str]] = {}

    def _kind(self, frame: Frame) -> _Kind:
        kind = self._kinds.get(frame)
        if kind is None:
            kind = self._kinds[frame] = _Kind(frame)
        return kind

    # ------------------------------------------------------------------ classification
    def _classify_code(self, frame: FrameType) -> tuple[_Kind, str | frozenset[int]] | None:
        """(kind, how its lines are known) or None (transparent). The kind is a python
        Frame (framework code) or an ext Frame (another library's code, kept only when
        framework code calls it directly). Lines: "lines" (traced: it may branch),
        "ctypes" (traced: it calls ctypes), a frozenset (branch-free: known), "" (none)."""
        code = frame.f_code
        module = frame.f_globals.get("__name__") or ""
        top = module.partition(".")[0]
        qual = getattr(code, "co_qualname", code.co_name)
        result: tuple[_Kind, str | frozenset[int]] | None = _SKIP
        if top in _NEVER or code.co_filename.startswith("<frozen"):
            pass
        elif self.roots.module_in(module) or self.roots.file_in(code.co_filename):
            rel = self.roots.relative(code.co_filename)
            kind = self._kind(Frame("python", module, qual, rel, code.co_firstlineno))
            self._remember_source(code, rel)
            calls = _ctypes_calls(frame)
            if calls:
                self._ctypes[id(code)] = {off: [(ln, self._kind(Frame("c", lib, sym))) for ln, lib, sym in c]
                                          for off, c in calls.items()}
                result = (kind, "ctypes")
            else:
                result = (kind, "lines" if _may_branch(code) else _static_lines(code))
        elif top and top not in _STDLIB and top != "__main__":
            result = (self._kind(Frame("ext", module, qual, self.roots.relative(code.co_filename),
                                       code.co_firstlineno)), "")
        self._code[id(code)] = result
        self._alive.append(code)
        return result

    def _remember_source(self, code: CodeType, rel: str) -> None:
        key = (rel, code.co_firstlineno)
        if key in self.sources:
            return
        import linecache

        lines = linecache.getlines(code.co_filename)
        if not lines:
            return
        last = max((ln for _, _, ln in code.co_lines() if ln is not None), default=code.co_firstlineno)
        last = min(last, code.co_firstlineno + 400)
        self.sources[key] = [line.rstrip("\n") for line in lines[code.co_firstlineno - 1 : last]]

    def _classify_c(self, fn: Any) -> tuple[_Kind | None, _Kind | None]:
        """(kind when called from a kept frame, kind otherwise) of a builtin or C
        method; cached by the function itself where it is bound to something that
        lives on (a module, a class), else by (owner's class, name)."""
        owner = getattr(fn, "__self__", None)
        cls = type(owner)
        if owner is not None and cls is not ModuleType and not isinstance(owner, type):
            hit = self._cfn.get((cls, fn.__name__))  # a method of an instance: list.append, Tensor.size
            if hit is not None:
                return hit
        key, module, qual = _c_identity(fn)
        try:
            hit = self._cfn.get(key)
        except TypeError:  # unhashable owner
            key = (type(fn), qual)
            hit = self._cfn.get(key)
        if hit is None:
            inside = self.roots.module_in(module)
            kind = self._kind(Frame("c", module, qual))
            hit = self._cfn[key] = (kind if inside or module.partition(".")[0] not in _STDLIB else _SKIP,
                                    kind if inside else _SKIP)
        if isinstance(owner, type):
            self._cfn[fn] = hit  # a class method lives as long as its class: found by itself next time
        return hit

    # ------------------------------------------------------------------ recording
    def record(self, fn: Callable[[], Any], label: str | None = None) -> tuple[Node, Any]:
        """Call ``fn()`` under the tracer; return (call tree, fn's result).

        Calls come from sys.setprofile. Line events need a trace function too, but
        only framework functions that may branch (or call ctypes) get one, set on
        their frame from the profile callback; the global trace function is the
        builtin ``getattr`` (``getattr(frame, "call", None)`` is None: no frame gets a
        local tracer from it), so every other frame costs no Python callback.
        """
        root = _Rec(self._kind(Frame("root", "", label or self.root_name)))
        root.count = 1
        stack: list[_Rec] = [root]  # open kept nodes; transparent frames push nothing
        push, pop = stack.append, stack.pop
        codes_get = self._code.get
        ctypes_lines = self._ctypes
        cfn_get = self._cfn.get
        classify_code = self._classify_code
        classify_c = self._classify_c
        clock = time.perf_counter_ns

        def on_profile(frame: FrameType, event: str, arg: Any) -> None:
            if event == "call":
                # False: not classified yet (a local annotation costs nothing at run time)
                hit: tuple[_Kind, str | frozenset[int]] | Literal[False] | None = codes_get(id(frame.f_code), False)
                if hit is None:
                    return
                if hit is False:
                    hit = classify_code(frame)
                    if hit is None:
                        return
                info, how = hit
                top = stack[-1]
                caller = top.owner  # innermost kept frame (a C call's caller); None at the root
                if info.is_ext and (caller is None or caller is not frame.f_back or top.is_ext):
                    return  # an ext frame only counts when framework code calls it directly
                rec = top.kids.get(info)
                if rec is None:
                    rec = top.kids[info] = _Rec(info)
                rec.count += 1
                if caller is None:
                    caller = frame.f_back
                if caller is not None:
                    rec.call_lines.add(caller.f_lineno)
                rec.owner = frame
                if how:
                    if how.__class__ is frozenset:
                        rec.static.add(how)
                    else:
                        frame.f_trace = on_line if how == "lines" else on_line_ctypes
                push(rec)
                rec.t0 = clock()
            elif event == "return":
                top = stack[-1]
                if top.owner is frame and not top.is_c:
                    top.time_ns += clock() - top.t0
                    top.owner = None
                    pop()
            elif event == "c_call":
                top = stack[-1]
                c_hit = cfn_get(arg)
                if c_hit is None:
                    c_hit = classify_c(arg)
                c_info = c_hit[0] if top.owner is frame else c_hit[1]
                if c_info is None:
                    return
                rec = top.kids.get(c_info)
                if rec is None:
                    rec = top.kids[c_info] = _Rec(c_info)
                rec.count += 1
                rec.call_lines.add(frame.f_lineno)
                rec.owner = frame
                push(rec)
                rec.t0 = clock()
            else:  # c_return, c_exception
                top = stack[-1]
                if top.owner is frame and top.is_c:
                    top.time_ns += clock() - top.t0
                    top.owner = None
                    pop()

        def on_line(frame: FrameType, event: str, arg: Any) -> None:
            if event == "line":
                stack[-1].lines.add(frame.f_lineno)

        def on_line_ctypes(frame: FrameType, event: str, arg: Any) -> None:
            if event == "line":
                rec = stack[-1]
                rec.lines.add(frame.f_lineno)
                calls = ctypes_lines[id(frame.f_code)].get(frame.f_lasti)
                if calls is not None:
                    for ln, info in calls:
                        kid = rec.kids.get(info)
                        if kid is None:
                            kid = rec.kids[info] = _Rec(info)
                        kid.count += 1
                        kid.call_lines.add(ln)

        # The cyclic GC is off while recording, as timeit does: the tracer's own
        # bookkeeping objects would otherwise trigger collections inside the traced
        # program (slowing it, and putting GC callbacks such as jax's into the trace).
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            t0 = clock()
            sys.settrace(getattr)
            sys.setprofile(on_profile)
            try:
                result = fn()
            finally:
                sys.setprofile(None)
                sys.settrace(None)
            root.time_ns = clock() - t0
            return root.to_node(), result
        finally:
            if gc_was_enabled:
                gc.enable()

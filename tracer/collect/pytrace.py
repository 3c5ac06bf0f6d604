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

import os
import sys
import time
from types import CodeType, FrameType, ModuleType
from typing import Any, Callable, Iterable

from tracer.trace import Frame, Node

_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"builtins"}
_NEVER = ("tracer", "probes")  # dltrace's own code is never part of a trace
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


class _Rec:
    """Mutable node used while recording (plain slots, no per-event allocation)."""

    __slots__ = ("frame", "count", "time_ns", "call_lines", "lines", "kids")

    def __init__(self, frame: Frame):
        self.frame = frame
        self.count = 0
        self.time_ns = 0
        self.call_lines: set[int] = set()
        self.lines: set[int] = set()
        self.kids: dict[Any, _Rec] = {}

    def to_node(self) -> Node:
        root = Node(self.frame, self.count, self.time_ns, sorted(self.call_lines), sorted(self.lines))
        stack = [(self, root)]
        while stack:
            rec, node = stack.pop()
            for kid in rec.kids.values():
                child = Node(kid.frame, kid.count, kid.time_ns, sorted(kid.call_lines), sorted(kid.lines))
                node.children.append(child)
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

    def module_in(self, module: str | None) -> bool:
        if not module:
            return False
        top = module.partition(".")[0]
        if top in _NEVER:
            return False
        return any(module == m or module.startswith(m + ".") for m in self.modules)

    def file_in(self, filename: str) -> bool:
        return bool(self.dirs) and os.path.realpath(filename).startswith(self.dirs)

    def relative(self, filename: str) -> str:
        if filename.startswith("<"):
            return filename
        real = os.path.realpath(filename)
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
        self.roots = Roots(roots)
        self.root_name = root_name
        self._code: dict[CodeType, Frame | None] = {}
        self._cfn: dict[Any, Frame | None] = {}
        self._ctypes: dict[CodeType, dict[int, list[tuple[int, Frame]]]] = {}
        self.sources: dict[tuple[str, int], list[str]] = {}

    # ------------------------------------------------------------------ classification
    def _classify_code(self, frame: FrameType) -> Frame | None:
        """A python Frame (framework code), an ext Frame (another library's code,
        kept only when framework code calls it directly), or None (transparent)."""
        code = frame.f_code
        module = frame.f_globals.get("__name__") or ""
        top = module.partition(".")[0]
        qual = getattr(code, "co_qualname", code.co_name)
        if top in _NEVER or code.co_filename.startswith("<frozen"):
            result = _SKIP
        elif self.roots.module_in(module) or self.roots.file_in(code.co_filename):
            rel = self.roots.relative(code.co_filename)
            result = Frame("python", module, qual, rel, code.co_firstlineno)
            self._remember_source(code, rel)
            calls = _ctypes_calls(frame)
            if calls:
                self._ctypes[code] = {off: [(ln, Frame("c", lib, sym)) for ln, lib, sym in c] for off, c in calls.items()}
        elif top and top not in _STDLIB and top != "__main__":
            result = Frame("ext", module, qual, self.roots.relative(code.co_filename), code.co_firstlineno)
        else:
            result = _SKIP
        self._code[code] = result
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
        self.sources[key] = [l.rstrip("\n") for l in lines[code.co_firstlineno - 1 : last]]

    def _classify_c(self, fn: Any, caller_kept: bool) -> tuple[Any, Frame | None]:
        key, module, qual = _c_identity(fn)
        try:
            hit = self._cfn[(key, caller_kept)]
            return key, hit
        except KeyError:
            pass
        except TypeError:  # unhashable owner
            key = (type(fn), qual)
        keep = self.roots.module_in(module) or (caller_kept and module.partition(".")[0] not in _STDLIB)
        result = Frame("c", module, qual) if keep else _SKIP
        self._cfn[(key, caller_kept)] = result
        return key, result

    # ------------------------------------------------------------------ recording
    def record(self, fn: Callable[[], Any], label: str | None = None) -> tuple[Node, Any]:
        """Call ``fn()`` under the tracer; return (call tree, fn's result)."""
        root = _Rec(Frame("root", "", label or self.root_name))
        root.count = 1
        stack: list[_Rec] = [root]  # one entry per open frame; transparent frames repeat the parent
        starts: list[int] = [0]
        kept_frames: list[FrameType | None] = [None]  # innermost framework frame per entry
        codes = self._code
        ctypes_lines = self._ctypes
        classify_code = self._classify_code
        classify_c = self._classify_c
        clock = time.perf_counter_ns

        def on_profile(frame: FrameType, event: str, arg: Any) -> None:
            if event == "call":
                info = codes.get(frame.f_code, False)
                if info is False:
                    info = classify_code(frame)
                parent = stack[-1]
                caller = kept_frames[-1]
                if info is None or (
                    info.kind == "ext" and (caller is None or caller is not frame.f_back or parent.frame.kind == "ext")
                ):
                    # transparent; an ext frame only counts when framework code calls it directly
                    stack.append(parent)
                    kept_frames.append(caller)
                    starts.append(0)
                    return
                rec = parent.kids.get(info)
                if rec is None:
                    rec = parent.kids[info] = _Rec(info)
                rec.count += 1
                if caller is None:
                    caller = frame.f_back
                if caller is not None:
                    rec.call_lines.add(caller.f_lineno)
                stack.append(rec)
                kept_frames.append(frame)
                starts.append(clock())
            elif event == "return":
                if len(stack) > 1:
                    rec = stack.pop()
                    kept_frames.pop()
                    t0 = starts.pop()
                    if t0:
                        rec.time_ns += clock() - t0
            elif event == "c_call":
                caller_kept = kept_frames[-1] is frame
                key, info = classify_c(arg, caller_kept)
                parent = stack[-1]
                if info is None:
                    stack.append(parent)
                    kept_frames.append(kept_frames[-1])
                    starts.append(0)
                    return
                rec = parent.kids.get(info)
                if rec is None:
                    rec = parent.kids[info] = _Rec(info)
                rec.count += 1
                rec.call_lines.add(frame.f_lineno)
                stack.append(rec)
                kept_frames.append(kept_frames[-1])
                starts.append(clock())
            else:  # c_return, c_exception
                if len(stack) > 1:
                    rec = stack.pop()
                    kept_frames.pop()
                    t0 = starts.pop()
                    if t0:
                        rec.time_ns += clock() - t0

        def on_line(frame: FrameType, event: str, arg: Any):
            if event == "line":
                rec = stack[-1]
                line = frame.f_lineno
                rec.lines.add(line)
                calls = ctypes_lines.get(frame.f_code)
                if calls is not None and frame.f_lasti in calls:
                    for ln, info in calls[frame.f_lasti]:
                        kid = rec.kids.get(info)
                        if kid is None:
                            kid = rec.kids[info] = _Rec(info)
                        kid.count += 1
                        kid.call_lines.add(ln)
            return on_line

        def on_trace(frame: FrameType, event: str, arg: Any):
            info = codes.get(frame.f_code, False)
            if info is False:
                info = classify_code(frame)
            return on_line if info is not None and info.kind == "python" else None

        t0 = clock()
        sys.settrace(on_trace)
        sys.setprofile(on_profile)
        try:
            result = fn()
        finally:
            sys.setprofile(None)
            sys.settrace(None)
        root.time_ns = clock() - t0
        return root.to_node(), result
